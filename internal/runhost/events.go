package runhost

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost/runs"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/pbconv/agentconv"
	"github.com/plumbhq/plumb/pkg/store"
)

// DefaultEventInterval is how often an Attach that follows a run of
// another replica reads the shared event log, and how long a run waits
// before it retries an append the store failed.
const DefaultEventInterval = 100 * time.Millisecond

// maxUnflushed bounds the events a run queues while the event log cannot
// be written: past it the run waits in its sink (back-pressure) until the
// store takes them, or until the run is stopped.
const maxUnflushed = 10000

// maxAppend bounds the events of one append.
const maxAppend = 500

func (h *Host) eventInterval() time.Duration {
	if h.cfg.EventInterval > 0 {
		return h.cfg.EventInterval
	}
	return DefaultEventInterval
}

// eventWriter appends one leased run's events to the shared event log
// under the run's lease, and hands each to the run's sink (the registry:
// the clients) only once it is stored. One append is in flight at a time;
// the events emitted meanwhile make the next one, so the order is kept and
// an event waits for at most one append before its own. A failed append
// (not a lost lease) is retried every eventInterval with nothing dropped;
// the run waits in add when maxUnflushed events are queued.
type eventWriter struct {
	h        *Host
	threadID string
	fence    *agent.Fence
	lg       *zap.Logger
	ctx      context.Context // the run's: a stopped run no longer waits for room
	deliver  agent.Sink
	lost     context.CancelCauseFunc // stops the run when the lease is lost

	mu      sync.Mutex
	queue   []queued
	added   int           // events queued so far
	stored  int           // of them, appended to the log
	gone    bool          // the lease is lost: nothing more is written or delivered
	closing bool          // close was called: flush the rest and stop
	room    chan struct{} // closed (and replaced) when the queue shrinks

	wake chan struct{} // buffered: events were queued, or close was called
	done chan struct{}
}

// queued is an event to append, with the event to deliver once it is.
type queued struct {
	stored store.Event
	e      agent.Event
}

func (h *Host) startEvents(ctx context.Context, l store.Lease, lg *zap.Logger, deliver agent.Sink, lost context.CancelCauseFunc) *eventWriter {
	w := &eventWriter{
		h: h, threadID: l.ThreadID, fence: l.Fence(), lg: lg, ctx: ctx, deliver: deliver, lost: lost,
		room: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	go w.loop()
	return w
}

// add queues e (a run's sink calls it, in sequence order).
func (w *eventWriter) add(e agent.Event) {
	pb := agentconv.EventToPB(e)
	body, err := proto.Marshal(pb)
	if err != nil {
		w.lg.Error("encode an event for the event log", zap.Error(err))
		return
	}
	ev := store.Event{RunID: pb.GetRunId(), Sequence: pb.GetSequence(), Start: pb.GetRunStarted() != nil, Terminal: terminal(pb), Body: body}
	w.mu.Lock()
	// Back-pressure while the store is down; a stopped run's last events
	// (its terminal one) are queued past the bound.
	for len(w.queue) >= maxUnflushed && !w.gone && w.ctx.Err() == nil {
		room := w.room
		w.mu.Unlock()
		select {
		case <-room:
		case <-w.ctx.Done():
		}
		w.mu.Lock()
	}
	if !w.gone {
		w.queue = append(w.queue, queued{stored: ev, e: e})
		w.added++
	}
	w.mu.Unlock()
	w.signal()
}

func (w *eventWriter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// loop appends what is queued, one batch at a time, and delivers each
// stored batch; it returns once close was called and the queue is empty
// (or could not be stored for cleanupTimeout), or when the lease is lost.
func (w *eventWriter) loop() {
	defer close(w.done)
	var giveUp time.Time
	for {
		w.mu.Lock()
		batch, closing := w.queue[:min(len(w.queue), maxAppend)], w.closing
		w.mu.Unlock()
		if len(batch) == 0 {
			if closing {
				return
			}
			<-w.wake
			continue
		}
		if closing && giveUp.IsZero() {
			giveUp = time.Now().Add(cleanupTimeout)
		}
		evs := make([]store.Event, len(batch))
		for i, q := range batch {
			evs[i] = q.stored
		}
		ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
		err := w.h.cfg.Events.AppendEvents(ctx, w.threadID, w.fence, evs)
		cancel()
		switch {
		case err == nil:
			w.mu.Lock()
			w.queue = w.queue[len(batch):]
			w.stored += len(batch)
			if len(w.queue) == 0 {
				w.queue = nil
			}
			w.wakeWaiters()
			w.mu.Unlock()
			for _, q := range batch {
				w.deliver(q.e)
			}
		case errors.Is(err, store.ErrLeaseLost):
			w.lg.Warn("the event log refuses the run's events: the thread's lease is gone; stopping the run here", zap.Error(err))
			w.mu.Lock()
			w.gone, w.queue = true, nil
			w.wakeWaiters()
			w.mu.Unlock()
			w.lost(err)
			return
		case !giveUp.IsZero() && time.Now().After(giveUp):
			// Nobody saw them; a replica taking the run over numbers
			// its events after the stored ones.
			w.lg.Error("the event log stayed unwritable; the run's last events are not stored nor delivered", zap.Int("events", len(w.queue)), zap.Error(err))
			return
		default:
			w.lg.Warn("append to the event log; retrying", zap.Int("events", len(batch)), zap.Error(err))
			t := time.NewTimer(w.h.eventInterval())
			<-t.C
		}
	}
}

// wakeWaiters wakes those waiting in add and flush for the queue to
// shrink (or the lease to go). Called with w.mu held.
func (w *eventWriter) wakeWaiters() {
	close(w.room)
	w.room = make(chan struct{})
}

// flush returns once every event queued so far is stored (agent.RunInput
// Flush: the runtime calls it before each checkpoint commit), or fails
// with store.ErrLeaseLost once the log refuses the run's events.
func (w *eventWriter) flush(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	target := w.added
	for w.stored < target && !w.gone {
		room := w.room
		w.mu.Unlock()
		w.signal()
		select {
		case <-room:
		case <-ctx.Done():
			w.mu.Lock()
			return ctx.Err()
		}
		w.mu.Lock()
	}
	if w.gone {
		return fmt.Errorf("the event log of thread %s: %w", w.threadID, store.ErrLeaseLost)
	}
	return nil
}

// close flushes the rest and stops the writer.
func (w *eventWriter) close() {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	w.signal()
	<-w.done
}

// terminal reports whether e ends a segment.
func terminal(e *plumbv1.Event) bool {
	switch e.GetPayload().(type) {
	case *plumbv1.Event_RunFinished, *plumbv1.Event_Interrupted, *plumbv1.Event_Error:
		return true
	}
	return false
}

// EventsExpiredError: the events of the thread's last run were deleted
// by retention (retention.run_events) after it ended; its record
// remains (GetRun, and the thread's messages in GetThread).
type EventsExpiredError struct {
	ThreadID, RunID string
	// Last is the run's last sequence.
	Last uint64
}

// Error implements error.
func (e *EventsExpiredError) Error() string {
	return fmt.Sprintf("the events of run %s of thread %s have expired (retention.run_events); GetRun has its record and GetThread its messages", e.RunID, e.ThreadID)
}

// expired returns an *EventsExpiredError when the finished run runID had
// events after sequence after that the log no longer holds (retention
// deleted them), nil otherwise.
func (h *Host) expired(ctx context.Context, threadID, runID string, after uint64) error {
	if h.cfg.Runs == nil {
		return nil
	}
	stored, err := h.cfg.Events.LastSequence(ctx, runID)
	if err != nil || stored != 0 {
		return err
	}
	ri, err := h.cfg.Runs.GetRun(ctx, runID)
	if err != nil {
		if errors.Is(err, store.ErrRunNotFound) {
			return nil
		}
		return err
	}
	if ri.Record.LastSequence > after {
		return &EventsExpiredError{ThreadID: threadID, RunID: runID, Last: ri.Record.LastSequence}
	}
	return nil
}

// errNoStoredRun: the event log has no run of the thread to follow.
var errNoStoredRun = errors.New("no run in the event log")

// followStored sends the events of the thread's last run from the shared
// event log after sequence after (0: from the start of the run), through
// every segment the log has (an interrupted one's terminal event
// included), then follows the log until the newest segment's terminal
// event: Attach to a run that lives on another replica (or was taken over
// by one), or whose earlier segments this replica no longer holds. When
// this replica stops, it ends with a *runs.CutError naming the last
// sequence sent. It ends without a terminal event when the run is over
// but its terminal event never reached the log (its replica died and the
// run was failed instead of taken over), or when a newer run begins.
func (h *Host) followStored(ctx context.Context, threadID string, after uint64, send Send) error {
	runID := ""
	quiet := 0
	// atEnd: the last event sent ended a segment; the stream ends there
	// unless a later segment of the run is already in the log.
	atEnd := false
	for {
		page, err := h.cfg.Events.ReadEvents(ctx, threadID, after, 256)
		if err != nil {
			return err
		}
		switch {
		case page.RunID == "":
			return fmt.Errorf("thread %s: %w", threadID, errNoStoredRun)
		case runID == "":
			runID = page.RunID
			if len(page.Events) == 0 && page.Status != "" && page.Status != agent.StatusRunning {
				if err := h.expired(ctx, threadID, runID, after); err != nil {
					return err
				}
				if after == 0 {
					return fmt.Errorf("thread %s: %w", threadID, errNoStoredRun)
				}
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
		t := time.NewTimer(h.eventInterval())
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-h.handOff:
			// This replica is stopping: the client follows the run from
			// another one.
			t.Stop()
			return &runs.CutError{ThreadID: threadID, Last: after, Err: runs.ErrReplicaStopping}
		case <-t.C:
		}
	}
}
