package pbconv_test

import (
	"errors"
	"maps"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
)

// statusErr builds a status error of code c with the given details.
func statusErr(t *testing.T, c codes.Code, msg string, details ...protoadapt.MessageV1) error {
	t.Helper()
	st, err := status.New(c, msg).WithDetails(details...)
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

func TestFileError(t *testing.T) {
	info := func(reason string, md map[string]string) *errdetails.ErrorInfo {
		return &errdetails.ErrorInfo{Reason: reason, Domain: "plumb.dev", Metadata: md}
	}
	tests := []struct {
		name    string
		err     error
		code    backend.Code
		path    string
		details map[string]string
	}{
		{"file-engine reason with path and details", statusErr(t, codes.NotFound, "no /a",
			info(string(backend.CodeFileNotFound), map[string]string{"path": "/a", "link": "/b"})),
			backend.CodeFileNotFound, "/a", map[string]string{"link": "/b"}},
		{"file-engine reason under another gRPC code", statusErr(t, codes.FailedPrecondition, "too big",
			info(string(backend.CodeTooLarge), nil)), backend.CodeTooLarge, "", nil},
		{"sandbox reason NOT_FOUND", statusErr(t, codes.NotFound, "no sandbox", info("not_found", nil)), backend.CodeUnavailable, "", nil},
		{"no details, FAILED_PRECONDITION", status.Error(codes.FailedPrecondition, "x"), backend.CodeUnavailable, "", nil},
		{"no details, UNAVAILABLE", status.Error(codes.Unavailable, "x"), backend.CodeUnavailable, "", nil},
		{"no details, RESOURCE_EXHAUSTED", status.Error(codes.ResourceExhausted, "x"), backend.CodeUnavailable, "", nil},
		{"no details, CANCELED", status.Error(codes.Canceled, "x"), backend.CodeCancelled, "", nil},
		{"no details, DEADLINE_EXCEEDED", status.Error(codes.DeadlineExceeded, "x"), backend.CodeTimeout, "", nil},
		{"no details, INVALID_ARGUMENT", status.Error(codes.InvalidArgument, "x"), backend.CodeInvalidArgument, "", nil},
		{"no details, UNIMPLEMENTED", status.Error(codes.Unimplemented, "x"), backend.CodeUnsupported, "", nil},
		{"no details, UNKNOWN", status.Error(codes.Unknown, "x"), backend.CodeInternal, "", nil},
		{"not a status", errors.New("boom"), backend.CodeInternal, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fe := pbconv.FileError(tt.err)
			if fe.Code != tt.code || fe.Path != tt.path || !maps.Equal(fe.Details, tt.details) {
				t.Fatalf("got code %q path %q details %v, want %q %q %v", fe.Code, fe.Path, fe.Details, tt.code, tt.path, tt.details)
			}
			if fe.Message == "" {
				t.Fatal("message lost")
			}
		})
	}
}

func TestReasonAndFieldViolations(t *testing.T) {
	err := statusErr(t, codes.InvalidArgument, "bad",
		&errdetails.ErrorInfo{Reason: "INVALID_DECISIONS", Domain: "plumb.dev"},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "decisions[0].type", Description: "unknown"}}})
	if got := pbconv.Reason(err); got != "INVALID_DECISIONS" {
		t.Errorf("Reason = %q", got)
	}
	want := []pbconv.FieldViolation{{Field: "decisions[0].type", Description: "unknown"}}
	if got := pbconv.FieldViolations(err); len(got) != 1 || got[0] != want[0] {
		t.Errorf("FieldViolations = %v, want %v", got, want)
	}
	for _, e := range []error{errors.New("plain"), status.Error(codes.Internal, "no details"), nil} {
		if pbconv.Reason(e) != "" || pbconv.FieldViolations(e) != nil {
			t.Errorf("%v: want no reason and no violations", e)
		}
	}
}

func TestFileStatusCode(t *testing.T) {
	if c, ok := pbconv.FileStatusCode(backend.CodeFileNotFound); !ok || c != codes.NotFound {
		t.Errorf("file_not_found → %v %v, want NOT_FOUND", c, ok)
	}
	if _, ok := pbconv.FileStatusCode("no_such_code"); ok {
		t.Error("an undefined code is known")
	}
}
