package runhost

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// ErrNoRunRecords: the host has no run-record store (Config.Runs), so
// GetRun, ListRuns, WaitRun and OnBusyEnqueue are not available (agentd
// always has one; a memory store does not).
var ErrNoRunRecords = errors.New("run records are not kept by this thread store")

// DefaultWaitInterval is how often WaitRun reads a run's record.
const DefaultWaitInterval = 250 * time.Millisecond

// GetRun returns a run's record, or store.ErrRunNotFound. The caller
// checks the tenant (RunInfo.Tenant).
func (h *Host) GetRun(ctx context.Context, runID string) (store.RunInfo, error) {
	if h.cfg.Runs == nil {
		return store.RunInfo{}, ErrNoRunRecords
	}
	return h.cfg.Runs.GetRun(ctx, runID)
}

// ListRuns returns a page of run records (store.Runs.ListRuns).
func (h *Host) ListRuns(ctx context.Context, q store.RunQuery) ([]store.RunInfo, string, error) {
	if h.cfg.Runs == nil {
		return nil, "", ErrNoRunRecords
	}
	return h.cfg.Runs.ListRuns(ctx, q)
}

// Waiting reports whether a run of status s is still to be waited for:
// QUEUED or RUNNING. Every other status (ended, or INTERRUPTED: waiting
// for a Resume) ends WaitRun.
func Waiting(s agent.RunStatus) bool {
	return s == agent.StatusQueued || s == agent.StatusRunning
}

// WaitRun waits until run runID is no longer QUEUED or RUNNING, or until
// until (or ctx) ends, and returns its record as it is then and whether
// it is still waiting (the wait timed out). It reads the shared record in
// the store every Config.WaitInterval, so it works on any replica,
// whichever runs the run. ctx's end is not an error: the current record
// is returned (read with a short grace of its own). allowed, if set, is
// called with the first record read and may refuse it (the caller's
// tenancy check); its error is returned.
func (h *Host) WaitRun(ctx context.Context, runID string, until time.Time, allowed func(store.RunInfo) error) (store.RunInfo, bool, error) {
	if h.cfg.Runs == nil {
		return store.RunInfo{}, false, ErrNoRunRecords
	}
	ri, err := h.cfg.Runs.GetRun(ctx, runID)
	if err != nil {
		return ri, false, err
	}
	if allowed != nil {
		if err := allowed(ri); err != nil {
			return store.RunInfo{}, false, err
		}
	}
	every := h.cfg.WaitInterval
	if every <= 0 {
		every = DefaultWaitInterval
	}
	wctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for Waiting(ri.Record.Status) {
		select {
		case <-wctx.Done():
			// The wait is over: one last read, so that a run that ended
			// at the deadline is reported ended.
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), every+time.Second)
			last, err := h.cfg.Runs.GetRun(rctx, runID)
			rcancel()
			if err == nil {
				ri = last
			}
			return ri, Waiting(ri.Record.Status), nil
		case <-tick.C:
		}
		next, err := h.cfg.Runs.GetRun(wctx, runID)
		switch {
		case err == nil:
			ri = next
		case errors.Is(err, store.ErrRunNotFound):
			return store.RunInfo{}, false, err // its thread was deleted
		case wctx.Err() != nil:
			// The next select returns the record.
		default:
			h.lg.Debug("wait for a run: read its record", zap.String("run-id", runID), zap.Error(err))
		}
	}
	return ri, false, nil
}
