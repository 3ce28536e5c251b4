package runhost

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/pbconv/agentconv"
	"github.com/plumbhq/plumb/pkg/store"
)

// startTakeover starts the loop that takes over the runs of dead
// replicas, when leases are on and the interval is not negative.
func (h *Host) startTakeover() {
	if h.cfg.Leases == nil || h.cfg.TakeoverInterval < 0 {
		return
	}
	every := takeoverEvery(h.leaseTTL(), h.cfg.TakeoverInterval)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	h.stopTakeover = func() {
		cancel()
		<-done
	}
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			h.takeOver(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// maxTakeoverInterval bounds the default takeover interval. A lease that a
// stopping replica handed off is continued at the next scan, so scans
// must not grow with a long lease TTL (which an operator sets to ride out
// pauses): a rolling update would leave its runs idle for half of it.
const maxTakeoverInterval = DefaultLeaseTTL / 2

// takeoverEvery is the takeover loop's interval: the configured one, else
// half the lease TTL, at most maxTakeoverInterval.
func takeoverEvery(ttl, configured time.Duration) time.Duration {
	if configured != 0 {
		return configured
	}
	return min(ttl/2, maxTakeoverInterval)
}

// takeOver looks for leases that expired without being released — their
// replica stopped while running the thread — and continues each such run
// here from its last checkpoint.
func (h *Host) takeOver(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	expired, err := h.cfg.Leases.ExpiredLeases(lctx, h.clock.Now())
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			h.lg.Warn("list expired thread leases", zap.Error(err))
		}
		return
	}
	for _, l := range expired {
		if ctx.Err() != nil {
			return
		}
		if h.reg.Active(l.ThreadID) != nil {
			continue
		}
		h.takeOverThread(ctx, l)
	}
}

// takeOverThread acquires the expired lease dead held and, when the
// thread's last run is still RUNNING, continues it in a detached segment
// of the registry (Attach follows it). Anything else — the lease taken by
// a quicker replica, a run that ended before its replica died — only
// settles the lease.
func (h *Host) takeOverThread(ctx context.Context, dead store.Lease) {
	lg := h.lg.With(zap.String("thread-id", dead.ThreadID), zap.String("dead-holder", dead.Holder), zap.Int64("dead-epoch", dead.Epoch))
	cctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	l, err := h.cfg.Leases.AcquireLease(cctx, dead.ThreadID, h.cfg.ReplicaID, h.clock.Now(), h.leaseTTL())
	var held *store.HeldError
	switch {
	case errors.As(err, &held), errors.Is(err, agent.ErrThreadNotFound):
		return
	case err != nil:
		lg.Warn("take over the thread's lease", zap.Error(err))
		return
	}
	release := func() {
		if err := h.cfg.Leases.ReleaseLease(cctx, l); err != nil {
			lg.Warn("release the thread's lease", zap.Error(err))
		}
	}
	td, err := h.threads.LoadThread(cctx, dead.ThreadID)
	if err != nil {
		lg.Warn("load a thread to take over", zap.Error(err))
		return // the lease expires again (see below)
	}
	if td.LastRun == nil || td.LastRun.Status != agent.StatusRunning || td.Interrupt != nil {
		// Its run ended; only the lease was left behind, and maybe the
		// report of the end.
		h.settleEnded(cctx, td)
		release()
		return
	}
	runID := td.LastRun.RunID
	var after uint64
	if h.cfg.Events != nil {
		if after, err = h.cfg.Events.LastSequence(cctx, runID); err != nil {
			lg.Warn("read the run's last event", zap.Error(err))
			return // the lease expires again (see below)
		}
	}
	runCtx, cancelRun := context.WithCancel(context.Background())
	r, err := h.reg.Begin(dead.ThreadID, cancelRun)
	if err != nil {
		// No run slot, or shutting down: the lease expires again and
		// this or another replica tries later. Not released: nobody
		// takes a released lease over, and a replica that starts marks
		// its RUNNING run FAILED.
		cancelRun()
		lg.Info("not taking over the run now", zap.Error(err))
		return
	}
	lg.Info("taking over a run whose replica stopped", zap.String("run-id", runID), zap.Uint64("after-sequence", after))
	var stopNow store.StopMode
	if !l.CancelRequested {
		stopNow = l.StopRequested
	}
	switch {
	case l.CancelRequested:
		lg.Info("the run's cancel was requested; ending it cancelled", zap.String("run-id", runID))
	case stopNow != "":
		lg.Info("a newer run asked the run to stop; ending it at its first checkpoint", zap.String("run-id", runID), zap.String("stop", string(l.StopRequested)))
	}
	h.wg.Add(2)
	go func() {
		defer h.wg.Done()
		defer cancelRun()
		err := h.hold(runCtx, l, func(e agent.Event) { r.Emit(agentconv.EventToPB(e)) }, h.withStop(dead.ThreadID, stopNow, func(ctx context.Context, u underLease, sink agent.Sink) error {
			_, err := h.rt.Continue(ctx, agent.ContinueInput{ThreadID: dead.ThreadID, RunID: runID, AfterSequence: after, Fence: u.fence, HandOff: u.handOff, Stop: u.stop, Rollback: u.rollback, Flush: u.flush}, cancelAtStart(l, cancelRun, sink))
			return err
		}))
		if err != nil && r.RunID() == "" {
			lg.Warn("the run could not be taken over", zap.Error(err))
		}
		h.end(r, err)
		h.afterSegment(dead.ThreadID)
	}()
	// Nobody streams a taken-over segment: drain its owner's stream so
	// that it behaves as a detached run.
	go func() {
		defer h.wg.Done()
		_ = r.Stream(context.Background(), func(*plumbv1.Event) error { return nil })
	}()
}

// cancelAtStart wraps the sink of a run taken over under l: when its
// cancel was requested while nobody ran it, the resumed segment is
// cancelled as soon as it has started (run_started is emitted once the
// run is loaded), so that it ends CANCELLED instead of going on.
func cancelAtStart(l store.Lease, cancel context.CancelFunc, sink agent.Sink) agent.Sink {
	if !l.CancelRequested {
		return sink
	}
	return func(e agent.Event) {
		sink(e)
		if _, ok := e.Payload.(agent.RunStarted); ok {
			cancel()
		}
	}
}
