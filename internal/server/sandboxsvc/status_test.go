package sandboxsvc_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/plumbhq/plumb/internal/server/sandboxsvc"
	"github.com/plumbhq/plumb/internal/server/servertest"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
)

// Every sandbox lifecycle code maps to its gRPC code with the code as the
// reason, the broken limit as metadata and the bad field as a violation;
// file errors and cancellation map as for every service.
func TestStatus(t *testing.T) {
	type want = servertest.Want
	tests := []struct {
		name string
		err  error
		want want
	}{
		{"nil", nil, want{Code: codes.OK}},
		{"not found", &sandboxapi.Error{Code: sandboxapi.CodeNotFound, Message: "gone"}, want{Code: codes.NotFound, Reason: string(sandboxapi.CodeNotFound)}},
		{"quota", &sandboxapi.Error{Code: sandboxapi.CodeQuota, Message: "full", Limit: "per_tenant.max_cpus"},
			want{Code: codes.ResourceExhausted, Reason: string(sandboxapi.CodeQuota), Metadata: map[string]string{"limit": "per_tenant.max_cpus"}}},
		{"image not found", &sandboxapi.Error{Code: sandboxapi.CodeImageNotFound}, want{Code: codes.FailedPrecondition, Reason: string(sandboxapi.CodeImageNotFound)}},
		{"invalid field", &sandboxapi.Error{Code: sandboxapi.CodeInvalid, Message: "bad cpus", Field: "cpus"},
			want{Code: codes.InvalidArgument, Reason: string(sandboxapi.CodeInvalid), Fields: []string{"cpus"}}},
		{"failed", &sandboxapi.Error{Code: sandboxapi.CodeFailed, Err: errors.New("exit 137")}, want{Code: codes.FailedPrecondition, Reason: string(sandboxapi.CodeFailed)}},
		{"unavailable", &sandboxapi.Error{Code: sandboxapi.CodeUnavailable}, want{Code: codes.Unavailable, Reason: string(sandboxapi.CodeUnavailable)}},
		{"shutting down", &sandboxapi.Error{Code: sandboxapi.CodeShuttingDown}, want{Code: codes.Unavailable, Reason: string(sandboxapi.CodeShuttingDown)}},
		{"slow consumer", &sandboxapi.Error{Code: sandboxapi.CodeSlowConsumer}, want{Code: codes.ResourceExhausted, Reason: string(sandboxapi.CodeSlowConsumer)}},
		{"policy", &sandboxapi.Error{Code: sandboxapi.CodePolicy, Limit: "allowed_images"},
			want{Code: codes.PermissionDenied, Reason: string(sandboxapi.CodePolicy), Metadata: map[string]string{"limit": "allowed_images"}}},
		{"file error first", &sandboxapi.Error{Code: sandboxapi.CodeFailed, Err: backend.Errorf(backend.CodeFileNotFound, "/a", "no /a")},
			want{Code: codes.NotFound, Reason: string(backend.CodeFileNotFound), Metadata: map[string]string{"path": "/a"}}},
		{"cancelled", context.Canceled, want{Code: codes.Canceled}},
		{"unknown", errors.New("disk on fire"), want{Code: codes.Internal}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			servertest.Check(t, sandboxsvc.Status(tt.err), tt.want)
		})
	}
}
