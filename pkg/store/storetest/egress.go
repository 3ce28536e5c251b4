package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/store"
)

// RunEgress runs the store.EgressRecords contract against a fresh store
// from newStore: asks round-trip and are idempotent, a decision applies
// once, the pending list and the grant listings (per thread, per agent,
// paged, tenant-bound) hold what they should, the grants of a new box are
// the thread's THREAD grants and the agent's AGENT grants of the same
// tenant and nothing revoked.
func RunEgress(t *testing.T, newStore func(t *testing.T) store.EgressRecords) {
	t.Helper()
	s := newStore(t)
	ask := func(tenant, thread, id, agent string, i int) store.EgressRecord {
		return store.EgressRecord{Tenant: tenant, ThreadID: thread, RequestID: id, Agent: agent, RunID: "run-" + thread, SandboxID: "sbx-w-" + thread,
			Host: fmt.Sprintf("h%d.example.com", i), Port: 443, ToolCallID: "call-" + id, AgentPath: "main", Created: t0.Add(time.Duration(i) * time.Second),
			Status: store.EgressPending}
	}
	type add struct {
		r      store.EgressRecord
		decide *store.EgressDecision
	}
	approve := func(scope store.EgressScope, i int) *store.EgressDecision {
		return &store.EgressDecision{Status: store.EgressApproved, Scope: scope, DecidedBy: "acme/alice", Decided: t0.Add(time.Duration(100+i) * time.Second)}
	}
	adds := []add{
		{ask("acme", "th1", "r1", "coder", 1), approve(store.EgressScopeRun, 1)},
		{ask("acme", "th1", "r2", "coder", 2), approve(store.EgressScopeThread, 2)},
		{ask("acme", "th2", "r3", "coder", 3), approve(store.EgressScopeAgent, 3)},
		{ask("acme", "th2", "r4", "coder", 4), &store.EgressDecision{Status: store.EgressRejected, DecidedBy: "acme/alice", Decided: t0.Add(104 * time.Second), Reason: "no"}},
		{ask("acme", "th3", "r5", "writer", 5), approve(store.EgressScopeAgent, 5)},
		{ask("other", "th9", "r6", "coder", 6), approve(store.EgressScopeAgent, 6)},
		{ask("acme", "th1", "r7", "coder", 7), nil},
		{ask("acme", "th1", "r8", "coder", 8), &store.EgressDecision{Status: store.EgressClosed, Decided: t0.Add(108 * time.Second), Reason: "timed out"}},
	}
	for _, a := range adds {
		if err := s.AddEgressRequest(ctx(), a.r); err != nil {
			t.Fatalf("add %s: %v", a.r.RequestID, err)
		}
		if err := s.AddEgressRequest(ctx(), a.r); err != nil {
			t.Fatalf("add %s again: %v", a.r.RequestID, err)
		}
		if a.decide == nil {
			continue
		}
		got, err := s.DecideEgressRequest(ctx(), a.r.ThreadID, a.r.RequestID, *a.decide)
		want := a.r
		want.Status, want.Scope, want.DecidedBy, want.Decided, want.Reason = a.decide.Status, a.decide.Scope, a.decide.DecidedBy, a.decide.Decided, a.decide.Reason
		if err != nil || got != want {
			t.Fatalf("decide %s = %+v, %v; want %+v", a.r.RequestID, got, err, want)
		}
		if got, err := s.EgressRequest(ctx(), a.r.ThreadID, a.r.RequestID); err != nil || got != want {
			t.Fatalf("read %s = %+v, %v; want %+v", a.r.RequestID, got, err, want)
		}
	}
	t.Run("decide", func(t *testing.T) {
		for _, c := range []struct {
			name, thread, id string
			want             error
		}{
			{"decided twice", "th1", "r1", store.ErrEgressDecided},
			{"closed", "th1", "r8", store.ErrEgressDecided},
			{"unknown request", "th1", "nope", store.ErrEgressNotFound},
			{"another thread's request", "th2", "r1", store.ErrEgressNotFound},
		} {
			if _, err := s.DecideEgressRequest(ctx(), c.thread, c.id, store.EgressDecision{Status: store.EgressRejected, Decided: t0}); !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
		}
		if _, err := s.EgressRequest(ctx(), "th1", "nope"); !errors.Is(err, store.ErrEgressNotFound) {
			t.Errorf("EgressRequest(nope): %v", err)
		}
	})
	t.Run("pending", func(t *testing.T) {
		got, err := s.PendingEgress(ctx(), "th1")
		if err != nil || len(got) != 1 || got[0].RequestID != "r7" || got[0].Status != store.EgressPending {
			t.Fatalf("pending of th1 = %+v, %v; want r7", got, err)
		}
		if got, err := s.PendingEgress(ctx(), "th2"); err != nil || len(got) != 0 {
			t.Fatalf("pending of th2 = %+v, %v; want none", got, err)
		}
	})
	ids := func(rs []store.EgressRecord) []string {
		out := []string{}
		for _, r := range rs {
			out = append(out, r.RequestID)
		}
		return out
	}
	t.Run("list", func(t *testing.T) {
		for _, c := range []struct {
			name string
			q    store.EgressQuery
			want []string
		}{
			{"thread", store.EgressQuery{Tenant: "acme", ThreadID: "th1", PageSize: 10}, []string{"r2", "r1"}},
			{"agent", store.EgressQuery{Tenant: "acme", Agent: "coder", PageSize: 10}, []string{"r3", "r2", "r1"}},
			{"other agent", store.EgressQuery{Tenant: "acme", Agent: "writer", PageSize: 10}, []string{"r5"}},
			{"another tenant's thread", store.EgressQuery{Tenant: "other", ThreadID: "th1", PageSize: 10}, []string{}},
			{"another tenant's agent", store.EgressQuery{Tenant: "other", Agent: "coder", PageSize: 10}, []string{"r6"}},
		} {
			got, next, err := s.ListEgressGrants(ctx(), c.q)
			if err != nil || fmt.Sprint(ids(got)) != fmt.Sprint(c.want) || next != "" {
				t.Errorf("%s: %v next %q, %v; want %v", c.name, ids(got), next, err, c.want)
			}
		}
		var all []string
		q := store.EgressQuery{Tenant: "acme", Agent: "coder", PageSize: 2}
		for range 5 {
			page, next, err := s.ListEgressGrants(ctx(), q)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, ids(page)...)
			if next == "" {
				break
			}
			q.PageToken = next
		}
		if fmt.Sprint(all) != "[r3 r2 r1]" {
			t.Errorf("paged: %v, want [r3 r2 r1]", all)
		}
		if _, _, err := s.ListEgressGrants(ctx(), store.EgressQuery{Tenant: "acme", Agent: "coder", PageSize: 2, PageToken: "!!"}); !errors.Is(err, store.ErrBadPageToken) {
			t.Errorf("bad page token: %v", err)
		}
	})
	t.Run("grants of a new box", func(t *testing.T) {
		for _, c := range []struct {
			name, tenant, agent, thread string
			want                        []string
		}{
			{"thread and agent", "acme", "coder", "th1", []string{"r2", "r3"}},
			{"agent only", "acme", "coder", "th4", []string{"r3"}},
			{"other agent", "acme", "writer", "th1", []string{"r2", "r5"}},
			{"another tenant", "other", "coder", "th1", []string{"r6"}},
		} {
			got, err := s.EgressGrants(ctx(), c.tenant, c.agent, c.thread)
			if err != nil || fmt.Sprint(ids(got)) != fmt.Sprint(c.want) {
				t.Errorf("%s: %v, %v; want %v", c.name, ids(got), err, c.want)
			}
		}
	})
	t.Run("revoke", func(t *testing.T) {
		if err := s.RevokeEgressGrant(ctx(), "th2", "r3"); err != nil {
			t.Fatal(err)
		}
		if err := s.RevokeEgressGrant(ctx(), "th2", "r3"); err != nil {
			t.Fatalf("again: %v", err)
		}
		for _, c := range []struct{ thread, id string }{{"th2", "r4"}, {"th1", "r7"}, {"th1", "nope"}} {
			if err := s.RevokeEgressGrant(ctx(), c.thread, c.id); !errors.Is(err, store.ErrEgressNotFound) {
				t.Errorf("revoke %s (not an approval): %v", c.id, err)
			}
		}
		got, err := s.EgressGrants(ctx(), "acme", "coder", "th1")
		if err != nil || fmt.Sprint(ids(got)) != "[r2]" {
			t.Fatalf("grants after revoking r3: %v, %v", ids(got), err)
		}
		if r, _ := s.EgressRequest(ctx(), "th2", "r3"); !r.Revoked {
			t.Fatalf("r3 reads %+v, want revoked", r)
		}
		if l, _, _ := s.ListEgressGrants(ctx(), store.EgressQuery{Tenant: "acme", ThreadID: "th2", PageSize: 10}); len(l) != 1 || !l[0].Revoked {
			t.Fatalf("the audit keeps the revoked grant: %+v", l)
		}
	})
}
