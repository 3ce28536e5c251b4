package runhost

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// ErrRunNotActive: CancelRun named a run that is neither QUEUED nor
// RUNNING (it ended, or waits for decisions).
var ErrRunNotActive = errors.New("the run is neither queued nor running")

// maxQueueCancels bounds the queued runs one Cancel ends (a queue is
// short; the bound only keeps a loop finite).
const maxQueueCancels = 10000

// queuedCancelled is the error a queued run cancelled before it started
// records.
func queuedCancelled() *agent.RunError {
	return &agent.RunError{Code: agent.CodeCancelled, Message: "cancelled while queued"}
}

// cancelQueued ends every QUEUED run of the thread CANCELLED ("cancelled
// while queued") and returns their ids, oldest first. A queued run that
// another replica starts meanwhile is left to the running run's cancel.
func (h *Host) cancelQueued(ctx context.Context, threadID string) ([]string, error) {
	if h.cfg.Runs == nil {
		return nil, nil
	}
	var ids []string
	skip := map[string]bool{}
	for range maxQueueCancels {
		next, err := h.cfg.Runs.NextQueuedRun(ctx, threadID)
		if err != nil {
			return ids, err
		}
		if next == nil || skip[next.Record.RunID] {
			return ids, nil
		}
		id := next.Record.RunID
		err = h.cfg.Runs.EndQueuedRun(ctx, id, agent.StatusCancelled, queuedCancelled(), h.clock.Now())
		switch {
		case errors.Is(err, store.ErrNotQueued), errors.Is(err, store.ErrRunNotFound):
			skip[id] = true // started (or gone) meanwhile
		case err != nil:
			return ids, err
		default:
			h.lg.Info("queued run cancelled", zap.String("thread-id", threadID), zap.String("run-id", id))
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// CancelRun cancels run ri (read by the caller, who checked its tenant):
// a QUEUED run ends CANCELLED without starting, and the rest of its
// thread's queue goes on; the thread's running run is cancelled as
// Cancel does, on any replica, without touching the queue. Any other run
// is ErrRunNotActive. It returns the run's record afterwards.
func (h *Host) CancelRun(ctx context.Context, ri store.RunInfo) (store.RunInfo, error) {
	if h.cfg.Runs == nil {
		return ri, ErrNoRunRecords
	}
	id := ri.Record.RunID
	if ri.Record.Status == agent.StatusQueued {
		err := h.cfg.Runs.EndQueuedRun(ctx, id, agent.StatusCancelled, queuedCancelled(), h.clock.Now())
		if err == nil {
			h.lg.Info("queued run cancelled", zap.String("thread-id", ri.ThreadID), zap.String("run-id", id))
			return h.cfg.Runs.GetRun(ctx, id)
		}
		if !errors.Is(err, store.ErrNotQueued) {
			return ri, err
		}
		// It started meanwhile: cancel it running.
		if ri, err = h.cfg.Runs.GetRun(ctx, id); err != nil {
			return ri, err
		}
	}
	if ri.Record.Status != agent.StatusRunning {
		return ri, fmt.Errorf("run %s is %s: %w", id, ri.Record.Status, ErrRunNotActive)
	}
	if _, err := h.cancelRunning(ctx, ri.ThreadID); err != nil {
		return ri, err
	}
	return h.cfg.Runs.GetRun(ctx, id)
}
