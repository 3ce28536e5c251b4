package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/store"
)

// AgentRetentionStore is what RunAgentRetention needs of a store.
type AgentRetentionStore interface {
	store.Threads
	store.Webhooks
	store.Retention
	store.LeaseStore
}

// RunAgentRetention runs the per-agent part of retention
// (agents.<name>.retention) against a fresh store from newStore, which
// keeps keep checkpoint records per thread and agents' own counts for the
// threads whose checkpoint a run of the agent wrote:
//   - a checkpoint keeps the latest N records of its run's agent (shorter
//     or longer than the default), "" being a run that named no agent;
//   - finished deliveries are selected by their agent (Agents,
//     ExceptAgents), with the tenant filters;
//   - a thread's run event log is selected by its newest run's agent.
func RunAgentRetention(t *testing.T, newStore func(t *testing.T, keep int, agents map[string]int) AgentRetentionStore) {
	t.Helper()
	t.Run("CheckpointsKept", func(t *testing.T) { agentCheckpoints(t, newStore(t, 3, map[string]int{"short": 1, "long": 5})) })
	t.Run("DeliveriesByAgent", func(t *testing.T) { agentDeliveries(t, newStore(t, 0, nil)) })
	t.Run("RunEventsByAgent", func(t *testing.T) { agentRunEvents(t, newStore(t, 0, nil)) })
}

func agentCheckpoints(t *testing.T, s AgentRetentionStore) {
	for _, tc := range []struct {
		thread, agent string
		want          int
	}{
		{"th-default", "", 3},
		{"th-other", "other", 3},
		{"th-short", "short", 1},
		{"th-long", "long", 5},
	} {
		t.Run(tc.thread, func(t *testing.T) {
			mustCreate(t, s, tc.thread)
			rec := agent.RunRecord{RunID: "r-" + tc.thread, Status: agent.StatusRunning, StartedAt: t0, Spec: agent.RunSpec{Agent: tc.agent}}
			for i := range 7 {
				save(t, s, agent.Checkpoint{ThreadID: tc.thread, Phase: agent.PhaseTools, Step: i, Base: i,
					Append: []agent.Message{msg(model.RoleUser, fmt.Sprint(i))}, Run: rec, CreatedAt: t0})
			}
			d := mustLoad(t, s, tc.thread)
			var steps []int
			for _, c := range d.Checkpoints {
				steps = append(steps, c.Step)
			}
			want := []int{}
			for i := 7 - tc.want; i < 7; i++ {
				want = append(want, i)
			}
			if fmt.Sprint(steps) != fmt.Sprint(want) || len(d.Messages) != 7 {
				t.Fatalf("agent %q: kept checkpoints of steps %v and %d messages; want %v and 7", tc.agent, steps, len(d.Messages), want)
			}
		})
	}
	// The next run's agent decides: a short-lived agent's checkpoint on a
	// long-lived agent's thread prunes it to its own count.
	rec := agent.RunRecord{RunID: "r-next", Status: agent.StatusRunning, StartedAt: t0, Spec: agent.RunSpec{Agent: "short"}}
	save(t, s, agent.Checkpoint{ThreadID: "th-long", Phase: agent.PhaseInput, Step: 0, Base: 7, Run: rec, CreatedAt: t0})
	if d := mustLoad(t, s, "th-long"); len(d.Checkpoints) != 1 {
		t.Fatalf("after a run of agent short: %d checkpoints; want 1", len(d.Checkpoints))
	}
}

func agentDeliveries(t *testing.T, s AgentRetentionStore) {
	for _, d := range []struct{ id, tenant, agent string }{
		{"main-acme", "acme", "main"},
		{"main-beta", "beta", "main"},
		{"quick-acme", "acme", "quick"},
		{"keep-acme", "acme", "keeper"},
		{"none-acme", "acme", ""},
	} {
		at := t0.Add(-100 * time.Hour)
		dl := delivery(d.id, d.tenant, "th", "run-"+d.id, at)
		dl.Agent = d.agent
		if _, err := s.EnqueueDelivery(ctx(), dl); err != nil {
			t.Fatal(err)
		}
		claimed, err := s.ClaimDeliveries(ctx(), "h", at, time.Minute, 1)
		if err != nil || len(claimed) != 1 || claimed[0].ID != d.id || claimed[0].Agent != d.agent {
			t.Fatalf("claim %s = %+v, %v; want it, with agent %q", d.id, claimed, err, d.agent)
		}
		if err := s.FinishAttempt(ctx(), store.AttemptResult{ID: d.id, Holder: "h", Status: store.DeliverySucceeded, StatusCode: 200, Finished: at}); err != nil {
			t.Fatal(err)
		}
	}
	left := func() []string {
		t.Helper()
		var ids []string
		for _, tenant := range []string{"acme", "beta"} {
			ds, _, err := s.ListDeliveries(ctx(), store.DeliveryQuery{Tenant: tenant})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				ids = append(ids, d.ID)
			}
		}
		slices.Sort(ids)
		return ids
	}
	before := t0.Add(-time.Hour)
	for _, step := range []struct {
		name string
		q    store.ExpiredDeliveries
		n    int
		left []string
	}{
		{"an agent's own, every tenant", store.ExpiredDeliveries{Before: before, Agents: []string{"quick"}}, 1,
			[]string{"keep-acme", "main-acme", "main-beta", "none-acme"}},
		{"a tenant's scope without the agents of their own", store.ExpiredDeliveries{Before: before, Tenant: "acme", ExceptAgents: []string{"quick", "keeper"}}, 2,
			[]string{"keep-acme", "main-beta"}},
		{"both filters", store.ExpiredDeliveries{Before: before, Except: []string{"acme"}, Agents: []string{"main", "keeper"}, ExceptAgents: []string{"keeper"}}, 1,
			[]string{"keep-acme"}},
	} {
		n, err := s.DeleteFinishedDeliveries(ctx(), step.q)
		if err != nil || n != step.n {
			t.Fatalf("%s: deleted %d, %v; want %d", step.name, n, err, step.n)
		}
		if got := left(); !slices.Equal(got, step.left) {
			t.Fatalf("%s: left %v; want %v", step.name, got, step.left)
		}
	}
}

func agentRunEvents(t *testing.T, s AgentRetentionStore) {
	at := t0.Add(-100 * time.Hour)
	threads := []struct{ id, tenant, first, last string }{
		{"th-main", "acme", "", "main"},
		{"th-quick", "acme", "main", "quick"}, // its newest run decides
		{"th-none", "acme", "quick", ""},
		{"th-quick-beta", "beta", "", "quick"},
	}
	for _, th := range threads {
		if err := s.CreateThread(ctx(), agent.Thread{ID: th.id, Tenant: th.tenant, CreatedAt: at, UpdatedAt: at}); err != nil {
			t.Fatal(err)
		}
		l, err := s.AcquireLease(ctx(), th.id, "replica-a", at, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for i, name := range []string{th.first, th.last} {
			run := fmt.Sprintf("run-%s-%d", th.id, i)
			evs := []store.Event{{RunID: run, Sequence: 1, Start: true, Body: []byte("1")}, {RunID: run, Sequence: 2, Terminal: true, Body: []byte("2")}}
			if err := s.AppendEvents(ctx(), th.id, l.Fence(), evs); err != nil {
				t.Fatal(err)
			}
			cp := &agent.Checkpoint{ThreadID: th.id, Phase: agent.PhaseFinal, Base: i, Append: []agent.Message{msg(model.RoleUser, "hi")}, Fence: l.Fence(), CreatedAt: at,
				Run: agent.RunRecord{RunID: run, Status: agent.StatusCompleted, StartedAt: at, LastSequence: 2, Spec: agent.RunSpec{Agent: name}}}
			if err := s.SaveCheckpoint(ctx(), cp); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.ReleaseLease(ctx(), l); err != nil {
			t.Fatal(err)
		}
	}
	expired := func() []string {
		t.Helper()
		var out []string
		for _, th := range threads {
			page, err := s.ReadEvents(ctx(), th.id, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Events) == 0 {
				out = append(out, th.id)
			}
		}
		slices.Sort(out)
		return out
	}
	before := t0.Add(-time.Hour)
	for _, step := range []struct {
		name    string
		q       store.ExpiredDeliveries
		expired []string
	}{
		{"an agent's own, one tenant", store.ExpiredDeliveries{Before: before, Tenant: "acme", Agents: []string{"quick"}}, []string{"th-quick"}},
		{"the default scope without the agents of their own", store.ExpiredDeliveries{Before: before, ExceptAgents: []string{"quick", "main"}}, []string{"th-none", "th-quick"}},
		{"an agent's own, every tenant", store.ExpiredDeliveries{Before: before, Agents: []string{"quick"}}, []string{"th-none", "th-quick", "th-quick-beta"}},
	} {
		if _, err := s.DeleteExpiredRunEvents(ctx(), step.q); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := expired(); !slices.Equal(got, step.expired) {
			t.Fatalf("%s: threads without events %v; want %v", step.name, got, step.expired)
		}
	}
}
