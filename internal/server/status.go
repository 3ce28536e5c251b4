// Package server holds what plumb's gRPC adapters share, above all the
// core of Status, where domain errors become gRPC status codes: each
// service passes the Mappers it needs (its own domain's beside it, like
// agentsvc's agent core and run registry errors, and the shared ones here:
// FileStatus for the file engine, SandboxStatus for the sandbox lifecycle),
// and the core adds cancellation and the bounds every status keeps. The adapters themselves live in subpackages and stay thin.
// Clients decode a status with pbconv.Reason, pbconv.FieldViolations and
// pbconv.FileError.
package server

import (
	"context"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of plumb's errors.
const ErrorDomain = "plumb.dev"

// A Mapper converts the errors of one domain into status errors (with
// NewStatus or WithInfo); ok is false for an error of another kind.
type Mapper func(err error) (_ error, ok bool)

// Status converts err into a gRPC status error whose ErrorInfo.reason is
// the stable machine code. A status error passes through unchanged; then
// the mappers are tried in order (a service passes its own domain's and
// FileStatus, in the order it needs); then cancellation and deadlines. An
// error of unknown kind becomes INTERNAL without its text (callers log it).
func Status(err error, mappers ...Mapper) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, m := range mappers {
		if st, ok := m(err); ok {
			return st
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	}
	return status.Error(codes.Internal, "internal error")
}

// FileStatus maps the file engine's *backend.Error: its code is the reason
// (pbconv.FileStatusCode gives the gRPC code) and its path and details are
// the metadata, so pbconv.FileError gets it back whole.
func FileStatus(err error) (_ error, ok bool) {
	var fe *backend.Error
	if !errors.As(err, &fe) {
		return nil, false
	}
	md := map[string]string{}
	for k, v := range fe.Details {
		md[k] = v
	}
	if fe.Path != "" {
		md["path"] = fe.Path
	}
	c, ok := pbconv.FileStatusCode(fe.Code)
	if !ok {
		c = codes.Internal
	}
	return WithInfo(c, fe.Message, string(fe.Code), md), true
}

// WithInfo builds a status carrying google.rpc.ErrorInfo{reason, metadata}.
func WithInfo(c codes.Code, msg, reason string, md map[string]string) error {
	return NewStatus(c, msg, reason, md, nil)
}

// Size bounds of a status. gRPC sends it twice in the trailers, as
// grpc-message (percent-encoded: up to 3 bytes per message byte) and as
// grpc-status-details-bin (the serialized google.rpc.Status in base64).
// Many HTTP/2 clients, grpcio's default among them, refuse a header list
// over 8 KiB and turn the status into RST_STREAM/INTERNAL. With these
// bounds the trailers stay under 8 KiB whatever the input: at most
// 3 KiB of grpc-message and 4 KiB of details.
const (
	// MaxStatusMessageBytes bounds a status message; a longer one is cut
	// at a character boundary and ends with "…".
	MaxStatusMessageBytes = 1024
	// MaxStatusBytes bounds the serialized status (code, message and
	// details). Metadata values and field violations are cut to
	// backend.QuoteMaxChars characters; violations that do not fit are
	// dropped (the message still summarizes them), and as a last resort
	// only the ErrorInfo reason is kept.
	MaxStatusBytes = 3 << 10
)

// NewStatus builds a status of code c carrying ErrorInfo{reason, md} and,
// with vs, a google.rpc.BadRequest, within MaxStatusBytes. User strings
// are already cut in messages (backend.Quote, backend.Clip); here every
// part is bounded again, and made valid UTF-8 (protobuf strings must be),
// because a detail that fails to serialize would lose the reason.
func NewStatus(c codes.Code, msg, reason string, md map[string]string, vs []pbconv.FieldViolation) error {
	msg = cutBytes(strings.ToValidUTF8(msg, "\uFFFD"), MaxStatusMessageBytes)
	info := &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}
	if len(md) > 0 {
		info.Metadata = make(map[string]string, len(md))
		for k, v := range md {
			info.Metadata[boundString(k)] = boundString(v)
		}
	}
	details := []protoadapt.MessageV1{info}
	if len(vs) > 0 {
		br := &errdetails.BadRequest{}
		// What is left for violations, less room for the Any wrappers.
		budget := MaxStatusBytes - len(msg) - proto.Size(info) - 256
		for _, v := range vs {
			fv := &errdetails.BadRequest_FieldViolation{Field: boundString(v.Field), Description: boundString(v.Description)}
			br.FieldViolations = append(br.FieldViolations, fv)
			if proto.Size(br) > budget {
				br.FieldViolations = br.FieldViolations[:len(br.FieldViolations)-1]
				break
			}
		}
		details = append(details, br)
	}
	st, err := status.New(c, msg).WithDetails(details...)
	if err != nil || proto.Size(st.Proto()) > MaxStatusBytes {
		// Only pathological input gets here (many metadata values of long
		// non-ASCII text): keep the code, message and reason, drop the rest.
		st, err = status.New(c, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain})
		if err != nil {
			return status.Error(c, msg)
		}
	}
	return st.Err()
}

// boundString makes s valid UTF-8 and cuts it like backend.Clip.
func boundString(s string) string {
	return backend.Clip(strings.ToValidUTF8(s, "\uFFFD"))
}

// cutBytes cuts s to at most n bytes at a character boundary, ending it
// with "…" when it was cut.
func cutBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	i := n - len(ellipsis)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + ellipsis
}
