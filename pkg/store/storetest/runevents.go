package storetest

import (
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/store"
)

// RunEventStore is what RunEventRetention needs of a store.
type RunEventStore interface {
	store.Threads
	store.Retention
	store.LeaseStore
	store.Runs
}

// RunEventRetention runs the run event part of store.Retention against a
// fresh store from newStore: the event log of a thread whose last run
// ended and that was not updated since the cutoff is deleted, by tenant
// or leaving tenants out; a thread with a running, interrupted or queued
// run, or an unreleased lease, or updated since, keeps its log; the run
// record stays.
func RunEventRetention(t *testing.T, newStore func(t *testing.T) RunEventStore) {
	t.Helper()
	s := newStore(t)
	const ttl = time.Minute
	threads := []struct {
		id, tenant string
		age        time.Duration
		status     agent.RunStatus
		keepLease  bool
		queue      bool
		expired    bool
	}{
		{id: "done-old", tenant: "acme", age: 100 * time.Hour, status: agent.StatusCompleted, expired: true},
		{id: "failed-old", tenant: "acme", age: 90 * time.Hour, status: agent.StatusFailed, expired: true},
		{id: "done-fresh", tenant: "acme", age: time.Hour, status: agent.StatusCompleted},
		{id: "running-old", tenant: "acme", age: 100 * time.Hour, status: agent.StatusRunning},
		{id: "interrupted-old", tenant: "acme", age: 100 * time.Hour, status: agent.StatusInterrupted},
		{id: "queued-old", tenant: "acme", age: 100 * time.Hour, status: agent.StatusCompleted, queue: true},
		{id: "leased-old", tenant: "acme", age: 100 * time.Hour, status: agent.StatusCompleted, keepLease: true},
		{id: "beta-old", tenant: "beta", age: 100 * time.Hour, status: agent.StatusCompleted},
	}
	for _, th := range threads {
		at := t0.Add(-th.age)
		if err := s.CreateThread(ctx(), agent.Thread{ID: th.id, Tenant: th.tenant, CreatedAt: at, UpdatedAt: at}); err != nil {
			t.Fatal(err)
		}
		run := "run-" + th.id
		l, err := s.AcquireLease(ctx(), th.id, "replica-a", at, ttl)
		if err != nil {
			t.Fatal(err)
		}
		evs := []store.Event{{RunID: run, Sequence: 1, Start: true, Body: []byte("1")}, {RunID: run, Sequence: 2, Terminal: true, Body: []byte("2")}}
		if err := s.AppendEvents(ctx(), th.id, l.Fence(), evs); err != nil {
			t.Fatal(err)
		}
		cp := &agent.Checkpoint{ThreadID: th.id, Phase: agent.PhaseFinal, Run: agent.RunRecord{RunID: run, Status: th.status, StartedAt: at, LastSequence: 2}, CreatedAt: at,
			Fence: l.Fence(), Append: []agent.Message{{Message: model.Message{Role: model.RoleUser, Content: "hi"}}}}
		if err := s.SaveCheckpoint(ctx(), cp); err != nil {
			t.Fatal(err)
		}
		if !th.keepLease {
			if err := s.ReleaseLease(ctx(), l); err != nil {
				t.Fatal(err)
			}
		}
		if th.queue {
			if err := s.EnqueueRun(ctx(), th.id, agent.RunRecord{RunID: "q-" + th.id, Status: agent.StatusQueued, CreatedAt: at}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// beta has a TTL of its own: the default scope leaves it out, and
	// its own scope (a shorter cutoff for it alone) takes it.
	q := store.ExpiredDeliveries{Before: t0.Add(-50 * time.Hour), Except: []string{"beta"}, Limit: 1}
	total := 0
	for range 10 {
		n, err := s.DeleteExpiredRunEvents(ctx(), q)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		total += n
	}
	if total != 4 {
		t.Errorf("deleted %d events; want 4 (two threads' two each)", total)
	}
	for _, th := range threads {
		page, err := s.ReadEvents(ctx(), th.id, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(page.Events) == 0; got != th.expired {
			t.Errorf("thread %s: %d events left; want them deleted: %v", th.id, len(page.Events), th.expired)
		}
		if last, err := s.LastSequence(ctx(), "run-"+th.id); err != nil || (last == 0) != th.expired {
			t.Errorf("LastSequence of run-%s = %d, %v", th.id, last, err)
		}
	}
	if n, err := s.DeleteExpiredRunEvents(ctx(), store.ExpiredDeliveries{Before: t0, Tenant: "beta"}); err != nil || n != 2 {
		t.Errorf("beta's scope deleted %d, %v; want 2", n, err)
	}
}
