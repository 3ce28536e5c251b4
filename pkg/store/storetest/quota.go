package storetest

import (
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/store"
)

// QuotaStore is a durable store that counts for the per-tenant quotas.
type QuotaStore interface {
	store.Threads
	store.Runs
	store.QuotaCounts
}

// RunQuotaCounts runs the store.QuotaCounts contract against a fresh
// store from newStore: running runs per tenant (another thread's only;
// interrupted, finished and queued runs are not running), runs asked for
// since a time (queued ones by when they were queued), and threads holding
// a sandbox; another tenant's are never counted and an empty tenant is the
// default one.
func RunQuotaCounts(t *testing.T, newStore func(t *testing.T) QuotaStore) {
	t.Helper()
	s := newStore(t)
	for _, th := range []agent.Thread{
		{ID: "ta", Tenant: "acme", CreatedAt: t0}, {ID: "tb", Tenant: "acme", CreatedAt: t0},
		{ID: "tc", Tenant: "acme", CreatedAt: t0}, {ID: "tz", Tenant: "zeta", CreatedAt: t0},
		{ID: "td", CreatedAt: t0},
	} {
		if err := s.CreateThread(ctx(), th); err != nil {
			t.Fatal(err)
		}
	}
	base := map[string]int{}
	commit := func(thread, id string, status agent.RunStatus, at time.Time) {
		t.Helper()
		rec := agent.RunRecord{RunID: id, Status: status, StartedAt: at}
		cp := &agent.Checkpoint{ThreadID: thread, Phase: agent.PhaseInput, Base: base[thread], Run: rec, CreatedAt: at,
			Append: []agent.Message{{Message: model.Message{Role: model.RoleUser, Content: "hi"}}}}
		if err := s.SaveCheckpoint(ctx(), cp); err != nil {
			t.Fatalf("checkpoint of %s: %v", id, err)
		}
		base[thread]++
	}
	commit("ta", "r1", agent.StatusCompleted, t0)
	commit("ta", "r2", agent.StatusRunning, t0.Add(time.Minute))
	commit("tb", "r3", agent.StatusRunning, t0.Add(2*time.Minute))
	commit("tc", "r4", agent.StatusInterrupted, t0.Add(3*time.Minute))
	commit("tz", "r5", agent.StatusRunning, t0.Add(3*time.Minute))
	commit("td", "r6", agent.StatusRunning, t0.Add(3*time.Minute))
	// A run queued behind r3 counts by when it was queued, and is not
	// running.
	if err := s.EnqueueRun(ctx(), "tb", agent.RunRecord{RunID: "q1", Status: agent.StatusQueued, CreatedAt: t0.Add(4 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	// The first checkpoint of a run keeps when it was asked for.
	commit("ta", "r2", agent.StatusCompleted, t0.Add(10*time.Minute))

	running := []struct {
		tenant, except string
		want           int
	}{
		{"acme", "", 1}, {"acme", "tb", 0}, {"acme", "ta", 1}, {"zeta", "", 1}, {"", "", 1}, {"default", "", 1}, {"nobody", "", 0},
	}
	for _, c := range running {
		if n, err := s.RunningRuns(ctx(), c.tenant, c.except); err != nil || n != c.want {
			t.Errorf("RunningRuns(%q, except %q) = %d, %v; want %d", c.tenant, c.except, n, err, c.want)
		}
	}
	since := []struct {
		tenant string
		since  time.Time
		want   int
	}{
		{"acme", t0, 5}, {"acme", t0.Add(time.Minute), 4}, {"acme", t0.Add(90 * time.Second), 3},
		{"acme", t0.Add(4 * time.Minute), 1}, {"acme", t0.Add(5 * time.Minute), 0}, {"zeta", t0, 1}, {"", t0, 1},
	}
	for _, c := range since {
		if n, err := s.RunsSince(ctx(), c.tenant, c.since); err != nil || n != c.want {
			t.Errorf("RunsSince(%q, %v) = %d, %v; want %d", c.tenant, c.since.Sub(t0), n, err, c.want)
		}
	}

	for _, id := range []string{"ta", "tb", "tz"} {
		if err := s.SetSandbox(ctx(), id, "sbx-w-"+id); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetSandbox(ctx(), "tb", ""); err != nil {
		t.Fatal(err)
	}
	boxes := []struct {
		tenant, except string
		want           int
	}{
		{"acme", "", 1}, {"acme", "ta", 0}, {"acme", "tb", 1}, {"zeta", "", 1}, {"", "", 0},
	}
	for _, c := range boxes {
		if n, err := s.LiveSandboxes(ctx(), c.tenant, c.except); err != nil || n != c.want {
			t.Errorf("LiveSandboxes(%q, except %q) = %d, %v; want %d", c.tenant, c.except, n, err, c.want)
		}
	}
}
