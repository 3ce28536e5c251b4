package runhost

import (
	"context"
	"sync"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// stops holds the stop signals of each run segment going on here, by
// thread (agent.RunInput.Stop and Rollback): a newer run (OnBusyInterrupt
// or OnBusyRollback, on this replica or, through the thread's lease, on
// another) closes one so that the run ends at its next checkpoint,
// CANCELLED with agent.CodeSuperseded or agent.CodeRolledBack, and the
// queued run behind it starts.
type stops struct {
	mu sync.Mutex
	by map[string]*stopSignal
}

type stopSignal struct {
	stop, rollback         chan struct{}
	stopOnce, rollbackOnce sync.Once
}

// close closes the signal of mode.
func (s *stopSignal) close(mode store.StopMode) {
	if mode == store.StopRollback {
		s.rollbackOnce.Do(func() { close(s.rollback) })
		return
	}
	s.stopOnce.Do(func() { close(s.stop) })
}

// add registers the stop signals of a segment of thread id.
func (s *stops) add(id string) *stopSignal {
	sig := &stopSignal{stop: make(chan struct{}), rollback: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = map[string]*stopSignal{}
	}
	s.by[id] = sig
	return sig
}

// remove forgets sig, the segment of thread id having returned.
func (s *stops) remove(id string, sig *stopSignal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by[id] == sig {
		delete(s.by, id)
	}
}

// stop closes the signal of mode of thread id's segment, reporting
// whether one is going on here.
func (s *stops) stop(id string, mode store.StopMode) bool {
	s.mu.Lock()
	sig := s.by[id]
	s.mu.Unlock()
	if sig == nil {
		return false
	}
	sig.close(mode)
	return true
}

// withStop wraps f so that its runtime input carries the stop signals of
// the thread's segment for as long as f runs. With stopNow (a takeover
// of a run whose stop was requested) that signal is closed from the
// start.
func (h *Host) withStop(threadID string, stopNow store.StopMode, f leasedFunc) leasedFunc {
	return func(ctx context.Context, u underLease, sink agent.Sink) error {
		sig := h.stops.add(threadID)
		defer h.stops.remove(threadID, sig)
		if stopNow != "" {
			sig.close(stopNow)
		}
		u.stop, u.rollback = sig.stop, sig.rollback
		return f(ctx, u, sink)
	}
}

// interruptCurrent asks the run going on thread id to end at its next
// checkpoint for a newer run (OnBusyInterrupt, or OnBusyRollback with
// mode store.StopRollback), after that run was queued: the run's end
// starts the queue. The step in flight, tool calls included, completes
// (and with a rollback is then discarded). A run of this replica is told
// through its stop signal; a run of another replica through the
// thread's lease (store.Leases.RequestStop), which its holder polls and
// a replica taking the run over honours. No run going on (it ended
// meanwhile) is no error: the queue moves by itself.
func (h *Host) interruptCurrent(ctx context.Context, threadID string, mode store.StopMode) error {
	lg := h.lg.With(zap.String("thread-id", threadID), zap.String("stop", string(mode)))
	if h.stops.stop(threadID, mode) {
		lg.Info("run interrupted by a newer run; it stops at its next checkpoint")
		return nil
	}
	if h.cfg.Leases != nil {
		l, err := h.cfg.Leases.RequestStop(ctx, threadID, mode)
		if err != nil {
			return err
		}
		if l != nil {
			lg.Info("run interrupted by a newer run; stop requested of the lease holder", zap.String("holder", l.Holder), zap.Int64("lease-epoch", l.Epoch))
			return nil
		}
	}
	// A segment here that did not register its stop signal yet, without
	// a lease: cancelled.
	if r := h.reg.Cancel(threadID); r != nil {
		lg.Info("run interrupted by a newer run; cancelled", zap.String("run-id", r.RunID()))
	}
	return nil
}
