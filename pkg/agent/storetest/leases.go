package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// LeaseStore is a durable store with leases.
type LeaseStore interface {
	store.Threads
	store.Leases
}

// RunLeases runs the store.Leases contract against a fresh store from
// newStore: one live holder at a time, renewal and release by the holder
// only, a new epoch for every new claim, expiry without release listed
// for takeover, and concurrent acquisitions of which exactly one wins.
func RunLeases(t *testing.T, newStore func(t *testing.T) LeaseStore) {
	t.Helper()
	const ttl = 15 * time.Second
	thread := func(t *testing.T, s LeaseStore, id string) {
		t.Helper()
		if err := s.CreateThread(ctx(), agent.Thread{ID: id, CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("OneHolder", func(t *testing.T) {
		s := newStore(t)
		thread(t, s, "th")
		a, err := s.AcquireLease(ctx(), "th", "replica-a", t0, ttl)
		if err != nil || a.Epoch != 1 || a.Holder != "replica-a" || !a.Expires.Equal(t0.Add(ttl)) {
			t.Fatalf("first acquire: %+v, %v", a, err)
		}
		var held *store.HeldError
		if _, err := s.AcquireLease(ctx(), "th", "replica-b", t0.Add(ttl/2), ttl); !errors.As(err, &held) || held.Lease.Holder != "replica-a" {
			t.Fatalf("acquire of a live lease by another holder: %v, want HeldError naming replica-a", err)
		}
		again, err := s.AcquireLease(ctx(), "th", "replica-a", t0.Add(ttl/2), ttl)
		if err != nil || again.Epoch != a.Epoch || !again.Expires.Equal(t0.Add(ttl/2+ttl)) {
			t.Fatalf("re-acquire by the holder: %+v, %v (want the same epoch, extended)", again, err)
		}
		if _, err := s.AcquireLease(ctx(), "missing", "replica-a", t0, ttl); !errors.Is(err, agent.ErrThreadNotFound) {
			t.Fatalf("lease of a missing thread: %v", err)
		}
	})

	t.Run("RenewAndRelease", func(t *testing.T) {
		s := newStore(t)
		thread(t, s, "th")
		a, err := s.AcquireLease(ctx(), "th", "replica-a", t0, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if a, err = s.RenewLease(ctx(), a, t0.Add(10*time.Second), ttl); err != nil || !a.Expires.Equal(t0.Add(25*time.Second)) {
			t.Fatalf("renew: %+v, %v", a, err)
		}
		if err := s.ReleaseLease(ctx(), a); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RenewLease(ctx(), a, t0.Add(11*time.Second), ttl); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("renew after release: %v, want ErrLeaseLost", err)
		}
		b, err := s.AcquireLease(ctx(), "th", "replica-b", t0.Add(12*time.Second), ttl)
		if err != nil || b.Epoch != a.Epoch+1 {
			t.Fatalf("acquire after release: %+v, %v (want epoch %d)", b, err, a.Epoch+1)
		}
		if err := s.ReleaseLease(ctx(), a); err != nil {
			t.Fatalf("release of a superseded lease: %v", err)
		}
		if _, err := s.RenewLease(ctx(), b, t0.Add(13*time.Second), ttl); err != nil {
			t.Fatalf("b's lease after a's late release: %v", err)
		}
	})

	t.Run("ExpiryAndTakeover", func(t *testing.T) {
		s := newStore(t)
		thread(t, s, "dead")
		thread(t, s, "alive")
		thread(t, s, "done")
		dead, err := s.AcquireLease(ctx(), "dead", "replica-a", t0, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireLease(ctx(), "alive", "replica-b", t0.Add(10*time.Second), ttl); err != nil {
			t.Fatal(err)
		}
		done, err := s.AcquireLease(ctx(), "done", "replica-a", t0, ttl)
		if err != nil || s.ReleaseLease(ctx(), done) != nil {
			t.Fatalf("done: %v", err)
		}
		at := t0.Add(ttl + time.Second)
		expired, err := s.ExpiredLeases(ctx(), at)
		if err != nil || len(expired) != 1 || expired[0].ThreadID != "dead" || expired[0].Holder != "replica-a" || expired[0].Epoch != dead.Epoch {
			t.Fatalf("expired leases: %+v, %v; want only dead's", expired, err)
		}
		if _, err := s.RenewLease(ctx(), dead, at, ttl); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("renew of an expired lease: %v, want ErrLeaseLost", err)
		}
		taken, err := s.AcquireLease(ctx(), "dead", "replica-b", at, ttl)
		if err != nil || taken.Epoch != dead.Epoch+1 {
			t.Fatalf("takeover: %+v, %v", taken, err)
		}
		if expired, err := s.ExpiredLeases(ctx(), at); err != nil || len(expired) != 0 {
			t.Fatalf("expired after takeover: %+v, %v", expired, err)
		}
	})

	t.Run("ConcurrentAcquire", func(t *testing.T) {
		s := newStore(t)
		thread(t, s, "th")
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = s.AcquireLease(ctx(), "th", "replica-"+string(rune('a'+i)), t0, ttl)
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			var held *store.HeldError
			switch {
			case err == nil:
				won++
			case errors.As(err, &held), errors.Is(err, store.ErrBusy):
			default:
				t.Errorf("acquire: %v", err)
			}
		}
		if won != 1 {
			t.Fatalf("%d replicas acquired the lease at once, want 1 (%v)", won, errs)
		}
	})
}
