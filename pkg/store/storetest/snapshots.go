package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// SnapshotStore is what RunThreadSnapshots needs of a store.
type SnapshotStore interface {
	store.Threads
	store.ThreadSnapshots
}

// RunThreadSnapshots runs the store.ThreadSnapshots contract against a
// fresh store from newStore keeping retention checkpoints per thread:
// records are listed per thread in checkpoint order with the thread's
// tenant, a zero checkpoint is the latest, records of pruned checkpoints
// are queued for deletion unless another thread names the snapshot, and
// deleting a thread queues its snapshots no other thread names.
func RunThreadSnapshots(t *testing.T, newStore func(t *testing.T, retention int) SnapshotStore) {
	t.Helper()
	s := newStore(t, 2)
	checkpoint := func(id string, n int) int64 {
		t.Helper()
		if err := s.SaveCheckpoint(ctx(), &agent.Checkpoint{ThreadID: id, Phase: agent.PhaseFinal, Base: n,
			Append: []agent.Message{msg("user", "hi")}, CreatedAt: t0.Add(time.Duration(n) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		d := mustLoad(t, s, id)
		return d.Checkpoints[len(d.Checkpoints)-1].ID
	}
	add := func(sn store.ThreadSnapshot) store.ThreadSnapshot {
		t.Helper()
		got, err := s.AddThreadSnapshot(ctx(), sn)
		if err != nil {
			t.Fatalf("AddThreadSnapshot(%+v): %v", sn, err)
		}
		return got
	}
	ids := func(list []store.ThreadSnapshot) []string {
		var out []string
		for _, sn := range list {
			out = append(out, sn.SnapshotID)
		}
		return out
	}
	list := func(id string) []store.ThreadSnapshot {
		t.Helper()
		l, err := s.ThreadSnapshots(ctx(), id)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	queued := func() []string {
		t.Helper()
		q, err := s.QueuedSnapshotDeletions(ctx(), 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range q {
			out = append(out, d.SnapshotID)
			if d.Tenant != "acme" || d.SandboxID == "" {
				t.Errorf("queued %+v: want tenant acme and its sandbox", d)
			}
		}
		slices.Sort(out)
		return out
	}

	if err := s.CreateThread(ctx(), agent.Thread{ID: "ta", CreatedAt: t0, Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddThreadSnapshot(ctx(), store.ThreadSnapshot{ThreadID: "nope", SnapshotID: "snap-x", SandboxID: "sbx-w-1", CreatedAt: t0}); !errors.Is(err, agent.ErrThreadNotFound) {
		t.Errorf("AddThreadSnapshot of an unknown thread: %v, want ErrThreadNotFound", err)
	}
	cp1 := checkpoint("ta", 0)
	s1 := add(store.ThreadSnapshot{ThreadID: "ta", SnapshotID: "snap-1", SandboxID: "sbx-w-1", CreatedAt: t0.Add(time.Minute)})
	if s1.CheckpointID != cp1 || s1.Tenant != "acme" {
		t.Errorf("recorded %+v: want checkpoint %d (the latest) and tenant acme", s1, cp1)
	}
	cp2 := checkpoint("ta", 1)
	add(store.ThreadSnapshot{ThreadID: "ta", SnapshotID: "snap-2", SandboxID: "sbx-w-1", CreatedAt: t0.Add(2 * time.Minute)})
	got := list("ta")
	if !slices.Equal(ids(got), []string{"snap-1", "snap-2"}) || got[1].CheckpointID != cp2 || !got[1].CreatedAt.Equal(t0.Add(2*time.Minute)) || got[0].Shared {
		t.Fatalf("ThreadSnapshots = %+v", got)
	}
	if sn, ok := store.LatestSnapshotAt(got, cp1); !ok || sn.SnapshotID != "snap-1" {
		t.Errorf("LatestSnapshotAt(cp1) = %+v, %v", sn, ok)
	}
	if sn, ok := store.LatestSnapshotAt(got, 0); !ok || sn.SnapshotID != "snap-2" {
		t.Errorf("LatestSnapshotAt(latest) = %+v, %v", sn, ok)
	}
	if _, ok := store.LatestSnapshotAt(got[1:], cp1); ok {
		t.Errorf("LatestSnapshotAt before the first snapshot found one")
	}
	if l := list("nope"); len(l) != 0 {
		t.Errorf("snapshots of an unknown thread: %+v", l)
	}

	// A fork names snap-2 too.
	if err := s.CreateThread(ctx(), agent.Thread{ID: "tf", CreatedAt: t0, Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	checkpoint("tf", 0)
	add(store.ThreadSnapshot{ThreadID: "tf", SnapshotID: "snap-2", SandboxID: "sbx-w-1", CreatedAt: t0.Add(3 * time.Minute)})
	if got := list("ta"); !got[1].Shared || got[0].Shared {
		t.Errorf("after the fork: %+v; want snap-2 shared, snap-1 not", got)
	}

	// Retention 2: a third checkpoint prunes cp1, and the next record
	// queues snap-1 (no other thread names it).
	checkpoint("ta", 2)
	add(store.ThreadSnapshot{ThreadID: "ta", SnapshotID: "snap-3", SandboxID: "sbx-w-1", CreatedAt: t0.Add(4 * time.Minute)})
	if got := ids(list("ta")); !slices.Equal(got, []string{"snap-2", "snap-3"}) {
		t.Errorf("after pruning: %v, want [snap-2 snap-3]", got)
	}
	if q := queued(); !slices.Equal(q, []string{"snap-1"}) {
		t.Errorf("queued after pruning: %v, want [snap-1]", q)
	}
	if err := s.SnapshotDeleted(ctx(), "snap-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.SnapshotDeleted(ctx(), "snap-unknown"); err != nil {
		t.Errorf("SnapshotDeleted of an unknown id: %v", err)
	}

	// Deleting the thread queues what only it names: snap-3, not the
	// fork's snap-2.
	if err := s.DeleteThread(ctx(), "ta"); err != nil {
		t.Fatal(err)
	}
	if q := queued(); !slices.Equal(q, []string{"snap-3"}) {
		t.Errorf("queued after deleting the thread: %v, want [snap-3]", q)
	}
	if got := list("tf"); len(got) != 1 || got[0].Shared {
		t.Errorf("the fork's snapshots: %+v; want snap-2, no longer shared", got)
	}
	// A forgotten record is not queued.
	add(store.ThreadSnapshot{ThreadID: "tf", SnapshotID: "snap-4", SandboxID: "sbx-w-2", CreatedAt: t0.Add(5 * time.Minute)})
	if err := s.ForgetThreadSnapshot(ctx(), "tf", "snap-4"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteThread(ctx(), "tf"); err != nil {
		t.Fatal(err)
	}
	if q := queued(); !slices.Equal(q, []string{"snap-2", "snap-3"}) {
		t.Errorf("queued after deleting the fork: %v, want [snap-2 snap-3]", q)
	}
	if q, err := s.QueuedSnapshotDeletions(ctx(), 1); err != nil || len(q) != 1 || q[0].SnapshotID != "snap-3" {
		t.Errorf("QueuedSnapshotDeletions(1) = %+v, %v; want the oldest queued, snap-3", q, err)
	}
}
