package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// RetentionStore is what RunRetention needs of a store.
type RetentionStore interface {
	store.Threads
	store.Webhooks
	store.Retention
}

// RunRetention runs the store.Retention contract against a fresh store
// from newStore, with times chosen by the test (the injected clock):
// idle threads are listed least recently updated first, by tenant or
// leaving tenants out, in batches; finished deliveries past their TTL are
// deleted in batches, unfinished ones never.
func RunRetention(t *testing.T, newStore func(t *testing.T) RetentionStore) {
	t.Helper()
	t.Run("IdleThreads", func(t *testing.T) { idleThreads(t, newStore(t)) })
	t.Run("FinishedDeliveries", func(t *testing.T) { finishedDeliveries(t, newStore(t)) })
}

func idleThreads(t *testing.T, s RetentionStore) {
	for i, th := range []struct {
		id, tenant string
		age        time.Duration
	}{
		{"old-acme", "acme", 100 * time.Hour},
		{"older-acme", "acme", 200 * time.Hour},
		{"old-beta", "beta", 150 * time.Hour},
		{"fresh-acme", "acme", time.Hour},
	} {
		at := t0.Add(-th.age)
		if err := s.CreateThread(ctx(), agent.Thread{ID: th.id, Tenant: th.tenant, CreatedAt: at, UpdatedAt: at}); err != nil {
			t.Fatalf("thread %d: %v", i, err)
		}
	}
	before := t0.Add(-50 * time.Hour)
	for _, tc := range []struct {
		name string
		q    store.IdleQuery
		want []string
	}{
		{"all", store.IdleQuery{Before: before}, []string{"older-acme", "old-beta", "old-acme"}},
		{"batch", store.IdleQuery{Before: before, Limit: 2}, []string{"older-acme", "old-beta"}},
		{"tenant", store.IdleQuery{Before: before, Tenant: "acme"}, []string{"older-acme", "old-acme"}},
		{"except", store.IdleQuery{Before: before, Except: []string{"acme"}}, []string{"old-beta"}},
		{"none idle", store.IdleQuery{Before: t0.Add(-300 * time.Hour)}, nil},
		{"updated just before", store.IdleQuery{Before: t0.Add(-time.Hour + time.Nanosecond)}, []string{"older-acme", "old-beta", "old-acme", "fresh-acme"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.IdleThreads(ctx(), tc.q)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("IdleThreads(%+v) = %v, %v; want %v", tc.q, got, err, tc.want)
			}
		})
	}
	// A checkpoint makes a thread active again.
	cp := &agent.Checkpoint{ThreadID: "older-acme", Phase: agent.PhaseInput, CreatedAt: t0}
	if err := s.SaveCheckpoint(ctx(), cp); err != nil {
		t.Fatal(err)
	}
	if got, err := s.IdleThreads(ctx(), store.IdleQuery{Before: before, Tenant: "acme"}); err != nil || !slices.Equal(got, []string{"old-acme"}) {
		t.Fatalf("idle after a checkpoint = %v, %v; want [old-acme]", got, err)
	}
}

func finishedDeliveries(t *testing.T, s RetentionStore) {
	type dl struct {
		id, tenant string
		status     store.DeliveryStatus
		age        time.Duration
	}
	for _, d := range []dl{
		{"ok-old", "acme", store.DeliverySucceeded, 100 * time.Hour},
		{"failed-old", "acme", store.DeliveryFailed, 90 * time.Hour},
		{"beta-old", "beta", store.DeliverySucceeded, 80 * time.Hour},
		{"ok-new", "acme", store.DeliverySucceeded, time.Hour},
		{"pending-old", "acme", store.DeliveryPending, 100 * time.Hour},
	} {
		at := t0.Add(-d.age)
		if _, err := s.EnqueueDelivery(ctx(), delivery(d.id, d.tenant, "th", "run-"+d.id, at)); err != nil {
			t.Fatal(err)
		}
		if d.status == store.DeliveryPending {
			continue
		}
		claimed, err := s.ClaimDeliveries(ctx(), "h-"+d.id, at, time.Minute, 1)
		if err != nil || len(claimed) != 1 || claimed[0].ID != d.id {
			t.Fatalf("claim %s = %+v, %v", d.id, claimed, err)
		}
		if err := s.FinishAttempt(ctx(), store.AttemptResult{ID: d.id, Holder: "h-" + d.id, Status: d.status, StatusCode: 200, Finished: at}); err != nil {
			t.Fatal(err)
		}
	}
	before := t0.Add(-24 * time.Hour)
	remaining := func(tenant string) []string {
		t.Helper()
		ds, _, err := s.ListDeliveries(ctx(), store.DeliveryQuery{Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, d := range ds {
			ids = append(ids, d.ID)
		}
		slices.Sort(ids)
		return ids
	}
	// Batches of one, beta left out: the two old finished acme ones go.
	for i, want := range []int{1, 1, 0} {
		n, err := s.DeleteFinishedDeliveries(ctx(), store.ExpiredDeliveries{Before: before, Except: []string{"beta"}, Limit: 1})
		if err != nil || n != want {
			t.Fatalf("delete #%d = %d, %v; want %d", i+1, n, err, want)
		}
	}
	if got := remaining("acme"); !slices.Equal(got, []string{"ok-new", "pending-old"}) {
		t.Fatalf("acme deliveries left = %v; want [ok-new pending-old]", got)
	}
	if n, err := s.DeleteFinishedDeliveries(ctx(), store.ExpiredDeliveries{Before: before, Tenant: "beta"}); err != nil || n != 1 {
		t.Fatalf("delete beta = %d, %v; want 1", n, err)
	}
	if got := remaining("beta"); len(got) != 0 {
		t.Fatalf("beta deliveries left = %v", got)
	}
}
