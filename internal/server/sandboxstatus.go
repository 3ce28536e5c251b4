package server

import (
	"errors"

	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
	"google.golang.org/grpc/codes"
)

// sandboxCodes maps sandbox lifecycle codes to gRPC codes.
var sandboxCodes = map[sandboxapi.Code]codes.Code{
	sandboxapi.CodeNotFound:           codes.NotFound,
	sandboxapi.CodeQuota:              codes.ResourceExhausted,
	sandboxapi.CodeImageNotFound:      codes.FailedPrecondition,
	sandboxapi.CodeInvalid:            codes.InvalidArgument,
	sandboxapi.CodeFailed:             codes.FailedPrecondition,
	sandboxapi.CodeUnavailable:        codes.Unavailable,
	sandboxapi.CodeShuttingDown:       codes.Unavailable,
	sandboxapi.CodeSlowConsumer:       codes.ResourceExhausted,
	sandboxapi.CodePolicy:             codes.PermissionDenied,
	sandboxapi.CodeSnapshotNotFound:   codes.NotFound,
	sandboxapi.CodeDataLoss:           codes.DataLoss,
	sandboxapi.CodeVolumeNotFound:     codes.NotFound,
	sandboxapi.CodeVolumeExists:       codes.AlreadyExists,
	sandboxapi.CodeVolumeInUse:        codes.FailedPrecondition,
	sandboxapi.CodeVolumesUnsupported: codes.FailedPrecondition,
}

// SandboxStatus maps a sandbox lifecycle *sandboxapi.Error: its code is
// the reason, Limit the metadata "limit", and Field one field violation.
// sandboxsvc maps the errors of its manager with it, and agentsvc those of
// the sandbox calls its hooks make.
func SandboxStatus(err error) (_ error, ok bool) {
	var se *sandboxapi.Error
	if !errors.As(err, &se) {
		return nil, false
	}
	c, ok := sandboxCodes[se.Code]
	if !ok {
		c = codes.Internal
	}
	var md map[string]string
	if se.Limit != "" {
		md = map[string]string{"limit": se.Limit}
	}
	var vs []pbconv.FieldViolation
	if se.Field != "" {
		vs = []pbconv.FieldViolation{{Field: se.Field, Description: se.Error()}}
	}
	return NewStatus(c, se.Error(), string(se.Code), md, vs), true
}
