package retention_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/plumbhq/plumb/internal/retention"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/postgres"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
)

// sessionStore is what the sessions test needs of a thread store.
type sessionStore interface {
	store.Retention
	store.Sessions
}

// TestExpiredSessions: a pass deletes the browser sessions past their
// expiry, in batches, with no TTL configured (nobody signing in, which
// would drop them too), and leaves the live ones. On SQLite and on a real
// PostgreSQL.
func TestExpiredSessions(t *testing.T) {
	for _, sc := range []struct {
		name string
		open func(t *testing.T) sessionStore
	}{
		{"sqlite", func(t *testing.T) sessionStore { return openStore(t) }},
		{"postgres", func(t *testing.T) sessionStore {
			st, err := postgres.Open(context.Background(), pgtest.New(t), postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			st := sc.open(t)
			ctx := context.Background()
			// Five expired a minute before the pass, two live for an hour
			// after it; all added before any expired (so no add drops one).
			add := func(id string, expires time.Time) {
				t.Helper()
				if err := st.AddSession(ctx, store.Session{IDHash: id, Sealed: []byte("x"), Created: t0.Add(-12 * time.Hour), Expires: expires}, t0.Add(-12*time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 5 {
				add(fmt.Sprintf("old-%d", i), t0.Add(-time.Minute))
			}
			add("live-1", t0.Add(time.Hour))
			add("live-2", t0.Add(time.Hour))

			sw, err := retention.New(retention.Config{Store: st, Sessions: st, Batch: 2,
				Delete: func(context.Context, string, time.Time) error { return nil }},
				retention.WithClock(fixedClock{t0}), retention.WithLogger(zaptest.NewLogger(t)))
			if err != nil {
				t.Fatal(err)
			}
			c, err := sw.Pass(ctx)
			if err != nil || c.Sessions != 5 {
				t.Fatalf("pass: %+v, %v; want 5 sessions deleted", c, err)
			}
			// Gone from the table, not only hidden by their expiry: asked
			// as of before they expired, they are still not found.
			for i := range 5 {
				if _, err := st.Session(ctx, fmt.Sprintf("old-%d", i), t0.Add(-time.Hour)); !errors.Is(err, store.ErrSessionNotFound) {
					t.Errorf("old-%d after the pass: %v", i, err)
				}
			}
			for _, id := range []string{"live-1", "live-2"} {
				if _, err := st.Session(ctx, id, t0); err != nil {
					t.Errorf("%s after the pass: %v", id, err)
				}
			}
			if c, err := sw.Pass(ctx); err != nil || c.Sessions != 0 {
				t.Fatalf("second pass: %+v, %v; want none", c, err)
			}
		})
	}
}

var _ sessionStore = (*sqlite.Store)(nil)
