package agentsvc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/store"
)

// DefaultLeaseTTL is how long a replica's lease on a running thread lasts
// without renewal (it renews every third of it).
const DefaultLeaseTTL = 15 * time.Second

// DefaultEventInterval is how often a run's events are flushed to the
// shared event log, and how often an Attach that follows a run of another
// replica reads it.
const DefaultEventInterval = 100 * time.Millisecond

// maxUnflushed bounds the events a run keeps while the event log cannot
// be written; past it the oldest are dropped (Attach on other replicas
// misses them, nothing else does).
const maxUnflushed = 10000

func (s *Service) leaseTTL() time.Duration {
	if s.cfg.LeaseTTL > 0 {
		return s.cfg.LeaseTTL
	}
	return DefaultLeaseTTL
}

func (s *Service) eventInterval() time.Duration {
	if s.cfg.EventInterval > 0 {
		return s.cfg.EventInterval
	}
	return DefaultEventInterval
}

// leasedFunc is a runtime call made under a thread's lease: fence goes
// into its input (every checkpoint is committed under it), sink is where
// its events go.
type leasedFunc func(ctx context.Context, fence *agent.Fence, sink agent.Sink) error

// leased runs f while this replica holds the thread's lease in the shared
// store (Config.Leases; without one, f just runs, unfenced). The lease is
// taken first (a live lease of another replica fails with a
// *store.HeldError, which is agent.ErrThreadBusy), then held as hold
// describes.
func (s *Service) leased(ctx context.Context, threadID string, sink agent.Sink, f leasedFunc) error {
	ls := s.cfg.Leases
	if ls == nil {
		return f(ctx, nil, sink)
	}
	l, err := ls.AcquireLease(ctx, threadID, s.cfg.ReplicaID, s.clock.Now(), s.leaseTTL())
	if err != nil {
		return err
	}
	return s.hold(ctx, l, sink, f)
}

// hold runs f under l: it renews l every TTL/3 while f runs and releases
// it when f returns. A renewal that fails because the lease was lost —
// it expired and another replica may have taken the thread over — cancels
// f's context, so this replica stops working on the thread (and its
// checkpoints, fenced, could not commit anyway). With an event log
// (Config.Events), f's events are also appended there, the last of them
// before the lease is released.
func (s *Service) hold(ctx context.Context, l store.Lease, sink agent.Sink, f leasedFunc) error {
	ls := s.cfg.Leases
	ttl := s.leaseTTL()
	lg := s.lg.With(zap.String("thread-id", l.ThreadID), zap.Int64("lease-epoch", l.Epoch))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
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
			next, err := ls.RenewLease(ctx, cur, s.clock.Now(), ttl)
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
	var w *eventWriter
	if s.cfg.Events != nil {
		w = s.startEvents(l, lg)
		inner := sink
		sink = func(e agent.Event) {
			inner(e)
			w.add(e)
		}
	}
	err := f(ctx, l.Fence(), sink)
	if w != nil {
		w.close()
	}
	cancel(nil)
	<-renewed
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer rcancel()
	if rerr := ls.ReleaseLease(rctx, l); rerr != nil {
		lg.Warn("release the thread's lease; it expires by itself", zap.Error(rerr))
	}
	return err
}

// eventWriter appends one leased run's events to the shared event log, in
// batches every eventInterval, under the run's lease.
type eventWriter struct {
	s        *Service
	threadID string
	fence    *agent.Fence
	lg       *zap.Logger

	mu      sync.Mutex
	pending []store.Event
	lost    bool // the lease is gone: nothing more is written

	stop, done chan struct{}
}

func (s *Service) startEvents(l store.Lease, lg *zap.Logger) *eventWriter {
	w := &eventWriter{s: s, threadID: l.ThreadID, fence: l.Fence(), lg: lg, stop: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	return w
}

// add queues e (a run's sink calls it, in sequence order).
func (w *eventWriter) add(e agent.Event) {
	pb := pbconv.EventToPB(e)
	body, err := proto.Marshal(pb)
	if err != nil {
		w.lg.Error("encode an event for the event log", zap.Error(err))
		return
	}
	ev := store.Event{RunID: pb.GetRunId(), Sequence: pb.GetSequence(), Start: pb.GetRunStarted() != nil, Terminal: terminal(pb), Body: body}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lost {
		return
	}
	w.pending = append(w.pending, ev)
	if n := len(w.pending) - maxUnflushed; n > 0 {
		w.pending = append([]store.Event(nil), w.pending[n:]...)
	}
}

func (w *eventWriter) loop() {
	defer close(w.done)
	tick := time.NewTicker(w.s.eventInterval())
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			w.flush()
			return
		case <-tick.C:
			w.flush()
		}
	}
}

// flush appends what is queued; a failed batch stays queued for the next
// one, unless the lease is lost.
func (w *eventWriter) flush() {
	w.mu.Lock()
	batch := w.pending
	w.pending = nil
	w.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
	defer cancel()
	err := w.s.cfg.Events.AppendEvents(ctx, w.threadID, w.fence, batch)
	if err == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if errors.Is(err, store.ErrLeaseLost) {
		w.lost = true
		w.lg.Warn("the event log refuses the run's events: the thread's lease is gone", zap.Error(err))
		return
	}
	w.lg.Warn("append to the event log; retrying with the next batch", zap.Int("events", len(batch)), zap.Error(err))
	w.pending = append(batch, w.pending...)
}

// close flushes the rest and stops the writer.
func (w *eventWriter) close() {
	close(w.stop)
	<-w.done
}

// storeCallTimeout bounds one call to the shared store made outside a
// request (event flushes, takeover scans).
const storeCallTimeout = 30 * time.Second

// terminal reports whether e ends a segment.
func terminal(e *plumbv1.Event) bool {
	switch e.GetPayload().(type) {
	case *plumbv1.Event_RunFinished, *plumbv1.Event_Interrupted, *plumbv1.Event_Error:
		return true
	}
	return false
}

// errNoStoredRun: the event log has no run of the thread to follow.
var errNoStoredRun = errors.New("no run in the event log")

// followStored sends the events of the thread's last run from the shared
// event log after sequence after (0: from the start of the run), through
// every segment the log has (an interrupted one's terminal event
// included), then follows the log until the newest segment's terminal
// event: Attach to a run that lives on another replica (or was taken over
// by one), or whose earlier segments this replica no longer holds. It
// ends without a terminal event when the run is over but its terminal
// event never reached the log (its replica died and the run was failed
// instead of taken over), or when a newer run begins.
func (s *Service) followStored(ctx context.Context, threadID string, after uint64, send func(*plumbv1.Event) error) error {
	runID := ""
	quiet := 0
	// atEnd: the last event sent ended a segment; the stream ends there
	// unless a later segment of the run is already in the log.
	atEnd := false
	for {
		page, err := s.cfg.Events.ReadEvents(ctx, threadID, after, 256)
		if err != nil {
			return err
		}
		switch {
		case page.RunID == "":
			return fmt.Errorf("thread %s: %w", threadID, errNoStoredRun)
		case runID == "":
			runID = page.RunID
			if len(page.Events) == 0 && after == 0 && page.Status != "" && page.Status != agent.StatusRunning {
				return fmt.Errorf("thread %s: %w", threadID, errNoStoredRun)
			}
		case page.RunID != runID:
			return nil
		}
		if atEnd && len(page.Events) == 0 {
			return nil
		}
		atEnd = false
		for _, e := range page.Events {
			pb := new(plumbv1.Event)
			if err := proto.Unmarshal(e.Body, pb); err != nil {
				return fmt.Errorf("thread %s: event %d of the event log: %w", threadID, e.Sequence, err)
			}
			if err := send(pb); err != nil {
				return err
			}
			after = e.Sequence
			atEnd = e.Terminal
		}
		if len(page.Events) > 0 {
			quiet = 0
			continue
		}
		if page.Status != "" && page.Status != agent.StatusRunning {
			// The terminal event is flushed before the lease is
			// released; give a late flush a few reads.
			if quiet++; quiet >= 3 {
				return nil
			}
		}
		t := time.NewTimer(s.eventInterval())
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
