package agentsvc

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/store"
)

// DefaultLeaseTTL is how long a replica's lease on a running thread lasts
// without renewal (it renews every third of it).
const DefaultLeaseTTL = 15 * time.Second

// leased runs f while this replica holds the thread's lease in the shared
// store (Config.Leases; without one, f just runs). The lease is taken
// first (a live lease of another replica fails with a *store.HeldError,
// which is agent.ErrThreadBusy), renewed every TTL/3 while f runs, and
// released when f returns. A renewal that fails — the lease expired and
// another replica may have taken the thread over — cancels f's context,
// so this replica stops working on the thread.
func (s *Service) leased(ctx context.Context, threadID string, f func(context.Context) error) error {
	ls := s.cfg.Leases
	if ls == nil {
		return f(ctx)
	}
	ttl := s.cfg.LeaseTTL
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	l, err := ls.AcquireLease(ctx, threadID, s.cfg.ReplicaID, s.clock.Now(), ttl)
	if err != nil {
		return err
	}
	lg := s.lg.With(zap.String("thread-id", threadID), zap.Int64("lease-epoch", l.Epoch))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	renewed := make(chan struct{})
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
			next, err := ls.RenewLease(ctx, l, s.clock.Now(), ttl)
			switch {
			case err == nil:
				l = next
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
	err = f(ctx)
	cancel(nil)
	<-renewed
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer rcancel()
	if rerr := ls.ReleaseLease(rctx, l); rerr != nil {
		lg.Warn("release the thread's lease; it expires by itself", zap.Error(rerr))
	}
	return err
}
