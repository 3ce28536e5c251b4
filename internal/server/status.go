// Package server holds what plumb's gRPC adapters share, above all Status:
// the one place where domain errors become gRPC status codes. The adapters
// themselves live in subpackages (agentsvc, sandboxsvc) and stay thin.
package server

import (
	"context"
	"errors"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of plumb's errors.
const ErrorDomain = "plumb.dev"

// fileCodes maps file-engine codes to gRPC codes (file-tools spec §3).
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
	backend.CodeCancelled:           codes.Canceled,
	backend.CodeInternal:            codes.Internal,
}

// sandboxCodes maps sandbox lifecycle codes to gRPC codes.
var sandboxCodes = map[sandbox.Code]codes.Code{
	sandbox.CodeNotFound:      codes.NotFound,
	sandbox.CodeQuota:         codes.ResourceExhausted,
	sandbox.CodeImageNotFound: codes.FailedPrecondition,
	sandbox.CodeInvalid:       codes.InvalidArgument,
	sandbox.CodeFailed:        codes.FailedPrecondition,
	sandbox.CodeUnavailable:   codes.Unavailable,
	sandbox.CodeShuttingDown:  codes.Unavailable,
}

// Status converts err into a gRPC status error whose ErrorInfo.reason is the
// stable machine code. A status error passes through unchanged; an error of
// unknown kind becomes INTERNAL without its text (callers log it).
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var fe *backend.Error
	if errors.As(err, &fe) {
		md := map[string]string{}
		for k, v := range fe.Details {
			md[k] = v
		}
		if fe.Path != "" {
			md["path"] = fe.Path
		}
		c, ok := fileCodes[fe.Code]
		if !ok {
			c = codes.Internal
		}
		return withInfo(c, fe.Message, string(fe.Code), md)
	}
	var se *sandbox.Error
	if errors.As(err, &se) {
		c, ok := sandboxCodes[se.Code]
		if !ok {
			c = codes.Internal
		}
		return withInfo(c, se.Error(), string(se.Code), nil)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	}
	return status.Error(codes.Internal, "internal error")
}

// withInfo builds a status carrying google.rpc.ErrorInfo{reason, metadata}.
func withInfo(c codes.Code, msg, reason string, md map[string]string) error {
	st := status.New(c, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: md}); err == nil {
		st = d
	}
	return st.Err()
}

// Reason returns the ErrorInfo reason of a status error, or "".
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

// FileError converts a status error back into a *backend.Error (clients of
// SandboxService use it), keeping the code, message, path and details.
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
	// Not a file-engine error: classify by status code.
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
