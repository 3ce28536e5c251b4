package agentsvc

import (
	"context"
	"errors"
	"fmt"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/pbconv/agentconv"
	"github.com/plumbhq/plumb/pkg/store"
)

// WaitRun bounds (docs/runs.md).
const (
	DefaultWaitTimeout = 30 * time.Second
	MaxWaitTimeout     = time.Hour
)

// runToPB converts a stored run record.
func runToPB(ri store.RunInfo) *plumbv1.RunRecord {
	out := agentconv.RunRecordToPB(&ri.Record)
	out.ThreadId = ri.ThreadID
	return out
}

// ownedRun returns store.ErrRunNotFound unless the caller's tenant owns
// the run's thread (and, when threadID is set, the run is that thread's).
func ownedRun(ctx context.Context, ri store.RunInfo, threadID string) error {
	if tenant.Norm(ri.Tenant) != tenant.From(ctx) || (threadID != "" && ri.ThreadID != threadID) {
		return fmt.Errorf("run %s: %w", ri.Record.RunID, store.ErrRunNotFound)
	}
	return nil
}

// GetRun returns a run's record; another tenant's run is NOT_FOUND.
func (s *Service) GetRun(ctx context.Context, req *plumbv1.GetRunRequest) (*plumbv1.GetRunResponse, error) {
	if req.GetRunId() == "" {
		return nil, Status(InvalidField("run_id", "run_id is required"))
	}
	ri, err := s.host.GetRun(ctx, req.GetRunId())
	if err == nil {
		err = ownedRun(ctx, ri, req.GetThreadId())
	}
	if err != nil {
		return nil, s.status("get run", err)
	}
	return &plumbv1.GetRunResponse{Run: runToPB(ri)}, nil
}

// CancelRun cancels one run: a queued one ends CANCELLED without
// starting, the thread's running one is cancelled as Cancel does (the
// queue goes on); another tenant's run is NOT_FOUND, a run that is
// neither FAILED_PRECONDITION (RUN_NOT_ACTIVE).
func (s *Service) CancelRun(ctx context.Context, req *plumbv1.CancelRunRequest) (*plumbv1.CancelRunResponse, error) {
	if req.GetRunId() == "" {
		return nil, Status(InvalidField("run_id", "run_id is required"))
	}
	ri, err := s.host.GetRun(ctx, req.GetRunId())
	if err == nil {
		err = ownedRun(ctx, ri, "")
	}
	if err == nil {
		ri, err = s.host.CancelRun(ctx, ri)
	}
	if err != nil {
		return nil, s.status("cancel run", err)
	}
	return &plumbv1.CancelRunResponse{Run: runToPB(ri)}, nil
}

// ListRuns lists run records newest first: a thread's, or all of the
// caller's tenant.
func (s *Service) ListRuns(ctx context.Context, req *plumbv1.ListRunsRequest) (*plumbv1.ListRunsResponse, error) {
	var vs violations
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		vs.add("page_size", "page_size must not be negative")
	case size > runhost.MaxPageSize:
		size = runhost.MaxPageSize
	}
	var st agent.RunStatus
	if p := req.GetStatus(); p != plumbv1.RunStatus_RUN_STATUS_UNSPECIFIED {
		st = agentconv.RunStatusFromPB(p)
		if !store.ListableRunStatus(st) {
			vs.add("status", "status %v is not a run status", p)
		}
	}
	if err := vs.err(); err != nil {
		return nil, Status(err)
	}
	if id := req.GetThreadId(); id != "" {
		if err := s.checkOwner(ctx, id); err != nil {
			return nil, s.status("list runs", err)
		}
	}
	list, next, err := s.host.ListRuns(ctx, store.RunQuery{
		Tenant: tenant.From(ctx), ThreadID: req.GetThreadId(), Status: st, PageSize: size, PageToken: req.GetPageToken(),
	})
	if errors.Is(err, store.ErrBadPageToken) {
		err = InvalidField("page_token", "page_token was not issued by this server")
	}
	if err != nil {
		return nil, s.status("list runs", err)
	}
	out := &plumbv1.ListRunsResponse{NextPageToken: next}
	for _, ri := range list {
		out.Runs = append(out.Runs, runToPB(ri))
	}
	return out, nil
}

// WaitRun waits until a run is no longer QUEUED or RUNNING, or until its
// timeout or the call's deadline, and returns its record then (timed_out
// when it had not ended): the end of the wait is not an error.
func (s *Service) WaitRun(ctx context.Context, req *plumbv1.WaitRunRequest) (*plumbv1.WaitRunResponse, error) {
	var vs violations
	if req.GetRunId() == "" {
		vs.add("run_id", "run_id is required")
	}
	timeout := DefaultWaitTimeout
	if d := req.GetTimeout(); d != nil {
		switch err := d.CheckValid(); {
		case err != nil:
			vs.add("timeout", "timeout: %v", err)
		case d.AsDuration() < 0:
			vs.add("timeout", "timeout must not be negative")
		case d.AsDuration() > MaxWaitTimeout:
			vs.add("timeout", "timeout %v is above the limit %v", d.AsDuration(), MaxWaitTimeout)
		default:
			timeout = d.AsDuration()
		}
	}
	if err := vs.err(); err != nil {
		return nil, Status(err)
	}
	ri, waiting, err := s.host.WaitRun(ctx, req.GetRunId(), time.Now().Add(timeout), func(ri store.RunInfo) error {
		return ownedRun(ctx, ri, "")
	})
	if err != nil {
		return nil, s.status("wait for a run", err)
	}
	return &plumbv1.WaitRunResponse{Run: runToPB(ri), TimedOut: waiting}, nil
}
