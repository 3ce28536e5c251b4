package runs_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost/runs"
)

func interrupted(seq uint64) *plumbv1.Event {
	e := ev(seq, nil)
	e.Payload = &plumbv1.Event_Interrupted{Interrupted: &plumbv1.Interrupted{InterruptId: "i1"}}
	return e
}

func resumed(seq uint64) *plumbv1.Event {
	return ev(seq, &plumbv1.RunStarted{ThreadId: "t1", RunId: "r1", Resumed: true})
}

// interruptedRun registers run r1 of thread t1 interrupted at sequence 3
// (run_started, a tool call, interrupted) and its Resume segment started
// at 4, still running.
func interruptedRun(t *testing.T, g *runs.Registry) *runs.Run {
	t.Helper()
	r, err := g.Begin("t1", func() {})
	if err != nil {
		t.Fatal(err)
	}
	leave(r)
	r.Emit(started(1))
	r.Emit(tool(2))
	r.Emit(interrupted(3))
	r.End(nil)
	res, err := g.Begin("t1", func() {})
	if err != nil {
		t.Fatal(err)
	}
	leave(res)
	res.Emit(resumed(4))
	res.Emit(tool(5))
	return res
}

// attachAll attaches to t1 after after and follows to the end (a stream
// that never ends fails after a hang guard).
func attachAll(t *testing.T, g *runs.Registry, after uint64, end func()) ([]uint64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	a, from, err := g.Attach("t1", after)
	if err != nil {
		return nil, err
	}
	got := make(chan []*plumbv1.Event, 1)
	errc := make(chan error, 1)
	go func() {
		var out []*plumbv1.Event
		err := a.Follow(ctx, from, func(e *plumbv1.Event) error {
			out = append(out, e)
			return nil
		})
		got <- out
		errc <- err
	}()
	if end != nil {
		end()
	}
	return seqs(<-got), <-errc
}

// TestAttachReplaysEarlierSegments: after a Resume, Attach replays the
// run from its start (after 0) or from any retained sequence through the
// interrupted segment into the live one, each event once, in order, and
// then follows the live segment to its end.
func TestAttachReplaysEarlierSegments(t *testing.T) {
	g := runs.New(runs.Options{})
	res := interruptedRun(t, g)
	got, err := attachAll(t, g, 0, func() {
		res.Emit(finish(6))
		res.End(nil)
	})
	if err != nil || !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("attach after 0: %v, %v; want 1..6", got, err)
	}
	for after, want := range map[uint64][]uint64{2: {3, 4, 5, 6}, 3: {4, 5, 6}, 5: {6}} {
		if got, err := attachAll(t, g, after, nil); err != nil || !slices.Equal(got, want) {
			t.Errorf("attach after %d: %v, %v; want %v", after, got, err, want)
		}
	}
}

// TestAttachEarlierSegmentsRetention: an earlier segment is kept for the
// replay retention after its own end; past it, Attach from before the
// live segment is OUT_OF_RANGE naming the oldest event left, and Attach
// from there works. A new run does not chain to the previous one.
func TestAttachEarlierSegmentsRetention(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	g := runs.New(runs.Options{Retention: time.Minute, Now: c.Now})
	res := interruptedRun(t, g)
	c.add(time.Minute)
	_, err := attachAll(t, g, 0, nil)
	var oor *runs.OutOfRangeError
	if !errors.As(err, &oor) || oor.Oldest != 4 {
		t.Fatalf("attach after 0 past the first segment's retention: %v; want OUT_OF_RANGE, oldest 4", err)
	}
	got, err := attachAll(t, g, oor.Oldest-1, func() {
		res.Emit(finish(6))
		res.End(nil)
	})
	if err != nil || !slices.Equal(got, []uint64{4, 5, 6}) {
		t.Fatalf("attach after %d: %v, %v; want 4..6", oor.Oldest-1, got, err)
	}

	next, err := g.Begin("t1", func() {})
	if err != nil {
		t.Fatal(err)
	}
	leave(next)
	first := started(1)
	first.RunId = "r2"
	next.Emit(first)
	got, err = attachAll(t, g, 0, func() {
		last := finish(2)
		last.RunId = "r2"
		next.Emit(last)
		next.End(nil)
	})
	if err != nil || !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("attach to a new run: %v, %v; want its own events 1, 2", got, err)
	}
}
