package agent_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// TestHandOffStopsAtTheNextCheckpoint: a run whose HandOff closes while
// step 1 is under way finishes that step (its tool call runs and is
// committed), then stops with ErrHandedOff: no terminal event, the record
// still RUNNING. Continue then finishes it without running the committed
// call again.
func TestHandOffStopsAtTheNextCheckpoint(t *testing.T) {
	h := newHarness(t)
	handOff := make(chan struct{})
	h.srv.Script("main",
		modeltest.Turn{Dynamic: func(modeltest.Request) modeltest.Turn {
			close(handOff) // asked to stop while step 1's model call is under way
			return modeltest.Calls(modeltest.Call{ID: "c1", Name: "counter", Args: `{}`})
		}},
		modeltest.Text("done"),
	)
	var rec recorder
	_, err := h.runner.Run(t.Context(), agent.RunInput{Input: []string{"count"}, HandOff: handOff}, rec.sink)
	if !errors.Is(err, agent.ErrHandedOff) {
		t.Fatalf("run: %v, want ErrHandedOff", err)
	}
	evs := rec.all()
	if k := rec.kinds(); slices.Contains(k, "run_finished") || slices.Contains(k, "error") || !slices.Contains(k, "tool_result") {
		t.Fatalf("a handed-off run emitted %v; want step 1 whole and no terminal event", k)
	}
	thread := evs[0].ThreadID
	td, err := h.store.LoadThread(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	if td.LastRun.Status != agent.StatusRunning || len(td.Messages) != 3 || td.LastRun.Steps != 1 {
		t.Fatalf("handed-off run: %s, %d messages, %d steps; want RUNNING at step 1's checkpoint (3 messages)", td.LastRun.Status, len(td.Messages), td.LastRun.Steps)
	}
	var cont recorder
	res, err := h.runner.Continue(t.Context(), agent.ContinueInput{ThreadID: thread, AfterSequence: evs[len(evs)-1].Sequence}, cont.sink)
	if err != nil || res.Status != agent.StatusCompleted {
		t.Fatalf("continue: %+v, %v", res, err)
	}
	if h.kit.Count() != 1 || h.srv.Count("main") != 2 {
		t.Fatalf("counter ran %d times, %d model calls; want 1 and 2", h.kit.Count(), h.srv.Count("main"))
	}
	if first := cont.all()[0].Sequence; first != evs[len(evs)-1].Sequence+1 {
		t.Fatalf("the continued segment starts at sequence %d, want %d", first, evs[len(evs)-1].Sequence+1)
	}
}

// TestHandOffCause: a run whose context is cancelled with cause
// ErrHandedOff stops at once, records nothing more (not CANCELLED) and
// returns ErrHandedOff.
func TestHandOffCause(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancelCause(t.Context())
	h.srv.Script("main", modeltest.Turn{Dynamic: func(modeltest.Request) modeltest.Turn {
		cancel(agent.ErrHandedOff)
		// Never answers: the run must stop on the cancellation, not race
		// it to a completed answer.
		return modeltest.Turn{FirstByteDelay: time.Hour, Text: []string{"too late"}}
	}})
	var rec recorder
	_, err := h.runner.Run(ctx, agent.RunInput{Input: []string{"hi"}}, rec.sink)
	if !errors.Is(err, agent.ErrHandedOff) {
		t.Fatalf("run: %v, want ErrHandedOff", err)
	}
	td, err := h.store.LoadThread(context.Background(), rec.all()[0].ThreadID)
	if err != nil {
		t.Fatal(err)
	}
	if td.LastRun.Status != agent.StatusRunning || len(td.Messages) != 1 {
		t.Fatalf("run cut for a hand-off: %s with %d messages; want RUNNING with the input only", td.LastRun.Status, len(td.Messages))
	}
	if k := rec.kinds(); slices.Contains(k, "run_finished") || slices.Contains(k, "error") {
		t.Fatalf("a run cut for a hand-off emitted %v", k)
	}
}

// TestFlushGatesEveryCheckpoint: RunInput.Flush is called before each
// checkpoint commit, with every event emitted so far already in the sink,
// and a failing Flush keeps the checkpoint from committing (so a stored
// record never counts events that were not stored where others replay
// them).
func TestFlushGatesEveryCheckpoint(t *testing.T) {
	h := newHarness(t)
	h.srv.Script("main", modeltest.Calls(modeltest.Call{ID: "c1", Name: "counter", Args: `{}`}), modeltest.Text("done"))
	var rec recorder
	var seen []uint64 // the last sequence in the sink at each flush
	flush := func(context.Context) error {
		var last uint64 // the input's checkpoint comes before run_started
		if evs := rec.all(); len(evs) > 0 {
			last = evs[len(evs)-1].Sequence
		}
		seen = append(seen, last)
		return nil
	}
	res, err := h.runner.Run(t.Context(), agent.RunInput{Input: []string{"count"}, Flush: flush}, rec.sink)
	if err != nil || res.Status != agent.StatusCompleted {
		t.Fatalf("run: %+v, %v", res, err)
	}
	if len(seen) < 3 || !slices.IsSorted(seen) {
		t.Fatalf("flushes saw %v; want one before each of the run's checkpoints (at least 3), in order", seen)
	}
	td, err := h.store.LoadThread(context.Background(), res.ThreadID)
	if err != nil {
		t.Fatal(err)
	}
	if last := seen[len(seen)-1]; td.LastRun.LastSequence > last+1 {
		t.Fatalf("the final record counts %d events, the last flush had %d (+ the terminal event)", td.LastRun.LastSequence, last)
	}

	h2 := newHarness(t)
	h2.srv.Script("main", modeltest.Calls(modeltest.Call{ID: "c1", Name: "counter", Args: `{}`}), modeltest.Text("done"))
	var rec2 recorder
	refused := func(context.Context) error { return agent.ErrLeaseLost }
	_, _ = h2.runner.Run(t.Context(), agent.RunInput{Input: []string{"count"}, Flush: refused}, rec2.sink)
	if evs := rec2.all(); len(evs) > 0 {
		if td, err := h2.store.LoadThread(context.Background(), evs[0].ThreadID); err == nil && td.LastRun != nil && td.LastRun.Steps > 0 {
			t.Fatalf("a checkpoint committed past a failed flush: %+v", td.LastRun)
		}
	}
	if h2.kit.Count() != 0 {
		t.Fatalf("the tool ran %d times although no checkpoint could commit", h2.kit.Count())
	}
}
