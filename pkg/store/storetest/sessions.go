package storetest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/store"
)

// RunSessions runs the store.Sessions contract against a fresh store from
// newStore: a session round-trips until it expires, a deleted one is gone
// (and deleting again is fine), adding a session drops the expired ones,
// and DeleteExpiredSessions removes the expired ones in batches.
func RunSessions(t *testing.T, newStore func(t *testing.T) store.Sessions) {
	t.Helper()
	s := newStore(t)
	se := func(id string, expires time.Duration) store.Session {
		return store.Session{IDHash: id, Sealed: []byte("sealed-" + id), Created: t0, Expires: t0.Add(expires)}
	}
	for _, x := range []store.Session{se("a", time.Hour), se("b", time.Minute), se("c", time.Hour)} {
		if err := s.AddSession(ctx(), x, t0); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Session(ctx(), "a", t0)
	if want := se("a", time.Hour); err != nil || got.IDHash != want.IDHash || !bytes.Equal(got.Sealed, want.Sealed) || !got.Created.Equal(want.Created) || !got.Expires.Equal(want.Expires) {
		t.Fatalf("Session(a) = %+v, %v; want %+v", got, err, want)
	}
	if _, err := s.Session(ctx(), "nope", t0); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("Session(nope): %v", err)
	}
	// Expired at its expiry.
	if _, err := s.Session(ctx(), "b", t0.Add(time.Minute)); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("an expired session: %v", err)
	}
	if err := s.DeleteSession(ctx(), "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx(), "a", t0); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("a deleted session: %v", err)
	}
	if err := s.DeleteSession(ctx(), "a"); err != nil {
		t.Fatalf("deleting again: %v", err)
	}
	// A session added later drops b (expired then), keeps c; the same id
	// hash cannot be added twice.
	if err := s.AddSession(ctx(), se("d", time.Hour), t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx(), "b", t0); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("an expired session survived an add: %v", err)
	}
	if _, err := s.Session(ctx(), "c", t0.Add(2*time.Minute)); err != nil {
		t.Fatalf("a live session: %v", err)
	}
	if err := s.AddSession(ctx(), se("c", time.Hour), t0); err == nil {
		t.Fatal("a second session with the same id hash")
	}

	// The sweep: c and d (live until t0+1h and t0+2m+1h) and three that
	// expire at t0+10m; at t0+30m a batch of 2, then the last one, then
	// none; c and d stay.
	for _, id := range []string{"e1", "e2", "e3"} {
		if err := s.AddSession(ctx(), se(id, 10*time.Minute), t0.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	at := t0.Add(30 * time.Minute)
	for i, want := range []int{2, 1, 0} {
		if n, err := s.DeleteExpiredSessions(ctx(), at, 2); err != nil || n != want {
			t.Fatalf("sweep %d: %d, %v; want %d", i, n, err, want)
		}
	}
	for _, id := range []string{"e1", "e2", "e3"} {
		if _, err := s.Session(ctx(), id, t0); !errors.Is(err, store.ErrSessionNotFound) {
			t.Fatalf("swept session %s: %v", id, err)
		}
	}
	for _, id := range []string{"c", "d"} {
		if _, err := s.Session(ctx(), id, at); err != nil {
			t.Fatalf("live session %s after the sweep: %v", id, err)
		}
	}
}
