package agentsvc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/plumbhq/plumb/internal/quota"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/runhost/runs"
	"github.com/plumbhq/plumb/internal/server"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/internal/server/servertest"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
	"github.com/plumbhq/plumb/pkg/store"
)

// Every error of the agent core and the run registry maps to its
// docs/agent-core.md §10.1 code with a stable ErrorInfo reason, and keeps its
// details; file errors and cancellation map as for every service.
func TestStatus(t *testing.T) {
	vs := []agent.FieldViolation{{Field: "decisions[0].type", Description: "decision edit not allowed for c1"}}
	type want = servertest.Want
	tests := []struct {
		name string
		err  error
		want want
	}{
		{"nil", nil, want{Code: codes.OK}},
		{"invalid input", fmt.Errorf("%w: unknown agent %q", agent.ErrInvalidInput, "x"), want{Code: codes.InvalidArgument, Reason: agentsvc.ReasonInvalidArgument}},
		{"request error", agentsvc.InvalidField("input", "input is empty"), want{Code: codes.InvalidArgument, Reason: agentsvc.ReasonInvalidArgument, Fields: []string{"input"}}},
		{"decision error", fmt.Errorf("resume: %w", &agent.DecisionError{Violations: vs}), want{Code: codes.InvalidArgument, Reason: agentsvc.ReasonInvalidDecisions, Fields: []string{"decisions[0].type"}}},
		{"pending interrupt", &agent.PendingInterruptError{ThreadID: "t1", InterruptID: "i1"},
			want{Code: codes.FailedPrecondition, Reason: agentsvc.ReasonPendingInterrupt, Metadata: map[string]string{"thread_id": "t1", "interrupt_id": "i1"}}},
		{"stale interrupt", &agent.StaleInterruptError{Got: "i0", Current: "i1"},
			want{Code: codes.FailedPrecondition, Reason: agentsvc.ReasonStaleInterrupt, Metadata: map[string]string{"interrupt_id": "i1"}}},
		{"no pending interrupt", fmt.Errorf("thread t1: %w", agent.ErrNoPendingInterrupt), want{Code: codes.FailedPrecondition, Reason: agentsvc.ReasonNoPendingInterrupt}},
		{"busy", fmt.Errorf("thread t1 is busy: %w", agent.ErrThreadBusy), want{Code: codes.Aborted, Reason: agentsvc.ReasonThreadBusy}},
		{"thread not found", fmt.Errorf("load thread t1: %w", agent.ErrThreadNotFound), want{Code: codes.NotFound, Reason: agentsvc.ReasonThreadNotFound}},
		{"store conflict", agent.ErrConflict, want{Code: codes.Aborted, Reason: agentsvc.ReasonConflict}},
		{"no run", fmt.Errorf("thread t1: %w", runs.ErrNoRun), want{Code: codes.NotFound, Reason: agentsvc.ReasonRunNotFound}},
		{"out of range", &runs.OutOfRangeError{ThreadID: "t1", After: 1, Oldest: 5},
			want{Code: codes.OutOfRange, Reason: agentsvc.ReasonReplayOutOfRange, Metadata: map[string]string{"thread_id": "t1", "oldest_sequence": "5"}}},
		{"lagging", &runs.LagError{ThreadID: "t1", Last: 7, Oldest: 9},
			want{Code: codes.ResourceExhausted, Reason: agentsvc.ReasonStreamLagging, Metadata: map[string]string{"thread_id": "t1", "last_sequence": "7", "oldest_sequence": "9"}}},
		{"running", fmt.Errorf("delete: %w", runs.ErrRunning), want{Code: codes.FailedPrecondition, Reason: agentsvc.ReasonThreadRunning}},
		{"quota", fmt.Errorf("admit: %w", &quota.ExceededError{Quota: quota.ConcurrentRuns, Limit: 1, Current: 1}),
			want{Code: codes.ResourceExhausted, Reason: agentsvc.ReasonQuotaExceeded, Metadata: map[string]string{"quota": "concurrent_runs", "limit": "1", "current": "1"}}},
		{"events expired", fmt.Errorf("attach: %w", &runhost.EventsExpiredError{ThreadID: "t1", RunID: "r1", Last: 9}),
			want{Code: codes.OutOfRange, Reason: agentsvc.ReasonEventsExpired, Metadata: map[string]string{"thread_id": "t1", "run_id": "r1", "last_sequence": "9"}}},
		{"no slot", runs.ErrNoSlot, want{Code: codes.ResourceExhausted, Reason: agentsvc.ReasonNoRunSlot}},
		{"shutting down", runs.ErrShuttingDown, want{Code: codes.Unavailable, Reason: agentsvc.ReasonShuttingDown}},
		{"replica stopping", runs.ErrReplicaStopping, want{Code: codes.Unavailable, Reason: agentsvc.ReasonReplicaStopping}},
		{"handed off", &runs.CutError{ThreadID: "t1", Last: 12, Err: agent.ErrHandedOff},
			want{Code: codes.Unavailable, Reason: agentsvc.ReasonReplicaStopping, Metadata: map[string]string{"thread_id": "t1", "after_sequence": "12"}}},
		{"lease lost", &runs.CutError{ThreadID: "t1", Last: 3, Err: fmt.Errorf("renew: %w", agent.ErrLeaseLost)},
			want{Code: codes.Aborted, Reason: agentsvc.ReasonLeaseLost, Metadata: map[string]string{"thread_id": "t1", "after_sequence": "3"}}},
		{"storage busy", fmt.Errorf("checkpoint: %w", store.ErrBusy), want{Code: codes.Unavailable, Reason: agentsvc.ReasonStorageBusy}},
		{"file error", backend.Errorf(backend.CodeFileNotFound, "/a", "no /a"),
			want{Code: codes.NotFound, Reason: string(backend.CodeFileNotFound), Metadata: map[string]string{"path": "/a"}}},
		{"sandbox error of a hook", &sandboxapi.Error{Code: sandboxapi.CodeUnavailable, Message: "sandboxd is down"},
			want{Code: codes.Unavailable, Reason: string(sandboxapi.CodeUnavailable)}},
		{"cancelled", context.Canceled, want{Code: codes.Canceled}},
		{"deadline", fmt.Errorf("load: %w", context.DeadlineExceeded), want{Code: codes.DeadlineExceeded}},
		{"status passes", status.Error(codes.PermissionDenied, "no"), want{Code: codes.PermissionDenied}},
		{"unknown", errors.New("disk on fire"), want{Code: codes.Internal}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			servertest.Check(t, agentsvc.Status(tt.err), tt.want)
		})
	}
}

// Agent errors with huge user strings keep their code and reason within
// server.MaxStatusBytes, and some of their field violations.
func TestStatusIsBounded(t *testing.T) {
	long := "/" + strings.Repeat("é/", 2000)
	many := make([]agent.FieldViolation, 1000)
	for i := range many {
		many[i] = agent.FieldViolation{Field: fmt.Sprintf("decisions[%d].%s", i, long), Description: "no pending request for tool call " + long}
	}
	for _, tt := range []struct {
		name   string
		err    error
		code   codes.Code
		reason string
	}{
		{"1000 field violations", &agent.DecisionError{Violations: many}, codes.InvalidArgument, agentsvc.ReasonInvalidDecisions},
		{"long wrapped message", fmt.Errorf("load thread %s: %w", strings.Repeat("t", 100000), agent.ErrThreadNotFound), codes.NotFound, agentsvc.ReasonThreadNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := agentsvc.Status(tt.err)
			st := status.Convert(err)
			if st.Code() != tt.code || pbconv.Reason(err) != tt.reason {
				t.Fatalf("got %v (reason %q), want %v %q", st.Code(), pbconv.Reason(err), tt.code, tt.reason)
			}
			if size := proto.Size(st.Proto()); size > server.MaxStatusBytes {
				t.Errorf("status of %d bytes, want at most %d", size, server.MaxStatusBytes)
			}
			if tt.reason == agentsvc.ReasonInvalidDecisions && len(pbconv.FieldViolations(err)) == 0 {
				t.Errorf("no field violation kept")
			}
		})
	}
}
