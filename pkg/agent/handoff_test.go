package agent_test

import (
	"context"
	"errors"
	"slices"
	"testing"

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
		return modeltest.Text("too late")
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
