package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// PreviewStore is a durable store with preview records.
type PreviewStore interface {
	store.Threads
	store.Previews
}

// RunPreviews runs the store.Previews contract against a fresh store from
// newStore: records round-trip, the live limit counts unrevoked unexpired
// previews only, expired ones drop out of listings, revocation sticks, and
// deleting the thread deletes its previews.
func RunPreviews(t *testing.T, newStore func(t *testing.T) PreviewStore) {
	t.Helper()
	s := newStore(t)
	if err := s.CreateThread(ctx(), agent.Thread{ID: "th", Tenant: "acme", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	p := func(i int, expires time.Duration) store.Preview {
		return store.Preview{ID: fmt.Sprintf("pv%d", i), ThreadID: "th", Tenant: "acme", Port: 8000 + i, Created: t0.Add(time.Duration(i) * time.Second), Expires: t0.Add(expires)}
	}
	const limit = 3
	for i := range limit {
		if err := s.AddPreview(ctx(), p(i, time.Hour), limit, t0); err != nil {
			t.Fatalf("add preview %d: %v", i, err)
		}
	}
	if err := s.AddPreview(ctx(), p(9, time.Hour), limit, t0); !errors.Is(err, store.ErrPreviewLimit) {
		t.Fatalf("a preview past the limit: %v, want ErrPreviewLimit", err)
	}
	if err := s.AddPreview(ctx(), store.Preview{ID: "x", ThreadID: "missing", Expires: t0.Add(time.Hour)}, limit, t0); !errors.Is(err, agent.ErrThreadNotFound) {
		t.Fatalf("a preview of a missing thread: %v", err)
	}
	got, err := s.Preview(ctx(), "pv1")
	if want := p(1, time.Hour); err != nil || got != want {
		t.Fatalf("Preview(pv1) = %+v, %v; want %+v", got, err, want)
	}
	if _, err := s.Preview(ctx(), "nope"); !errors.Is(err, store.ErrPreviewNotFound) {
		t.Fatalf("Preview(nope): %v", err)
	}
	if err := s.RevokePreview(ctx(), "pv1"); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokePreview(ctx(), "nope"); !errors.Is(err, store.ErrPreviewNotFound) {
		t.Fatalf("RevokePreview(nope): %v", err)
	}
	if got, _ := s.Preview(ctx(), "pv1"); !got.Revoked || got.Live(t0) {
		t.Fatalf("revoked preview reads %+v", got)
	}
	// The revoked one frees its slot.
	if err := s.AddPreview(ctx(), p(3, 2*time.Hour), limit, t0); err != nil {
		t.Fatalf("add after a revocation: %v", err)
	}
	list, err := s.ListPreviews(ctx(), "th", t0)
	if err != nil || len(list) != 4 || list[0].ID != "pv3" || !list[2].Revoked {
		t.Fatalf("ListPreviews = %+v, %v; want pv3..pv0 newest first, pv1 revoked", list, err)
	}
	// After an hour only pv3 is left; expired records stop counting.
	later := t0.Add(time.Hour)
	if list, err := s.ListPreviews(ctx(), "th", later); err != nil || len(list) != 1 || list[0].ID != "pv3" {
		t.Fatalf("ListPreviews an hour later = %+v, %v; want pv3 only", list, err)
	}
	if err := s.AddPreview(ctx(), p(4, 3*time.Hour), limit, later); err != nil {
		t.Fatalf("add once others expired: %v", err)
	}
	if _, err := s.Preview(ctx(), "pv0"); !errors.Is(err, store.ErrPreviewNotFound) {
		t.Fatalf("an expired record was not dropped on add: %v", err)
	}
	if err := s.DeleteThread(ctx(), "th"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Preview(ctx(), "pv3"); !errors.Is(err, store.ErrPreviewNotFound) {
		t.Fatalf("a deleted thread's preview: %v", err)
	}
}
