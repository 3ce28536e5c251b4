package retention_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/plumbhq/plumb/internal/retention"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend/storefs"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agentd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestPassInBatches: a pass goes through every idle thread in batches,
// per tenant scope, counts the ones the deleter keeps without asking for
// them twice, and leaves fresh threads and keep-forever tenants alone.
func TestPassInBatches(t *testing.T) {
	st := openStore(t)
	mk := func(id, tenant string, age time.Duration) {
		at := t0.Add(-age)
		if err := st.CreateThread(context.Background(), agent.Thread{ID: id, Tenant: tenant, CreatedAt: at, UpdatedAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 7 {
		mk(fmt.Sprintf("old-%d", i), "default", 48*time.Hour+time.Duration(i)*time.Minute)
	}
	mk("fresh", "default", time.Minute)
	mk("forever", "keeper", 1000*time.Hour)
	mk("short", "short", 2*time.Hour)

	var mu sync.Mutex
	calls := map[string]int{}
	del := func(ctx context.Context, id string, before time.Time) error {
		mu.Lock()
		calls[id]++
		mu.Unlock()
		if id == "old-3" {
			return fmt.Errorf("it runs: %w", retention.ErrKept)
		}
		return st.DeleteThread(ctx, id)
	}
	sw, err := retention.New(retention.Config{Store: st, Delete: del, Batch: 2, Policy: retention.Policy{
		Default: retention.Rules{ThreadsIdle: 24 * time.Hour},
		Tenants: map[string]retention.Rules{"keeper": {}, "short": {ThreadsIdle: time.Hour}},
	}}, retention.WithClock(fixedClock{t0}), retention.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	c, err := sw.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c.Threads != 7 || c.Skipped != 1 || c.Failed != 0 {
		t.Fatalf("counts %+v; want 7 deleted (6 old, short), 1 skipped", c)
	}
	for id, n := range calls {
		if n != 1 {
			t.Errorf("thread %s handed to the deleter %d times in one pass", id, n)
		}
	}
	for _, tc := range []struct {
		id   string
		kept bool
	}{{"fresh", true}, {"forever", true}, {"old-3", true}, {"short", false}, {"old-0", false}, {"old-6", false}} {
		_, err := st.Thread(context.Background(), tc.id)
		if (err == nil) != tc.kept {
			t.Errorf("thread %s: %v; want kept=%v", tc.id, err, tc.kept)
		}
	}
}

// TestStartStop: the loop runs a pass at once and stops cleanly.
func TestStartStop(t *testing.T) {
	st := openStore(t)
	at := t0.Add(-48 * time.Hour)
	if err := st.CreateThread(context.Background(), agent.Thread{ID: "old", CreatedAt: at, UpdatedAt: at}); err != nil {
		t.Fatal(err)
	}
	deleted := make(chan string, 1)
	sw, err := retention.New(retention.Config{Store: st, Policy: retention.Policy{Default: retention.Rules{ThreadsIdle: time.Hour}},
		Delete: func(ctx context.Context, id string, _ time.Time) error {
			deleted <- id
			return st.DeleteThread(ctx, id)
		},
	}, retention.WithClock(fixedClock{t0}))
	if err != nil {
		t.Fatal(err)
	}
	sw.Start()
	if id := <-deleted; id != "old" {
		t.Fatalf("deleted %s", id)
	}
	sw.Stop()
	sw.Stop()
}

// TestBadConfig: negative TTLs and a missing store or deleter are
// refused.
func TestBadConfig(t *testing.T) {
	st := openStore(t)
	del := func(context.Context, string, time.Time) error { return nil }
	for _, tc := range []struct {
		name string
		cfg  retention.Config
	}{
		{"no store", retention.Config{Delete: del}},
		{"no deleter", retention.Config{Store: st}},
		{"negative ttl", retention.Config{Store: st, Delete: del, Policy: retention.Policy{Tenants: map[string]retention.Rules{"a": {ThreadsIdle: -1}}}}},
		{"negative agent ttl", retention.Config{Store: st, Delete: del, ThreadInfo: func(context.Context, string) (string, time.Time, error) { return "", time.Time{}, nil },
			Policy: retention.Policy{Agents: map[string]time.Duration{"a": -1}}}},
		{"negative agent run_events", retention.Config{Store: st, Delete: del, Policy: retention.Policy{AgentRunEvents: map[string]time.Duration{"a": -1}}}},
		{"negative agent webhook_deliveries", retention.Config{Store: st, Delete: del, Policy: retention.Policy{AgentWebhookDeliveries: map[string]time.Duration{"a": -time.Hour}}}},
		{"agent ttls without thread info", retention.Config{Store: st, Delete: del, Policy: retention.Policy{Agents: map[string]time.Duration{"a": time.Hour}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := retention.New(tc.cfg); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// TestAgentTTLs: an agent's threads_idle overrides its tenant's and the
// default for the threads whose last run was the agent's, shorter (they
// go sooner) or 0 (kept forever); the deleter is told the agent's cutoff.
func TestAgentTTLs(t *testing.T) {
	st := openStore(t)
	agents := map[string]string{}
	mk := func(id, tenant, agentName string, age time.Duration) {
		at := t0.Add(-age)
		if err := st.CreateThread(context.Background(), agent.Thread{ID: id, Tenant: tenant, CreatedAt: at, UpdatedAt: at}); err != nil {
			t.Fatal(err)
		}
		agents[id] = agentName
	}
	mk("quick-old", "default", "quick", 2*time.Hour)    // quick: 1h; default 24h
	mk("quick-fresh", "default", "quick", time.Minute)  // under quick's hour
	mk("main-2h", "default", "main", 2*time.Hour)       // default 24h: kept
	mk("main-48h", "default", "main", 48*time.Hour)     // default: deleted
	mk("keep-48h", "default", "keeper", 48*time.Hour)   // keeper: forever
	mk("quick-keeper", "forever", "quick", 2*time.Hour) // tenant keeps forever, the agent does not
	info := func(ctx context.Context, id string) (string, time.Time, error) {
		th, err := st.Thread(ctx, id)
		return agents[id], th.UpdatedAt, err
	}
	cutoffs := map[string]time.Time{}
	del := func(ctx context.Context, id string, before time.Time) error {
		cutoffs[id] = before
		return st.DeleteThread(ctx, id)
	}
	sw, err := retention.New(retention.Config{Store: st, Delete: del, ThreadInfo: info, Policy: retention.Policy{
		Default: retention.Rules{ThreadsIdle: 24 * time.Hour},
		Tenants: map[string]retention.Rules{"forever": {}},
		Agents:  map[string]time.Duration{"quick": time.Hour, "keeper": 0},
	}}, retention.WithClock(fixedClock{t0}), retention.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	c, err := sw.Pass(context.Background())
	if err != nil || c.Threads != 3 || c.Skipped != 0 || c.Failed != 0 {
		t.Fatalf("pass: %+v, %v; want 3 deleted", c, err)
	}
	want := map[string]time.Time{"quick-old": t0.Add(-time.Hour), "main-48h": t0.Add(-24 * time.Hour), "quick-keeper": t0.Add(-time.Hour)}
	if len(cutoffs) != len(want) {
		t.Fatalf("deleted %v; want %v", cutoffs, want)
	}
	for id, before := range want {
		if !cutoffs[id].Equal(before) {
			t.Errorf("thread %s deleted with cutoff %v; want %v", id, cutoffs[id], before)
		}
	}
}

// TestStoreItems: a pass deletes the store-route files not modified for
// store_items, in batches, and keeps the newer ones.
func TestStoreItems(t *testing.T) {
	st := openStore(t)
	db, err := storefs.Open(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	b, err := storefs.NewBackend(db, []string{"memories"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := b.Write(context.Background(), fmt.Sprintf("/m%d.md", i), []byte("remember")); err != nil {
			t.Fatal(err)
		}
	}
	del := func(context.Context, string, time.Time) error { return nil }
	// A day from now, the files are a day old.
	for _, tc := range []struct {
		ttl  time.Duration
		want int
	}{{48 * time.Hour, 0}, {time.Hour, 5}} {
		sw, err := retention.New(retention.Config{Store: st, Delete: del, Items: db, Batch: 2, Policy: retention.Policy{StoreItems: tc.ttl}},
			retention.WithClock(fixedClock{time.Now().Add(24 * time.Hour)}))
		if err != nil {
			t.Fatal(err)
		}
		c, err := sw.Pass(context.Background())
		if err != nil || c.StoreItems != tc.want {
			t.Fatalf("store_items %v: %+v, %v; want %d deleted", tc.ttl, c, err, tc.want)
		}
	}
}

// queueWorkers deletes queued snapshots as agentd's ThreadBackends does,
// against a worker that refuses the snapshots of fail once.
type queueWorkers struct {
	st      *sqlite.Store
	fail    map[string]bool
	deleted []string
}

func (q *queueWorkers) DeleteQueuedSnapshots(ctx context.Context, limit int) (int, error) {
	list, err := q.st.QueuedSnapshotDeletions(ctx, limit)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, d := range list {
		if q.fail[d.SnapshotID] {
			delete(q.fail, d.SnapshotID)
			errs = append(errs, fmt.Errorf("worker unreachable deleting %s", d.SnapshotID))
			continue
		}
		if err := q.st.SnapshotDeleted(ctx, d.SnapshotID); err != nil {
			return n, err
		}
		q.deleted = append(q.deleted, d.SnapshotID)
		n++
	}
	return n, errors.Join(errs...)
}

// TestQueuedSnapshotsRetried (issue 19 item 5): a deleted thread's
// snapshots are deleted by the next pass; one whose delete fails stays
// queued and is deleted by the pass after.
func TestQueuedSnapshotsRetried(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	if err := st.CreateThread(ctx, agent.Thread{ID: "t1", CreatedAt: t0, UpdatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"snap-1", "snap-2"} {
		if _, err := st.AddThreadSnapshot(ctx, store.ThreadSnapshot{ThreadID: "t1", SnapshotID: id, SandboxID: "sbx-w1-x", CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.DeleteThread(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	q := &queueWorkers{st: st, fail: map[string]bool{"snap-1": true}}
	sw, err := retention.New(retention.Config{Store: st, Delete: func(context.Context, string, time.Time) error { return nil }, Snapshots: q},
		retention.WithClock(fixedClock{t0}), retention.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	c, err := sw.Pass(ctx)
	if err == nil || c.Snapshots != 1 {
		t.Fatalf("first pass: %+v, %v; want snap-2 deleted and snap-1's failure", c, err)
	}
	if c, err = sw.Pass(ctx); err != nil || c.Snapshots != 1 {
		t.Fatalf("second pass: %+v, %v; want snap-1 deleted", c, err)
	}
	if left, err := st.QueuedSnapshotDeletions(ctx, 0); err != nil || len(left) != 0 {
		t.Errorf("queue after two passes: %v, %v", left, err)
	}
	if len(q.deleted) != 2 || q.deleted[0] != "snap-2" || q.deleted[1] != "snap-1" {
		t.Errorf("deleted %v, want [snap-2 snap-1]", q.deleted)
	}
}
