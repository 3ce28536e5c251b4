package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/store"
)

// SteerStore is a durable store that keeps steers.
type SteerStore interface {
	store.Threads
	store.Runs
	store.Steers
}

// RunSteers runs the store.Steers contract against a fresh store from
// newStore: a steer is stored only for a RUNNING run of its thread, read
// back in order, consumed once by the checkpoint that delivers it (a
// second consumption is a conflict that commits nothing), turned into one
// queued run when the run ended without taking it, and deleted with its
// thread.
func RunSteers(t *testing.T, newStore func(t *testing.T) SteerStore) {
	t.Helper()
	s := newStore(t)
	for _, id := range []string{"th", "other"} {
		if err := s.CreateThread(ctx(), agent.Thread{ID: id, CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	save := func(base int, rec agent.RunRecord, consume []int64, add ...agent.Message) error {
		return s.SaveCheckpoint(ctx(), &agent.Checkpoint{ThreadID: "th", Phase: agent.PhaseInput, Base: base, Append: add, Run: rec, ConsumeSteers: consume, CreatedAt: t0})
	}
	running := agent.RunRecord{RunID: "r1", Status: agent.StatusRunning, StartedAt: t0}
	if err := save(0, running, nil, msg(model.RoleUser, "go")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddSteer(ctx(), "th", "missing", []string{"x"}, t0); !errors.Is(err, store.ErrRunNotRunning) {
		t.Fatalf("steer a missing run: %v, want ErrRunNotRunning", err)
	}
	if _, err := s.AddSteer(ctx(), "other", "r1", []string{"x"}, t0); !errors.Is(err, store.ErrRunNotRunning) {
		t.Fatalf("steer a run of another thread: %v, want ErrRunNotRunning", err)
	}
	if _, err := s.AddSteer(ctx(), "th", "r1", nil, t0); !errors.Is(err, agent.ErrInvalidInput) {
		t.Fatalf("steer without input: %v, want ErrInvalidInput", err)
	}
	a, err := s.AddSteer(ctx(), "th", "r1", []string{"first", "second"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.AddSteer(ctx(), "th", "r1", []string{"third"}, t0.Add(time.Second))
	if err != nil || b <= a {
		t.Fatalf("second steer: %d, %v (first %d)", b, err, a)
	}
	got, err := s.PendingSteers(ctx(), "th", "r1")
	if err != nil || len(got) != 2 || got[0].ID != a || !slices.Equal(got[0].Input, []string{"first", "second"}) || got[1].ID != b || !got[1].CreatedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("pending steers = %+v, %v", got, err)
	}
	// Delivered once: the checkpoint consumes it, a second one conflicts
	// and commits nothing.
	if err := save(1, running, []int64{a}, msg(model.RoleUser, "first"), msg(model.RoleUser, "second")); err != nil {
		t.Fatal(err)
	}
	if err := save(3, running, []int64{a}, msg(model.RoleUser, "again")); !errors.Is(err, agent.ErrConflict) {
		t.Fatalf("consume a delivered steer: %v, want ErrConflict", err)
	}
	if d, err := s.LoadThread(ctx(), "th"); err != nil || len(d.Messages) != 3 {
		t.Fatalf("the log after a refused consumption: %v, %v", d, err)
	}
	if got, err := s.PendingSteers(ctx(), "th", "r1"); err != nil || len(got) != 1 || got[0].ID != b {
		t.Fatalf("pending steers after one was consumed = %+v, %v", got, err)
	}
	// The run ends without taking the last one: it becomes a queued run.
	ended := running
	ended.Status, ended.FinishedAt = agent.StatusCompleted, t0.Add(2*time.Second)
	if err := save(3, ended, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddSteer(ctx(), "th", "r1", []string{"late"}, t0); !errors.Is(err, store.ErrRunNotRunning) {
		t.Fatalf("steer an ended run: %v, want ErrRunNotRunning", err)
	}
	q, err := s.SteersToQueue(ctx(), "th", "r1", agent.RunRecord{RunID: "r2", CreatedAt: t0.Add(3 * time.Second)})
	if err != nil || !q {
		t.Fatalf("steers to queue: %v, %v; want a queued run", q, err)
	}
	next, err := s.NextQueuedRun(ctx(), "th")
	if err != nil || next == nil || next.Record.RunID != "r2" || next.Record.Status != agent.StatusQueued || !slices.Equal(next.Record.Input, []string{"third"}) {
		t.Fatalf("the queued run = %+v, %v", next, err)
	}
	if q, err := s.SteersToQueue(ctx(), "th", "r1", agent.RunRecord{RunID: "r3"}); err != nil || q {
		t.Fatalf("steers to queue again: %v, %v; want nothing", q, err)
	}
	// Steers go with their thread.
	if err := save(3, agent.RunRecord{RunID: "r4", Status: agent.StatusRunning, StartedAt: t0}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddSteer(ctx(), "th", "r4", []string{"gone"}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteThread(ctx(), "th"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.PendingSteers(ctx(), "th", "r4"); err != nil || len(got) != 0 {
		t.Fatalf("steers of a deleted thread = %+v, %v", got, err)
	}
}
