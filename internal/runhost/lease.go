package runhost

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// DefaultLeaseTTL is how long a replica's lease on a running thread lasts
// without renewal (it renews every third of it).
const DefaultLeaseTTL = 15 * time.Second

func (h *Host) leaseTTL() time.Duration {
	if h.cfg.LeaseTTL > 0 {
		return h.cfg.LeaseTTL
	}
	return DefaultLeaseTTL
}

// underLease is what a runtime call made under a thread's lease puts
// into its input: the fence every checkpoint is committed under, the
// hand-off signal (closed when this replica stops: the run stops at its
// next checkpoint and returns agent.ErrHandedOff) and the flush of the
// shared event log that each checkpoint waits for. Without leases all are
// nil.
type underLease struct {
	fence   *agent.Fence
	handOff <-chan struct{}
	// stop, closed, ends the run at its next checkpoint for a newer run
	// (OnBusyInterrupt; agent.RunInput.Stop). Set by leased.
	stop <-chan struct{}
	// rollback, closed, ends the run at its next checkpoint discarding
	// what it did (OnBusyRollback; agent.RunInput.Rollback). Set by
	// leased.
	rollback <-chan struct{}
	flush    func(context.Context) error
}

// leasedFunc is a runtime call made under a thread's lease; sink is where
// its events go.
type leasedFunc func(ctx context.Context, u underLease, sink agent.Sink) error

// leased runs f while this replica holds the thread's lease in the shared
// store (Config.Leases; without one, f just runs, unfenced, and is never
// handed off). The lease is taken first (a live lease of another replica
// fails with a *store.HeldError, which is agent.ErrThreadBusy), then held
// as hold describes.
func (h *Host) leased(ctx context.Context, threadID string, sink agent.Sink, f leasedFunc) error {
	f = h.withStop(threadID, "", f)
	ls := h.cfg.Leases
	if ls == nil {
		sink, ended := h.watchEnd(h.watchUsage(ctx, sink))
		err := f(ctx, underLease{}, sink)
		h.reportEnd(ctx, threadID, ended(), err)
		return err
	}
	l, err := ls.AcquireLease(ctx, threadID, h.cfg.ReplicaID, h.clock.Now(), h.leaseTTL())
	if err != nil {
		return err
	}
	return h.hold(ctx, l, sink, f)
}

// hold runs f under l: it renews l every TTL/3 while f runs and gives it
// up when f returns.
//
// A renewal or an event append refused because the lease was lost — it
// expired and another replica may have taken the thread over — cancels
// f's context, so this replica stops working on the thread (its
// checkpoints, fenced, could not commit anyway), and hold returns that
// error (store.ErrLeaseLost): the caller ends the segment's streams with
// it (runs.Run.Abort).
//
// With an event log (Config.Events), an event reaches sink only once it
// is stored there under l (see eventWriter): whatever a client saw, the
// log has, under the sequence numbers a replica taking the run over
// continues after.
//
// When f returns agent.ErrHandedOff (this replica is stopping, see
// Shutdown), its events are flushed and l is handed off (expired now,
// not released) so that the next takeover scan of another replica
// continues the run; otherwise l is released.
func (h *Host) hold(ctx context.Context, l store.Lease, sink agent.Sink, f leasedFunc) error {
	ls := h.cfg.Leases
	ttl := h.leaseTTL()
	threadID := l.ThreadID // l itself is the renewals' (under mu)
	lg := h.lg.With(zap.String("thread-id", threadID), zap.Int64("lease-epoch", l.Epoch))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// Past the shutdown grace the run stops at once, to be continued
	// elsewhere from its last checkpoint.
	defer context.AfterFunc(h.hardStop, func() { cancel(agent.ErrHandedOff) })()
	renewed := make(chan struct{})
	var mu sync.Mutex // guards l against the final release
	go func() {
		defer close(renewed)
		tick := time.NewTicker(ttl / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			mu.Lock()
			cur := l
			mu.Unlock()
			next, err := ls.RenewLease(ctx, cur, h.clock.Now(), ttl)
			switch {
			case err == nil:
				mu.Lock()
				l = next
				mu.Unlock()
			case errors.Is(err, store.ErrLeaseLost):
				lg.Warn("lost the thread's lease; stopping its run here", zap.Error(err))
				cancel(err)
				return
			case ctx.Err() == nil:
				// A store hiccup: the lease still runs until it expires,
				// and the next tick tries again.
				lg.Warn("renew the thread's lease", zap.Error(err))
			}
		}
	}()
	u := underLease{fence: l.Fence(), handOff: h.handOff}
	var w *eventWriter
	if h.cfg.Events != nil {
		w = h.startEvents(ctx, l, lg, sink, cancel)
		sink, u.flush = w.add, w.flush
	}
	sink, ended := h.watchEnd(h.watchUsage(ctx, sink))
	err := f(ctx, u, sink)
	if w != nil {
		w.close()
	}
	h.reportEnd(ctx, threadID, ended(), err)
	cause := context.Cause(ctx)
	cancel(nil)
	<-renewed
	if errors.Is(cause, store.ErrLeaseLost) {
		// Nothing to give up: another replica holds (or takes) the
		// thread.
		return cause
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer rcancel()
	if errors.Is(err, agent.ErrHandedOff) {
		if herr := ls.HandOffLease(rctx, l, h.clock.Now()); herr != nil {
			lg.Warn("hand off the thread's lease; it expires by itself", zap.Error(herr))
		} else {
			lg.Info("run handed off: another replica continues it from its last checkpoint")
		}
		return err
	}
	if rerr := ls.ReleaseLease(rctx, l); rerr != nil {
		lg.Warn("release the thread's lease; it expires by itself", zap.Error(rerr))
	}
	return err
}

// storeCallTimeout bounds one call to the shared store made outside a
// request (event flushes, takeover scans).
const storeCallTimeout = 30 * time.Second
