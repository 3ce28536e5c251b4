package runhost

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// ErrNoSteers: the host keeps no steers (Config.Steers), so OnBusySteer
// is not available.
var ErrNoSteers = errors.New("steering is not available with this thread store")

// steer stores in's input as a steer of the thread's running run
// (OnBusySteer), to be delivered at its next model call by whichever
// replica runs it, and reports whether it did. A thread without a
// RUNNING run (none, one that ended meanwhile, one waiting for
// decisions) is not steered: the caller runs the input as
// OnBusyEnqueue does.
func (h *Host) steer(ctx context.Context, in agent.RunInput) (bool, error) {
	if h.cfg.Steers == nil {
		return false, ErrNoSteers
	}
	td, err := h.threads.LoadThread(ctx, in.ThreadID)
	if err != nil {
		return false, err
	}
	if td.LastRun == nil || td.LastRun.Status != agent.StatusRunning || td.Interrupt != nil {
		return false, nil
	}
	runID := td.LastRun.RunID
	id, err := h.cfg.Steers.AddSteer(ctx, in.ThreadID, runID, in.Input, h.clock.Now())
	if errors.Is(err, store.ErrRunNotRunning) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	h.lg.Info("steer stored for the thread's running run", zap.String("thread-id", in.ThreadID), zap.String("run-id", runID), zap.Int64("steer", id))
	return true, nil
}

// queueLeftSteers turns the steers that run end.RunID did not take
// before it ended or paused into one queued run of the thread
// (store.Steers.SteersToQueue), so that no steer is lost: it starts once
// the thread is free. Called under the thread's lease, after the end.
func (h *Host) queueLeftSteers(ctx context.Context, threadID string, end *RunEnd) {
	if h.cfg.Steers == nil || end == nil || end.RunID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
	defer cancel()
	rec := agent.RunRecord{RunID: h.newID(), CreatedAt: h.clock.Now()}
	if h.cfg.Runs != nil {
		if ri, err := h.cfg.Runs.GetRun(ctx, end.RunID); err == nil {
			rec.Spec = ri.Record.Spec
		}
	}
	queued, err := h.cfg.Steers.SteersToQueue(ctx, threadID, end.RunID, rec)
	lg := h.lg.With(zap.String("thread-id", threadID), zap.String("run-id", end.RunID))
	switch {
	case err != nil:
		lg.Warn("queue the steers the run did not take", zap.Error(err))
	case queued:
		lg.Info("the run ended before its next model call: its steers are queued as a new run", zap.String("queued-run-id", rec.RunID))
	}
}
