package runhost

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/internal/runhost/runs"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// The controls of a run that may live on another replica (Config.Leases):
// the registry only knows this process's runs, the shared store's leases
// know every replica'h. Cancel, DeleteThread, GetThread and ListThreads
// consult them when the registry has no run of the thread.

// startCancelPoll starts the loop that cancels this replica's runs whose
// cancel was requested on another replica (store.Leases.RequestCancel),
// and stops at their next checkpoint those a newer run asked to stop
// (store.Leases.RequestStop): every event interval, one query lists the
// requests on the leases this replica holds. It stops with the takeover
// loop.
func (h *Host) startCancelPoll() {
	if h.cfg.Leases == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	stopTakeover := h.stopTakeover
	h.stopTakeover = func() {
		cancel() // both loops stop at once: Shutdown waits for the slower
		stopTakeover()
		<-done
	}
	go func() {
		defer close(done)
		tick := time.NewTicker(h.eventInterval())
		defer tick.Stop()
		cancelled := map[string]store.Lease{} // thread → the request acted on
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if h.reg.Live() == 0 {
				clear(cancelled)
				continue // no run here, nothing to cancel
			}
			cancelled = h.pollCancels(ctx, cancelled)
		}
	}()
}

// pollCancels cancels the runs of the cancel requests on this replica's
// leases, and signals the stop requests (a cancel request wins). done
// are the requests already acted on (a run takes up to the cancel grace
// to end); it returns those of them still pending and the ones it acted
// on now. A request whose run is not in the registry yet, or has not
// started, is tried again at the next poll.
func (h *Host) pollCancels(ctx context.Context, done map[string]store.Lease) map[string]store.Lease {
	qctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	ls, err := h.cfg.Leases.CancelRequests(qctx, h.cfg.ReplicaID)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			h.lg.Warn("list the cancel requests of this replica's runs", zap.Error(err))
		}
		return done
	}
	acted := make(map[string]store.Lease, len(ls))
	for _, l := range ls {
		if d, ok := done[l.ThreadID]; ok && sameRequest(d, l) {
			acted[l.ThreadID] = l
			continue
		}
		r := h.reg.Active(l.ThreadID)
		if r == nil || r.RunID() == "" {
			// Not started yet: cancelled now, a takeover's Continue
			// would fail before it could end the run CANCELLED (it
			// honours the request itself); the next poll acts.
			continue
		}
		lg := h.lg.With(zap.String("thread-id", l.ThreadID), zap.String("run-id", r.RunID()), zap.Int64("lease-epoch", l.Epoch))
		if !l.CancelRequested {
			if h.stops.stop(l.ThreadID, l.StopRequested) {
				lg.Info("run asked by a newer run on another replica to stop at its next checkpoint", zap.String("stop", string(l.StopRequested)))
				acted[l.ThreadID] = l
			}
			continue
		}
		if r := h.reg.Cancel(l.ThreadID); r != nil {
			lg.Info("run cancelled at another replica's request")
			acted[l.ThreadID] = l
		}
	}
	return acted
}

// sameRequest reports whether a and b carry the same requests on the
// same lease.
func sameRequest(a, b store.Lease) bool {
	return a.Epoch == b.Epoch && a.CancelRequested == b.CancelRequested && a.StopRequested == b.StopRequested
}

// cancelElsewhere is Cancel for a thread this replica does not run: when
// a replica holds its lease, it records a cancel request in the shared
// store and waits (as long as ctx allows) until the run has ended there.
// Without a held lease, no run is live anywhere.
func (h *Host) cancelElsewhere(ctx context.Context, td *agent.ThreadData) (Cancelled, error) {
	id := td.Thread.ID
	l, err := h.cfg.Leases.RequestCancel(ctx, id)
	if err != nil {
		return Cancelled{}, err
	}
	if l == nil {
		return Cancelled{}, nil
	}
	h.lg.Info("cancel requested of a run on another replica", zap.String("thread-id", id), zap.String("holder", l.Holder), zap.Int64("lease-epoch", l.Epoch))
	err = h.awaitLeaseEnd(ctx, id, false)
	if err != nil && ctx.Err() == nil {
		return Cancelled{}, err
	}
	if err == nil {
		// Ended, the run is the thread's last one (before its first
		// checkpoint the record read above may not name it yet).
		if ended, lerr := h.threads.LoadThread(ctx, id); lerr == nil {
			td = ended
		}
	}
	var runID string
	if td.LastRun != nil {
		runID = td.LastRun.RunID
	}
	return Cancelled{RunID: runID, WasRunning: true}, nil
}

// awaitLeaseEnd waits until the run whose cancel was requested on thread
// id has ended: its lease is released (a takeover keeps the request, and
// its new holder ends the run), or the thread is gone. With expired, a
// lease that expired (its replica died) ends the wait too.
func (h *Host) awaitLeaseEnd(ctx context.Context, id string, expired bool) error {
	t := time.NewTicker(h.eventInterval())
	defer t.Stop()
	for {
		ls, err := h.cfg.Leases.ThreadLeases(ctx, []string{id})
		if err != nil {
			return err
		}
		// The request goes with the release only: a lease without it
		// is a later run'h.
		if len(ls) == 0 || ls[0].Released || !ls[0].CancelRequested || (expired && !ls[0].Live(h.clock.Now())) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// deleteHolderSuffix ends the holder of the lease DeleteThread takes: not
// the replica's id, whose leases are its runs.
const deleteHolderSuffix = "/delete-thread"

func (h *Host) deleteHolder() string { return h.cfg.ReplicaID + deleteHolderSuffix }

// leaseForDelete takes thread id's lease for its deletion, so that no
// replica starts a run on it meanwhile (the deletion removes the lease
// with the thread). A run live on another replica is runs.ErrRunning, or
// with force is cancelled there first and waited for. The returned
// function gives the lease up when the deletion did not happen: td is the
// thread as loaded (nil if it was not). A RUNNING run in it is one whose
// replica died (its lease had expired): the lease is left to expire, so
// that takeover continues the run as it would have — released, nobody
// would, and a starting replica would mark the run FAILED.
func (h *Host) leaseForDelete(ctx context.Context, id string, force bool) (giveUp func(td *agent.ThreadData), err error) {
	ls := h.cfg.Leases
	if ls == nil {
		return func(*agent.ThreadData) {}, nil
	}
	for {
		l, err := ls.AcquireLease(ctx, id, h.deleteHolder(), h.clock.Now(), h.leaseTTL())
		var held *store.HeldError
		switch {
		case err == nil:
			return func(td *agent.ThreadData) {
				if td == nil || td.Status() == agent.ThreadRunning {
					return
				}
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
				defer cancel()
				if err := ls.ReleaseLease(rctx, l); err != nil {
					h.lg.Warn("release the lease of a thread that was not deleted", zap.String("thread-id", id), zap.Error(err))
				}
			}, nil
		case !errors.As(err, &held):
			return nil, err
		case !force:
			return nil, fmt.Errorf("delete thread %s: %w (on %s); set force to cancel it", id, runs.ErrRunning, held.Lease.Holder)
		}
		h.lg.Info("cancelling the run of a thread being deleted, on another replica", zap.String("thread-id", id), zap.String("holder", held.Lease.Holder))
		if _, err := ls.RequestCancel(ctx, id); err != nil {
			return nil, err
		}
		// An expired lease can be taken for the deletion: its run is
		// not live anywhere.
		if err := h.awaitLeaseEnd(ctx, id, true); err != nil {
			return nil, err
		}
	}
}

// runningElsewhere returns the threads of ids that another replica (or a
// run of this one the registry does not list yet) holds a live lease on:
// their run is live, whatever the store's records say so far. A
// deletion's lease is no run.
func (h *Host) runningElsewhere(ctx context.Context, ids []string) (map[string]bool, error) {
	if h.cfg.Leases == nil || len(ids) == 0 {
		return nil, nil
	}
	ls, err := h.cfg.Leases.ThreadLeases(ctx, ids)
	if err != nil {
		return nil, err
	}
	now := h.clock.Now()
	live := make(map[string]bool, len(ls))
	for _, l := range ls {
		if l.Live(now) && !strings.HasSuffix(l.Holder, deleteHolderSuffix) {
			live[l.ThreadID] = true
		}
	}
	return live, nil
}
