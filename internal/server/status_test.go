package server_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/plumbhq/plumb/internal/runhost/runs"
	"github.com/plumbhq/plumb/internal/server"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/store"
)

// Every domain error maps to its docs/agent-core.md §10.1 code with a stable
// ErrorInfo reason, and keeps its details.
func TestStatus(t *testing.T) {
	vs := []agent.FieldViolation{{Field: "decisions[0].type", Description: "decision edit not allowed for c1"}}
	tests := []struct {
		name   string
		err    error
		code   codes.Code
		reason string
		md     map[string]string
		fields []string
	}{
		{"nil", nil, codes.OK, "", nil, nil},
		{"invalid input", fmt.Errorf("%w: unknown agent %q", agent.ErrInvalidInput, "x"), codes.InvalidArgument, server.ReasonInvalidArgument, nil, nil},
		{"request error", server.InvalidField("input", "input is empty"), codes.InvalidArgument, server.ReasonInvalidArgument, nil, []string{"input"}},
		{"decision error", fmt.Errorf("resume: %w", &agent.DecisionError{Violations: vs}), codes.InvalidArgument, server.ReasonInvalidDecisions, nil, []string{"decisions[0].type"}},
		{"pending interrupt", &agent.PendingInterruptError{ThreadID: "t1", InterruptID: "i1"}, codes.FailedPrecondition, server.ReasonPendingInterrupt,
			map[string]string{"thread_id": "t1", "interrupt_id": "i1"}, nil},
		{"stale interrupt", &agent.StaleInterruptError{Got: "i0", Current: "i1"}, codes.FailedPrecondition, server.ReasonStaleInterrupt, map[string]string{"interrupt_id": "i1"}, nil},
		{"no pending interrupt", fmt.Errorf("thread t1: %w", agent.ErrNoPendingInterrupt), codes.FailedPrecondition, server.ReasonNoPendingInterrupt, nil, nil},
		{"busy", fmt.Errorf("thread t1 is busy: %w", agent.ErrThreadBusy), codes.Aborted, server.ReasonThreadBusy, nil, nil},
		{"thread not found", fmt.Errorf("load thread t1: %w", agent.ErrThreadNotFound), codes.NotFound, server.ReasonThreadNotFound, nil, nil},
		{"store conflict", agent.ErrConflict, codes.Aborted, server.ReasonConflict, nil, nil},
		{"no run", fmt.Errorf("thread t1: %w", runs.ErrNoRun), codes.NotFound, server.ReasonRunNotFound, nil, nil},
		{"out of range", &runs.OutOfRangeError{ThreadID: "t1", After: 1, Oldest: 5}, codes.OutOfRange, server.ReasonReplayOutOfRange,
			map[string]string{"thread_id": "t1", "oldest_sequence": "5"}, nil},
		{"lagging", &runs.LagError{ThreadID: "t1", Last: 7, Oldest: 9}, codes.ResourceExhausted, server.ReasonStreamLagging,
			map[string]string{"thread_id": "t1", "last_sequence": "7", "oldest_sequence": "9"}, nil},
		{"running", fmt.Errorf("delete: %w", runs.ErrRunning), codes.FailedPrecondition, server.ReasonThreadRunning, nil, nil},
		{"no slot", runs.ErrNoSlot, codes.ResourceExhausted, server.ReasonNoRunSlot, nil, nil},
		{"shutting down", runs.ErrShuttingDown, codes.Unavailable, server.ReasonShuttingDown, nil, nil},
		{"replica stopping", runs.ErrReplicaStopping, codes.Unavailable, server.ReasonReplicaStopping, nil, nil},
		{"handed off", &runs.CutError{ThreadID: "t1", Last: 12, Err: agent.ErrHandedOff}, codes.Unavailable, server.ReasonReplicaStopping,
			map[string]string{"thread_id": "t1", "after_sequence": "12"}, nil},
		{"lease lost", &runs.CutError{ThreadID: "t1", Last: 3, Err: fmt.Errorf("renew: %w", agent.ErrLeaseLost)}, codes.Aborted, server.ReasonLeaseLost,
			map[string]string{"thread_id": "t1", "after_sequence": "3"}, nil},
		{"storage busy", fmt.Errorf("checkpoint: %w", store.ErrBusy), codes.Unavailable, server.ReasonStorageBusy, nil, nil},
		{"file error", backend.Errorf(backend.CodeFileNotFound, "/a", "no /a"), codes.NotFound, string(backend.CodeFileNotFound), map[string]string{"path": "/a"}, nil},
		{"sandbox error", &sandbox.Error{Code: sandbox.CodeNotFound, Message: "gone"}, codes.NotFound, string(sandbox.CodeNotFound), nil, nil},
		{"cancelled", context.Canceled, codes.Canceled, "", nil, nil},
		{"deadline", fmt.Errorf("load: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "", nil, nil},
		{"status passes", status.Error(codes.PermissionDenied, "no"), codes.PermissionDenied, "", nil, nil},
		{"unknown", errors.New("disk on fire"), codes.Internal, "", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := server.Status(tt.err)
			if got := status.Code(err); got != tt.code {
				t.Fatalf("code %v (%v), want %v", got, err, tt.code)
			}
			if got := pbconv.Reason(err); got != tt.reason {
				t.Errorf("reason %q, want %q", got, tt.reason)
			}
			if tt.md != nil {
				var got map[string]string
				st, _ := status.FromError(err)
				for _, d := range st.Details() {
					if info, ok := d.(interface{ GetMetadata() map[string]string }); ok {
						got = info.GetMetadata()
					}
				}
				if !maps.Equal(got, tt.md) {
					t.Errorf("metadata %v, want %v", got, tt.md)
				}
			}
			var fields []string
			for _, v := range pbconv.FieldViolations(err) {
				fields = append(fields, v.Field)
			}
			if !slices.Equal(fields, tt.fields) {
				t.Errorf("field violations %v, want %v", fields, tt.fields)
			}
			if tt.code == codes.Internal && status.Convert(err).Message() != "internal error" {
				t.Errorf("internal error text leaked: %v", err)
			}
		})
	}
}

// A file-engine error survives Status and pbconv.FileError (what the
// SandboxService client does) with its code, path and details, for every
// code of docs/file-tools.md §3.
func TestFileErrorRoundTrip(t *testing.T) {
	for _, c := range []backend.Code{
		backend.CodeInvalidPath, backend.CodeInvalidArgument, backend.CodeInvalidPattern, backend.CodeFileNotFound,
		backend.CodeIsDirectory, backend.CodeNotADirectory, backend.CodeNotRegularFile, backend.CodePermissionDenied,
		backend.CodeNoSpace, backend.CodeStringNotFound, backend.CodeMultipleOccurrences, backend.CodeOffsetOutOfRange,
		backend.CodeTooLarge, backend.CodeNotText, backend.CodeTimeout, backend.CodeUnsupported,
		backend.CodeUnavailable, backend.CodeCancelled, backend.CodeInternal, backend.CodeResourceExhausted,
	} {
		in := backend.Errorf(c, "/a", "op /a: %s", c).WithDetail("count", "2")
		out := pbconv.FileError(server.Status(in))
		if out.Code != c || out.Path != "/a" || out.Message != in.Message || !maps.Equal(out.Details, in.Details) {
			t.Errorf("%s came back as %+v", c, out)
		}
	}
}

// Every status fits MaxStatusBytes whatever the user strings in it, keeps
// its code and reason, and carries valid UTF-8 only (a detail that does not
// serialize would drop the reason).
func TestStatusIsBounded(t *testing.T) {
	long := "/" + strings.Repeat("é/", 2000)
	many := make([]agent.FieldViolation, 1000)
	for i := range many {
		many[i] = agent.FieldViolation{Field: fmt.Sprintf("decisions[%d].%s", i, long), Description: "no pending request for tool call " + long}
	}
	tests := []struct {
		name   string
		err    error
		code   codes.Code
		reason string
	}{
		{"file error with a long path and details", backend.Errorf(backend.CodeFileNotFound, long, "read %s: no such file", long).
			WithDetail("link", long).WithDetail("target", long), codes.NotFound, string(backend.CodeFileNotFound)},
		{"invalid UTF-8 path", backend.Errorf(backend.CodeInvalidPath, "/a\xff", "invalid path %s: it is not valid UTF-8", backend.Quote("/a\xff")),
			codes.InvalidArgument, string(backend.CodeInvalidPath)},
		{"1000 field violations", &agent.DecisionError{Violations: many}, codes.InvalidArgument, server.ReasonInvalidDecisions},
		{"long wrapped message", fmt.Errorf("load thread %s: %w", strings.Repeat("t", 100000), agent.ErrThreadNotFound), codes.NotFound, server.ReasonThreadNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := server.Status(tt.err)
			st := status.Convert(err)
			if st.Code() != tt.code || pbconv.Reason(err) != tt.reason {
				t.Fatalf("got %v (reason %q), want %v %q", st.Code(), pbconv.Reason(err), tt.code, tt.reason)
			}
			if size := proto.Size(st.Proto()); size > server.MaxStatusBytes {
				t.Errorf("status of %d bytes, want at most %d", size, server.MaxStatusBytes)
			}
			if n := len(st.Message()); n > server.MaxStatusMessageBytes || !utf8.ValidString(st.Message()) {
				t.Errorf("message of %d bytes (valid UTF-8: %v), want at most %d", n, utf8.ValidString(st.Message()), server.MaxStatusMessageBytes)
			}
			for _, d := range st.Details() {
				if info, ok := d.(interface{ GetMetadata() map[string]string }); ok {
					for k, v := range info.GetMetadata() {
						if utf8.RuneCountInString(v) > backend.QuoteMaxChars+1 {
							t.Errorf("metadata %s has %d characters, want at most %d and a cut mark", k, utf8.RuneCountInString(v), backend.QuoteMaxChars)
						}
					}
				}
			}
			if tt.reason == server.ReasonInvalidDecisions && len(pbconv.FieldViolations(err)) == 0 {
				t.Errorf("no field violation kept")
			}
		})
	}
}
