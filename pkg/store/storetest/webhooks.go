package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/store"
)

// RunWebhooks runs the store.Webhooks contract against a fresh store from
// newStore: signing keys rotate with a grace period and stay per tenant;
// a delivery is recorded once per id; claims take due deliveries only,
// never the same one twice at once (also under concurrent claimers), and
// an expired claim makes a delivery due again; a result needs the claim;
// listings are per tenant, filtered and paged.
func RunWebhooks(t *testing.T, newStore func(t *testing.T) store.Webhooks) {
	t.Helper()
	t.Run("Keys", func(t *testing.T) { webhookKeys(t, newStore(t)) })
	t.Run("Deliveries", func(t *testing.T) { webhookDeliveries(t, newStore(t)) })
	t.Run("ConcurrentClaims", func(t *testing.T) { webhookConcurrentClaims(t, newStore(t)) })
	t.Run("List", func(t *testing.T) { webhookList(t, newStore(t)) })
}

func webhookKeys(t *testing.T, s store.Webhooks) {
	if keys, err := s.WebhookKeys(ctx(), "acme", t0); err != nil || len(keys) != 0 {
		t.Fatalf("keys of a tenant without any = %v, %v", keys, err)
	}
	k1 := store.WebhookKey{Tenant: "acme", ID: "k1", Sealed: []byte("sealed-1"), Created: t0}
	if err := s.RotateWebhookKey(ctx(), k1, t0); err != nil {
		t.Fatal(err)
	}
	if keys, err := s.WebhookKeys(ctx(), "acme", t0); err != nil || len(keys) != 1 || keys[0].ID != "k1" || string(keys[0].Sealed) != "sealed-1" || !keys[0].Expires.IsZero() || !keys[0].Created.Equal(t0) {
		t.Fatalf("keys after the first rotation = %+v, %v", keys, err)
	}
	if keys, _ := s.WebhookKeys(ctx(), "other", t0); len(keys) != 0 {
		t.Fatalf("another tenant sees keys %+v", keys)
	}
	// The second rotation keeps k1 for an hour.
	t1 := t0.Add(time.Minute)
	if err := s.RotateWebhookKey(ctx(), store.WebhookKey{Tenant: "acme", ID: "k2", Sealed: []byte("sealed-2"), Created: t1}, t1.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	keys, err := s.WebhookKeys(ctx(), "acme", t1)
	if err != nil || len(keys) != 2 || keys[0].ID != "k2" || keys[1].ID != "k1" || !keys[1].Expires.Equal(t1.Add(time.Hour)) || !keys[0].Expires.IsZero() {
		t.Fatalf("keys during the grace = %+v, %v; want k2 (current), k1 (expiring)", keys, err)
	}
	if !keys[1].Live(t1) || keys[1].Live(t1.Add(time.Hour)) {
		t.Fatalf("k1 liveness wrong: %+v", keys[1])
	}
	if keys, _ := s.WebhookKeys(ctx(), "acme", t1.Add(2*time.Hour)); len(keys) != 1 || keys[0].ID != "k2" {
		t.Fatalf("keys after the grace = %+v; want k2 only", keys)
	}
	// A third rotation after the grace drops k1 and retires k2.
	t2 := t1.Add(2 * time.Hour)
	if err := s.RotateWebhookKey(ctx(), store.WebhookKey{Tenant: "acme", ID: "k3", Sealed: []byte("sealed-3"), Created: t2}, t2); err != nil {
		t.Fatal(err)
	}
	if keys, _ := s.WebhookKeys(ctx(), "acme", t2); len(keys) != 1 || keys[0].ID != "k3" {
		t.Fatalf("keys after a rotation without grace = %+v; want k3 only", keys)
	}
}

func delivery(id, tenant, thread, run string, created time.Time) store.Delivery {
	return store.Delivery{ID: id, Tenant: tenant, ThreadID: thread, RunID: run, Event: "run.succeeded", URL: "https://hooks.example.com/" + id,
		Payload: []byte(`{"id":"` + id + `"}`), NextAttempt: created, GiveUp: created.Add(24 * time.Hour), Created: created}
}

func webhookDeliveries(t *testing.T, s store.Webhooks) {
	d1 := delivery("d1", "acme", "th1", "run1", t0)
	for i, want := range []bool{true, false} {
		created, err := s.EnqueueDelivery(ctx(), d1)
		if err != nil || created != want {
			t.Fatalf("enqueue #%d = %v, %v; want created=%v", i+1, created, err, want)
		}
	}
	later := delivery("d2", "acme", "th1", "run2", t0)
	later.NextAttempt = t0.Add(time.Minute)
	if _, err := s.EnqueueDelivery(ctx(), later); err != nil {
		t.Fatal(err)
	}
	got, err := s.ClaimDeliveries(ctx(), "replica-a", t0, 30*time.Second, 10)
	if err != nil || len(got) != 1 || got[0].ID != "d1" {
		t.Fatalf("claim at t0 = %+v, %v; want d1 only (d2 is not due)", got, err)
	}
	c := got[0]
	if c.Status != store.DeliveryDelivering || c.Attempts != 1 || c.ClaimHolder != "replica-a" || !c.ClaimExpires.Equal(t0.Add(30*time.Second)) ||
		string(c.Payload) != `{"id":"d1"}` || c.URL != d1.URL || c.Tenant != "acme" || c.ThreadID != "th1" || c.RunID != "run1" || !c.GiveUp.Equal(d1.GiveUp) {
		t.Fatalf("claimed delivery = %+v", c)
	}
	if got, _ := s.ClaimDeliveries(ctx(), "replica-b", t0.Add(10*time.Second), 30*time.Second, 10); len(got) != 0 {
		t.Fatalf("claimed again while the claim holds: %+v", got)
	}
	// replica-a dies mid-send; its claim expires and replica-b claims it.
	got, err = s.ClaimDeliveries(ctx(), "replica-b", t0.Add(31*time.Second), 30*time.Second, 1)
	if err != nil || len(got) != 1 || got[0].ID != "d1" || got[0].Attempts != 2 || got[0].ClaimHolder != "replica-b" {
		t.Fatalf("claim after expiry = %+v, %v; want d1 on its second attempt", got, err)
	}
	if err := s.FinishAttempt(ctx(), store.AttemptResult{ID: "d1", Holder: "replica-a", Status: store.DeliverySucceeded, StatusCode: 200, Finished: t0}); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("finish by the old holder: %v; want ErrClaimLost", err)
	}
	retry := t0.Add(2 * time.Minute)
	if err := s.FinishAttempt(ctx(), store.AttemptResult{ID: "d1", Holder: "replica-b", Status: store.DeliveryPending, StatusCode: 500, Error: "HTTP 500", NextAttempt: retry}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ClaimDeliveries(ctx(), "replica-b", t0.Add(time.Minute+time.Second), time.Minute, 10); len(got) != 1 || got[0].ID != "d2" {
		t.Fatalf("claim at t0+1m = %+v; want d2 only (d1 retries at t0+2m)", got)
	}
	got, err = s.ClaimDeliveries(ctx(), "replica-b", retry, time.Minute, 10)
	if err != nil || len(got) != 1 || got[0].ID != "d1" || got[0].Attempts != 3 || got[0].LastStatusCode != 500 || got[0].LastError != "HTTP 500" {
		t.Fatalf("claim of the retry = %+v, %v", got, err)
	}
	fin := retry.Add(time.Second)
	if err := s.FinishAttempt(ctx(), store.AttemptResult{ID: "d1", Holder: "replica-b", Status: store.DeliverySucceeded, StatusCode: 204, Finished: fin}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishAttempt(ctx(), store.AttemptResult{ID: "d1", Holder: "replica-b", Status: store.DeliveryFailed, Finished: fin}); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("a second result for a finished delivery: %v; want ErrClaimLost", err)
	}
	if got, _ := s.ClaimDeliveries(ctx(), "replica-b", fin.Add(time.Hour), time.Minute, 10); len(got) != 1 || got[0].ID != "d2" {
		t.Fatalf("claims after d1 succeeded = %+v; want d2 only (its claim expired)", got)
	}
	list, _, err := s.ListDeliveries(ctx(), store.DeliveryQuery{Tenant: "acme", RunID: "run1"})
	if err != nil || len(list) != 1 {
		t.Fatalf("list run1 = %+v, %v", list, err)
	}
	if d := list[0]; d.Status != store.DeliverySucceeded || d.Attempts != 3 || d.LastStatusCode != 204 || d.LastError != "" || !d.Finished.Equal(fin) || d.ClaimHolder != "" {
		t.Fatalf("succeeded delivery reads %+v", d)
	}
}

// webhookConcurrentClaims: claimers racing for the same due deliveries
// each get different ones, and together all of them.
func webhookConcurrentClaims(t *testing.T, s store.Webhooks) {
	const n = 40
	for i := range n {
		if _, err := s.EnqueueDelivery(ctx(), delivery(fmt.Sprintf("c%02d", i), "acme", "th", "run", t0)); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu     sync.Mutex
		seen   = map[string]string{}
		wg     sync.WaitGroup
		errs   []error
		holder = func(i int) string { return fmt.Sprintf("replica-%d", i) }
	)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := s.ClaimDeliveries(ctx(), holder(i), t0, time.Hour, 3)
				if errors.Is(err, store.ErrBusy) {
					continue
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, d := range got {
					if prev, ok := seen[d.ID]; ok {
						errs = append(errs, fmt.Errorf("%s claimed by %s and %s", d.ID, prev, holder(i)))
					}
					seen[d.ID] = holder(i)
				}
				mu.Unlock()
				if err != nil || len(got) == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 || len(seen) != n {
		t.Fatalf("concurrent claims: %v; claimed %d of %d", errs, len(seen), n)
	}
}

func webhookList(t *testing.T, s store.Webhooks) {
	for i := range 5 {
		d := delivery(fmt.Sprintf("l%d", i), "acme", "th-a", fmt.Sprintf("run-%d", i%2), t0.Add(time.Duration(i)*time.Second))
		if _, err := s.EnqueueDelivery(ctx(), d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.EnqueueDelivery(ctx(), delivery("x1", "other", "th-x", "run-x", t0)); err != nil {
		t.Fatal(err)
	}
	var ids []string
	tok := ""
	for page := 0; ; page++ {
		list, next, err := s.ListDeliveries(ctx(), store.DeliveryQuery{Tenant: "acme", PageSize: 2, PageToken: tok})
		if err != nil || page > 3 {
			t.Fatalf("page %d: %v", page, err)
		}
		for _, d := range list {
			ids = append(ids, d.ID)
		}
		if next == "" {
			break
		}
		tok = next
	}
	if fmt.Sprint(ids) != "[l4 l3 l2 l1 l0]" {
		t.Fatalf("pages = %v; want l4..l0, acme's only", ids)
	}
	if list, _, err := s.ListDeliveries(ctx(), store.DeliveryQuery{Tenant: "acme", RunID: "run-1"}); err != nil || len(list) != 2 || list[0].ID != "l3" {
		t.Fatalf("run-1's = %+v, %v", list, err)
	}
	if list, _, _ := s.ListDeliveries(ctx(), store.DeliveryQuery{Tenant: "acme", ThreadID: "th-x"}); len(list) != 0 {
		t.Fatalf("another tenant's thread listed: %+v", list)
	}
	if list, _, _ := s.ListDeliveries(ctx(), store.DeliveryQuery{Tenant: "acme", Status: store.DeliverySucceeded}); len(list) != 0 {
		t.Fatalf("succeeded = %+v; want none", list)
	}
	if list, _, _ := s.ListDeliveries(ctx(), store.DeliveryQuery{Tenant: "acme", Status: store.DeliveryPending}); len(list) != 5 {
		t.Fatalf("pending = %d; want 5", len(list))
	}
	if _, _, err := s.ListDeliveries(ctx(), store.DeliveryQuery{Tenant: "acme", PageToken: "bogus!"}); !errors.Is(err, store.ErrBadPageToken) {
		t.Fatalf("bad token: %v", err)
	}
}
