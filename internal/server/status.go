// Package server holds what plumb's gRPC adapters share, above all Status:
// the one place where domain errors become gRPC status codes. The adapters
// themselves live in subpackages (agentsvc, sandboxsvc) and stay thin.
// Clients decode a status with pbconv.Reason, pbconv.FieldViolations and
// pbconv.FileError.
package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/plumbhq/plumb/internal/runhost/runs"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/store"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of plumb's errors.
const ErrorDomain = "plumb.dev"

// sandboxCodes maps sandbox lifecycle codes to gRPC codes.
var sandboxCodes = map[sandbox.Code]codes.Code{
	sandbox.CodeNotFound:      codes.NotFound,
	sandbox.CodeQuota:         codes.ResourceExhausted,
	sandbox.CodeImageNotFound: codes.FailedPrecondition,
	sandbox.CodeInvalid:       codes.InvalidArgument,
	sandbox.CodeFailed:        codes.FailedPrecondition,
	sandbox.CodeUnavailable:   codes.Unavailable,
	sandbox.CodeShuttingDown:  codes.Unavailable,
	sandbox.CodeSlowConsumer:  codes.ResourceExhausted,
	sandbox.CodePolicy:        codes.PermissionDenied,
}

// ErrorInfo reasons of AgentService errors (docs/agent-core.md §10.1).
const (
	ReasonInvalidArgument    = "INVALID_ARGUMENT"
	ReasonInvalidDecisions   = "INVALID_DECISIONS"
	ReasonThreadNotFound     = "THREAD_NOT_FOUND"
	ReasonRunNotFound        = "RUN_NOT_FOUND"
	ReasonPendingInterrupt   = "PENDING_INTERRUPT"
	ReasonNoPendingInterrupt = "NO_PENDING_INTERRUPT"
	ReasonStaleInterrupt     = "STALE_INTERRUPT"
	ReasonThreadRunning      = "THREAD_RUNNING"
	ReasonThreadBusy         = "THREAD_BUSY"
	ReasonConflict           = "CONFLICT"
	ReasonReplayOutOfRange   = "REPLAY_OUT_OF_RANGE"
	ReasonStreamLagging      = "STREAM_LAGGING"
	ReasonNoRunSlot          = "NO_RUN_SLOT"
	ReasonShuttingDown       = "SHUTTING_DOWN"
	ReasonStorageBusy        = "STORAGE_BUSY"
	// ReasonReplicaStopping: this agentd replica is stopping; its runs go
	// on on another replica (with metadata after_sequence on a stream
	// that was cut: re-Attach after it).
	ReasonReplicaStopping = "REPLICA_STOPPING"
	// ReasonLeaseLost: this replica lost the thread's lease and stopped
	// its run; another replica runs it (metadata after_sequence: re-Attach
	// after it).
	ReasonLeaseLost = "LEASE_LOST"
)

// RequestError is a request an adapter rejected in its own validation
// (docs/agent-core.md §10.1: empty input, bad metadata, bad client tools, ...). It
// maps to INVALID_ARGUMENT with one google.rpc.BadRequest field violation
// per entry, and matches agent.ErrInvalidInput.
type RequestError struct {
	// Violations are the bad fields, in request order.
	Violations []agent.FieldViolation
}

// InvalidField returns a RequestError with one violation.
func InvalidField(field, format string, args ...any) *RequestError {
	return &RequestError{Violations: []agent.FieldViolation{{Field: field, Description: fmt.Sprintf(format, args...)}}}
}

func (e *RequestError) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = v.Description
	}
	return "invalid request: " + strings.Join(parts, "; ")
}

// Is matches agent.ErrInvalidInput.
func (e *RequestError) Is(target error) bool { return target == agent.ErrInvalidInput }

// agentStatus maps the agent core's and the run registry's errors; ok is
// false for an error of another kind.
func agentStatus(err error) (_ error, ok bool) {
	var (
		re  *RequestError
		de  *agent.DecisionError
		pe  *agent.PendingInterruptError
		se  *agent.StaleInterruptError
		oor *runs.OutOfRangeError
		lag *runs.LagError
		cut *runs.CutError
	)
	switch {
	case errors.As(err, &re):
		return badRequest(ReasonInvalidArgument, err.Error(), re.Violations), true
	case errors.As(err, &de):
		return badRequest(ReasonInvalidDecisions, err.Error(), de.Violations), true
	case errors.As(err, &pe):
		return withInfo(codes.FailedPrecondition, pe.Error(), ReasonPendingInterrupt,
			map[string]string{"thread_id": pe.ThreadID, "interrupt_id": pe.InterruptID}), true
	case errors.As(err, &se):
		return withInfo(codes.FailedPrecondition, se.Error(), ReasonStaleInterrupt,
			map[string]string{"interrupt_id": se.Current}), true
	case errors.As(err, &oor):
		return withInfo(codes.OutOfRange, oor.Error(), ReasonReplayOutOfRange,
			map[string]string{"thread_id": oor.ThreadID, "oldest_sequence": fmt.Sprint(oor.Oldest)}), true
	case errors.As(err, &lag):
		return withInfo(codes.ResourceExhausted, lag.Error(), ReasonStreamLagging,
			map[string]string{"thread_id": lag.ThreadID, "last_sequence": fmt.Sprint(lag.Last), "oldest_sequence": fmt.Sprint(lag.Oldest)}), true
	case errors.As(err, &cut):
		md := map[string]string{"thread_id": cut.ThreadID, "after_sequence": fmt.Sprint(cut.Last)}
		if errors.Is(cut, agent.ErrLeaseLost) {
			return withInfo(codes.Aborted, cut.Error(), ReasonLeaseLost, md), true
		}
		return withInfo(codes.Unavailable, cut.Error(), ReasonReplicaStopping, md), true
	case errors.Is(err, runs.ErrReplicaStopping):
		return withInfo(codes.Unavailable, err.Error(), ReasonReplicaStopping, nil), true
	case errors.Is(err, agent.ErrInvalidInput):
		return withInfo(codes.InvalidArgument, err.Error(), ReasonInvalidArgument, nil), true
	case errors.Is(err, agent.ErrNoPendingInterrupt):
		return withInfo(codes.FailedPrecondition, err.Error(), ReasonNoPendingInterrupt, nil), true
	case errors.Is(err, agent.ErrThreadBusy):
		return withInfo(codes.Aborted, err.Error(), ReasonThreadBusy, nil), true
	case errors.Is(err, agent.ErrThreadNotFound):
		return withInfo(codes.NotFound, err.Error(), ReasonThreadNotFound, nil), true
	case errors.Is(err, agent.ErrConflict):
		return withInfo(codes.Aborted, err.Error(), ReasonConflict, nil), true
	case errors.Is(err, runs.ErrNoRun):
		return withInfo(codes.NotFound, err.Error(), ReasonRunNotFound, nil), true
	case errors.Is(err, runs.ErrRunning):
		return withInfo(codes.FailedPrecondition, err.Error(), ReasonThreadRunning, nil), true
	case errors.Is(err, runs.ErrNoSlot):
		return withInfo(codes.ResourceExhausted, err.Error(), ReasonNoRunSlot, nil), true
	case errors.Is(err, runs.ErrShuttingDown):
		return withInfo(codes.Unavailable, err.Error(), ReasonShuttingDown, nil), true
	case errors.Is(err, store.ErrBusy):
		return withInfo(codes.Unavailable, "the thread store is busy; retry", ReasonStorageBusy, nil), true
	}
	return nil, false
}

// badRequest builds INVALID_ARGUMENT with ErrorInfo and
// google.rpc.BadRequest field violations.
func badRequest(reason, msg string, vs []agent.FieldViolation) error {
	return newStatus(codes.InvalidArgument, msg, reason, nil, vs)
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
	if st, ok := agentStatus(err); ok {
		return st
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
		c, ok := pbconv.FileStatusCode(fe.Code)
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
		var md map[string]string
		if se.Limit != "" {
			md = map[string]string{"limit": se.Limit}
		}
		var vs []agent.FieldViolation
		if se.Field != "" {
			vs = []agent.FieldViolation{{Field: se.Field, Description: se.Error()}}
		}
		return newStatus(c, se.Error(), string(se.Code), md, vs)
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
	return newStatus(c, msg, reason, md, nil)
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

// newStatus builds a status of code c carrying ErrorInfo{reason, md} and,
// with vs, a google.rpc.BadRequest, within MaxStatusBytes. User strings
// are already cut in messages (backend.Quote, backend.Clip); here every
// part is bounded again, and made valid UTF-8 (protobuf strings must be),
// because a detail that fails to serialize would lose the reason.
func newStatus(c codes.Code, msg, reason string, md map[string]string, vs []agent.FieldViolation) error {
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
