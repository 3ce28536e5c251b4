package sandboxsvc

import (
	"errors"

	"github.com/plumbhq/plumb/internal/server"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
	"google.golang.org/grpc/codes"
)

// Status converts an error of a SandboxService call into its gRPC status:
// the file engine's errors, then the sandbox lifecycle's (sandboxStatus),
// then what server.Status maps for every service.
func Status(err error) error {
	return server.Status(err, server.FileStatus, sandboxStatus)
}

// sandboxCodes maps sandbox lifecycle codes to gRPC codes.
var sandboxCodes = map[sandboxapi.Code]codes.Code{
	sandboxapi.CodeNotFound:      codes.NotFound,
	sandboxapi.CodeQuota:         codes.ResourceExhausted,
	sandboxapi.CodeImageNotFound: codes.FailedPrecondition,
	sandboxapi.CodeInvalid:       codes.InvalidArgument,
	sandboxapi.CodeFailed:        codes.FailedPrecondition,
	sandboxapi.CodeUnavailable:   codes.Unavailable,
	sandboxapi.CodeShuttingDown:  codes.Unavailable,
	sandboxapi.CodeSlowConsumer:  codes.ResourceExhausted,
	sandboxapi.CodePolicy:        codes.PermissionDenied,
}

// sandboxStatus maps a sandbox lifecycle *sandboxapi.Error: its code is
// the reason, Limit the metadata "limit", and Field one field violation.
func sandboxStatus(err error) (_ error, ok bool) {
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
	return server.NewStatus(c, se.Error(), string(se.Code), md, vs), true
}
