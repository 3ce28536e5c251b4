package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/store"
)

// RunStore is a durable store with run records as resources.
type RunStore interface {
	store.Threads
	store.Runs
}

// RunRuns runs the store.Runs contract against a fresh store from
// newStore: run records written by checkpoints read back by id with their
// thread and tenant; listings by thread, tenant and status page newest
// first; queued runs keep their order, never count as a thread's last run,
// turn RUNNING in place when their first checkpoint commits, and end
// without starting only while queued.
func RunRuns(t *testing.T, newStore func(t *testing.T) RunStore) {
	t.Helper()
	s := newStore(t)
	for _, th := range []agent.Thread{{ID: "ta", Tenant: "acme", CreatedAt: t0}, {ID: "tb", Tenant: "acme", CreatedAt: t0}, {ID: "tz", Tenant: "zeta", CreatedAt: t0}} {
		if err := s.CreateThread(ctx(), th); err != nil {
			t.Fatal(err)
		}
	}
	// base tracks each thread's log length for the checkpoints below.
	base := map[string]int{}
	commit := func(thread string, rec agent.RunRecord) {
		t.Helper()
		cp := &agent.Checkpoint{ThreadID: thread, Phase: agent.PhaseFinal, Base: base[thread], Run: rec, CreatedAt: t0,
			Append: []agent.Message{{Message: model.Message{Role: model.RoleUser, Content: "hi"}}}}
		if err := s.SaveCheckpoint(ctx(), cp); err != nil {
			t.Fatalf("checkpoint of %s: %v", rec.RunID, err)
		}
		base[thread]++
	}
	done := func(id string, i int) agent.RunRecord {
		return agent.RunRecord{
			RunID: id, Status: agent.StatusCompleted, Input: []string{"q" + id}, Holder: "replica-1",
			Usage:     model.Usage{Prompt: 10, Completion: 5, Total: 15},
			CreatedAt: t0.Add(time.Duration(i) * time.Second), StartedAt: t0.Add(time.Duration(i) * time.Second),
			FinishedAt: t0.Add(time.Duration(i)*time.Second + time.Millisecond),
		}
	}
	commit("ta", done("r1", 1))
	commit("tb", done("r2", 2))
	failed := done("r3", 3)
	failed.Status, failed.Error = agent.StatusFailed, &agent.RunError{Code: agent.CodeInternal, Message: "boom"}
	commit("ta", failed)
	commit("tz", done("r4", 4))

	got, err := s.GetRun(ctx(), "r3")
	if err != nil || got.ThreadID != "ta" || got.Tenant != "acme" || got.Record.Status != agent.StatusFailed ||
		got.Record.Error == nil || got.Record.Error.Message != "boom" || !slices.Equal(got.Record.Input, []string{"qr3"}) ||
		got.Record.Holder != "replica-1" || got.Record.Usage.Total != 15 || !got.Record.CreatedAt.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("GetRun(r3) = %+v, %v", got, err)
	}
	if _, err := s.GetRun(ctx(), "nope"); !errors.Is(err, store.ErrRunNotFound) {
		t.Fatalf("GetRun(nope): %v, want ErrRunNotFound", err)
	}

	ids := func(q store.RunQuery) []string {
		t.Helper()
		var out []string
		for {
			page, next, err := s.ListRuns(ctx(), q)
			if err != nil {
				t.Fatalf("ListRuns(%+v): %v", q, err)
			}
			for _, r := range page {
				out = append(out, r.Record.RunID)
			}
			if next == "" {
				return out
			}
			q.PageToken = next
		}
	}
	for _, c := range []struct {
		name string
		q    store.RunQuery
		want []string
	}{
		{"all", store.RunQuery{}, []string{"r4", "r3", "r2", "r1"}},
		{"paged by one", store.RunQuery{PageSize: 1}, []string{"r4", "r3", "r2", "r1"}},
		{"tenant", store.RunQuery{Tenant: "acme", PageSize: 2}, []string{"r3", "r2", "r1"}},
		{"thread", store.RunQuery{ThreadID: "ta"}, []string{"r3", "r1"}},
		{"status", store.RunQuery{Tenant: "acme", Status: agent.StatusCompleted}, []string{"r2", "r1"}},
		{"other tenant's thread", store.RunQuery{Tenant: "zeta", ThreadID: "ta"}, nil},
	} {
		if got := ids(c.q); !slices.Equal(got, c.want) {
			t.Errorf("%s: ListRuns = %v, want %v", c.name, got, c.want)
		}
	}
	if _, _, err := s.ListRuns(ctx(), store.RunQuery{PageToken: "bogus"}); !errors.Is(err, store.ErrBadPageToken) {
		t.Fatalf("a bad page token: %v", err)
	}

	// The queue: a running run, then two queued ones behind it.
	running := done("r5", 5)
	running.Status, running.FinishedAt = agent.StatusRunning, time.Time{}
	commit("ta", running)
	for i, id := range []string{"q1", "q2"} {
		rec := agent.RunRecord{RunID: id, Input: []string{"later " + id}, CreatedAt: t0.Add(time.Duration(10+i) * time.Second)}
		if err := s.EnqueueRun(ctx(), "ta", rec); err != nil {
			t.Fatalf("enqueue %s: %v", id, err)
		}
	}
	if err := s.EnqueueRun(ctx(), "ta", agent.RunRecord{RunID: "q1"}); !errors.Is(err, agent.ErrConflict) {
		t.Fatalf("enqueue an existing run id: %v, want ErrConflict", err)
	}
	if err := s.EnqueueRun(ctx(), "missing", agent.RunRecord{RunID: "qx"}); !errors.Is(err, agent.ErrThreadNotFound) {
		t.Fatalf("enqueue on a missing thread: %v, want ErrThreadNotFound", err)
	}
	td, err := s.LoadThread(ctx(), "ta")
	if err != nil || td.LastRun == nil || td.LastRun.RunID != "r5" {
		t.Fatalf("the last run with runs queued = %+v, %v; want r5", td.LastRun, err)
	}
	if got := ids(store.RunQuery{ThreadID: "ta", Status: agent.StatusQueued}); !slices.Equal(got, []string{"q2", "q1"}) {
		t.Fatalf("queued runs = %v, want q2 q1", got)
	}
	if th, err := s.QueuedThreads(ctx(), 10); err != nil || !slices.Equal(th, []string{"ta"}) {
		t.Fatalf("QueuedThreads = %v, %v; want ta", th, err)
	}
	next, err := s.NextQueuedRun(ctx(), "ta")
	if err != nil || next == nil || next.Record.RunID != "q1" || next.Record.Status != agent.StatusQueued ||
		!slices.Equal(next.Record.Input, []string{"later q1"}) {
		t.Fatalf("NextQueuedRun = %+v, %v; want q1", next, err)
	}
	if next, err := s.NextQueuedRun(ctx(), "tb"); err != nil || next != nil {
		t.Fatalf("NextQueuedRun of a thread without a queue = %+v, %v", next, err)
	}
	// r5 ends; q1 starts under its own id: its first checkpoint turns it
	// RUNNING in place, and it becomes the thread's last run.
	commit("ta", done("r5", 5))
	started := done("q1", 10)
	started.Status, started.FinishedAt = agent.StatusRunning, time.Time{}
	commit("ta", started)
	td, err = s.LoadThread(ctx(), "ta")
	if err != nil || td.LastRun == nil || td.LastRun.RunID != "q1" || td.LastRun.Status != agent.StatusRunning {
		t.Fatalf("the last run once q1 started = %+v, %v", td.LastRun, err)
	}
	if got := ids(store.RunQuery{ThreadID: "ta"}); !slices.Equal(got, []string{"q2", "q1", "r5", "r3", "r1"}) {
		t.Fatalf("the thread's runs = %v; a started run keeps its place", got)
	}
	if err := s.EndQueuedRun(ctx(), "q1", agent.StatusCancelled, nil, t0); !errors.Is(err, store.ErrNotQueued) {
		t.Fatalf("EndQueuedRun of a started run: %v, want ErrNotQueued", err)
	}
	if err := s.EndQueuedRun(ctx(), "nope", agent.StatusCancelled, nil, t0); !errors.Is(err, store.ErrRunNotFound) {
		t.Fatalf("EndQueuedRun of a missing run: %v, want ErrRunNotFound", err)
	}
	rerr := &agent.RunError{Code: agent.CodeInternal, Message: "thread deleted"}
	if err := s.EndQueuedRun(ctx(), "q2", agent.StatusCancelled, rerr, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetRun(ctx(), "q2")
	if err != nil || got.Record.Status != agent.StatusCancelled || got.Record.Error == nil || !got.Record.FinishedAt.Equal(t0.Add(time.Minute)) ||
		!slices.Equal(got.Record.Input, []string{"later q2"}) {
		t.Fatalf("q2 after EndQueuedRun = %+v, %v", got, err)
	}
	if th, err := s.QueuedThreads(ctx(), 10); err != nil || len(th) != 0 {
		t.Fatalf("QueuedThreads with none left = %v, %v", th, err)
	}
	// Deleting the thread deletes its runs.
	if err := s.DeleteThread(ctx(), "ta"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRun(ctx(), "r1"); !errors.Is(err, store.ErrRunNotFound) {
		t.Fatalf("a deleted thread's run: %v", err)
	}
}
