package pbconv

import (
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fileCodes maps file-engine codes to gRPC codes (docs/file-tools.md §3).
var fileCodes = map[backend.Code]codes.Code{
	backend.CodeInvalidPath:         codes.InvalidArgument,
	backend.CodeInvalidArgument:     codes.InvalidArgument,
	backend.CodeInvalidPattern:      codes.InvalidArgument,
	backend.CodeFileNotFound:        codes.NotFound,
	backend.CodeIsDirectory:         codes.FailedPrecondition,
	backend.CodeNotADirectory:       codes.FailedPrecondition,
	backend.CodeNotRegularFile:      codes.FailedPrecondition,
	backend.CodePermissionDenied:    codes.PermissionDenied,
	backend.CodeNoSpace:             codes.ResourceExhausted,
	backend.CodeStringNotFound:      codes.FailedPrecondition,
	backend.CodeMultipleOccurrences: codes.FailedPrecondition,
	backend.CodeOffsetOutOfRange:    codes.OutOfRange,
	backend.CodeTooLarge:            codes.FailedPrecondition,
	backend.CodeNotText:             codes.FailedPrecondition,
	backend.CodeTimeout:             codes.DeadlineExceeded,
	backend.CodeUnsupported:         codes.Unimplemented,
	backend.CodeUnavailable:         codes.Unavailable,
	backend.CodeResourceExhausted:   codes.ResourceExhausted,
	backend.CodeCancelled:           codes.Canceled,
	backend.CodeInternal:            codes.Internal,
}

// FileStatusCode returns the gRPC code of a file-engine code (docs/file-tools.md
// §3); ok is false for a code that section does not define.
func FileStatusCode(c backend.Code) (_ codes.Code, ok bool) {
	gc, ok := fileCodes[c]
	return gc, ok
}

// Reason returns the google.rpc.ErrorInfo reason of a status error, or "".
func Reason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// FieldViolations returns the google.rpc.BadRequest field violations of a
// status error.
func FieldViolations(err error) []agent.FieldViolation {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	var out []agent.FieldViolation
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				out = append(out, agent.FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		}
	}
	return out
}

// FileError converts a status error back into a *backend.Error (clients of
// SandboxService use it), keeping the code, message, path and details. A
// status whose reason is not a file-engine code is classified by its gRPC
// code.
func FileError(err error) *backend.Error {
	st, ok := status.FromError(err)
	if !ok {
		return backend.Errorf(backend.CodeInternal, "", "%v", err)
	}
	fe := &backend.Error{Message: st.Message()}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			fe.Code = backend.Code(info.GetReason())
			for k, v := range info.GetMetadata() {
				if k == "path" {
					fe.Path = v
					continue
				}
				fe.WithDetail(k, v)
			}
		}
	}
	if _, known := fileCodes[fe.Code]; known {
		return fe
	}
	switch st.Code() {
	case codes.NotFound, codes.FailedPrecondition, codes.Unavailable, codes.ResourceExhausted:
		fe.Code = backend.CodeUnavailable
	case codes.Canceled:
		fe.Code = backend.CodeCancelled
	case codes.DeadlineExceeded:
		fe.Code = backend.CodeTimeout
	case codes.InvalidArgument:
		fe.Code = backend.CodeInvalidArgument
	case codes.Unimplemented:
		fe.Code = backend.CodeUnsupported
	default:
		fe.Code = backend.CodeInternal
	}
	return fe
}
