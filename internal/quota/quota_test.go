package quota_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/plumbhq/plumb/internal/quota"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
)

var now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// fixture is a real SQLite store where tenant acme has a running run on
// thread ta, a finished one on tb (ta's 30 s ago, tb's 5 min ago), a
// sandbox on ta, and 150 tokens spent 1 h ago (plus 1000 two days ago);
// tenant zeta has a running run.
func fixture(t *testing.T) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agentd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, th := range []agent.Thread{{ID: "ta", Tenant: "acme", CreatedAt: now}, {ID: "tb", Tenant: "acme", CreatedAt: now}, {ID: "tz", Tenant: "zeta", CreatedAt: now}} {
		if err := s.CreateThread(ctx, th); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []struct {
		thread, id string
		status     agent.RunStatus
		at         time.Time
	}{{"ta", "r1", agent.StatusRunning, now.Add(-30 * time.Second)}, {"tb", "r2", agent.StatusCompleted, now.Add(-5 * time.Minute)}, {"tz", "r3", agent.StatusRunning, now}} {
		cp := &agent.Checkpoint{ThreadID: r.thread, Phase: agent.PhaseInput, Run: agent.RunRecord{RunID: r.id, Status: r.status, StartedAt: r.at}, CreatedAt: r.at,
			Append: []agent.Message{{Message: model.Message{Role: model.RoleUser, Content: "hi"}}}}
		if err := s.SaveCheckpoint(ctx, cp); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetSandbox(ctx, "ta", "sbx-w-1"); err != nil {
		t.Fatal(err)
	}
	for _, e := range []store.UsageEntry{
		{Tenant: "acme", ThreadID: "ta", RunID: "r1", At: now.Add(-time.Hour), Usage: model.Usage{Prompt: 100, Completion: 50, Total: 150, Cached: 70}},
		{Tenant: "acme", ThreadID: "tb", RunID: "r0", At: now.Add(-48 * time.Hour), Usage: model.Usage{Prompt: 1000, Total: 1000}},
	} {
		if err := s.RecordUsage(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// TestAdmit: each quota refuses the request it is over, naming itself,
// counted from the store for the request's tenant only; a tenant's own
// limits replace the default; 0 is unlimited; the request's own thread's
// run and sandbox are not counted against it.
func TestAdmit(t *testing.T) {
	s := fixture(t)
	cases := []struct {
		name      string
		policy    quota.Policy
		sandboxes bool
		tenant    string
		thread    string
		want      *quota.ExceededError
	}{
		{name: "no quotas", tenant: "acme"},
		{name: "concurrent runs", policy: quota.Policy{Default: quota.Limits{ConcurrentRuns: 1}}, tenant: "acme",
			want: &quota.ExceededError{Quota: quota.ConcurrentRuns, Limit: 1, Current: 1}},
		{name: "concurrent runs under", policy: quota.Policy{Default: quota.Limits{ConcurrentRuns: 2}}, tenant: "acme"},
		{name: "concurrent runs, the running thread itself", policy: quota.Policy{Default: quota.Limits{ConcurrentRuns: 1}}, tenant: "acme", thread: "ta"},
		{name: "another tenant's runs", policy: quota.Policy{Default: quota.Limits{ConcurrentRuns: 1}}, tenant: "nobody"},
		{name: "runs per minute", policy: quota.Policy{Default: quota.Limits{RunsPerMinute: 1}}, tenant: "acme",
			want: &quota.ExceededError{Quota: quota.RunsPerMinute, Limit: 1, Current: 1}},
		{name: "runs per minute under", policy: quota.Policy{Default: quota.Limits{RunsPerMinute: 2}}, tenant: "acme"},
		{name: "tokens per day", policy: quota.Policy{Default: quota.Limits{TokensPerDay: 150}}, tenant: "acme",
			want: &quota.ExceededError{Quota: quota.TokensPerDay, Limit: 150, Current: 150}},
		{name: "tokens per day under", policy: quota.Policy{Default: quota.Limits{TokensPerDay: 151}}, tenant: "acme"},
		{name: "live sandboxes", policy: quota.Policy{Default: quota.Limits{LiveSandboxes: 1}}, sandboxes: true, tenant: "acme",
			want: &quota.ExceededError{Quota: quota.LiveSandboxes, Limit: 1, Current: 1}},
		{name: "live sandboxes, the thread's own", policy: quota.Policy{Default: quota.Limits{LiveSandboxes: 1}}, sandboxes: true, tenant: "acme", thread: "ta"},
		{name: "live sandboxes without sandboxd", policy: quota.Policy{Default: quota.Limits{LiveSandboxes: 1}}, tenant: "acme"},
		{name: "tenant override", policy: quota.Policy{Default: quota.Limits{ConcurrentRuns: 1}, Tenants: map[string]quota.Limits{"acme": {}}}, tenant: "acme"},
		{name: "tenant override applies", policy: quota.Policy{Tenants: map[string]quota.Limits{"zeta": {ConcurrentRuns: 1}}}, tenant: "zeta", thread: "new",
			want: &quota.ExceededError{Quota: quota.ConcurrentRuns, Limit: 1, Current: 1}},
		{name: "first quota over wins", policy: quota.Policy{Default: quota.Limits{ConcurrentRuns: 1, TokensPerDay: 1}}, tenant: "acme",
			want: &quota.ExceededError{Quota: quota.ConcurrentRuns, Limit: 1, Current: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, err := quota.New(quota.Config{Policy: c.policy, Counts: s, Sandboxes: c.sandboxes, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			err = q.Admit(context.Background(), c.tenant, c.thread)
			if c.want == nil {
				if err != nil {
					t.Fatalf("Admit: %v; want admitted", err)
				}
				return
			}
			var qe *quota.ExceededError
			if !errors.As(err, &qe) || *qe != *c.want || !errors.Is(err, quota.ErrExceeded) {
				t.Fatalf("Admit: %v; want %+v", err, c.want)
			}
			if md := qe.Metadata(); md["quota"] != c.want.Quota {
				t.Fatalf("metadata %v does not name %s", md, c.want.Quota)
			}
			if re := agent.ErrorInfo(err); re.Code != quota.Code {
				t.Fatalf("ErrorInfo = %+v; want code %s", re, quota.Code)
			}
		})
	}
}

// TestMiddleware: before every model call the tenant's tokens of the last
// 24 hours are checked; a context of a tenant at its quota fails with the
// quota's error, which ends a run with code QUOTA_EXCEEDED.
func TestMiddleware(t *testing.T) {
	s := fixture(t)
	q, err := quota.New(quota.Config{Policy: quota.Policy{Tenants: map[string]quota.Limits{"acme": {TokensPerDay: 100}, "zeta": {TokensPerDay: 100}}},
		Counts: s, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if !q.TokensMetered() {
		t.Fatal("TokensMetered = false with a tokens_per_day quota")
	}
	tenantOf := func(ctx context.Context, id string) (string, error) {
		th, err := s.Thread(ctx, id)
		return store.TenantOf(th), err
	}
	cases := []struct {
		thread string
		want   error
	}{{"ta", quota.ErrExceeded}, {"tz", nil}, {"gone", agent.ErrThreadNotFound}}
	for _, c := range cases {
		mw := q.Middleware(tenantOf)
		err := mw.BeforeModel(context.Background(), &agent.RunContext{ThreadID: c.thread}, nil)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("BeforeModel on %s: %v; want %v", c.thread, err, c.want)
		}
	}
	none, _ := quota.New(quota.Config{Policy: quota.Policy{Default: quota.Limits{ConcurrentRuns: 3}}, Counts: s})
	if none.TokensMetered() {
		t.Fatal("TokensMetered = true without a tokens_per_day quota")
	}
}

// TestAdmitQueued: a queued run about to start is checked again, except
// for runs_per_minute (it was counted when asked for); over
// concurrent_runs or live_sandboxes it waits (QueueWaits), over
// tokens_per_day it is refused for good.
func TestAdmitQueued(t *testing.T) {
	s := fixture(t)
	cases := []struct {
		name      string
		limits    quota.Limits
		sandboxes bool
		want      string // the quota it is over ("": admitted)
		waits     bool
	}{
		{name: "no quotas"},
		{name: "runs per minute not counted again", limits: quota.Limits{RunsPerMinute: 1}},
		{name: "concurrent runs waits", limits: quota.Limits{ConcurrentRuns: 1}, want: quota.ConcurrentRuns, waits: true},
		{name: "live sandboxes waits", limits: quota.Limits{LiveSandboxes: 1}, sandboxes: true, want: quota.LiveSandboxes, waits: true},
		{name: "tokens per day fails", limits: quota.Limits{TokensPerDay: 150, RunsPerMinute: 1}, want: quota.TokensPerDay},
		{name: "waiting goes first", limits: quota.Limits{ConcurrentRuns: 1, TokensPerDay: 1}, want: quota.ConcurrentRuns, waits: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, err := quota.New(quota.Config{Policy: quota.Policy{Tenants: map[string]quota.Limits{"acme": c.limits}}, Counts: s, Sandboxes: c.sandboxes,
				Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			err = q.AdmitQueued(context.Background(), "acme", "tb")
			var qe *quota.ExceededError
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("AdmitQueued: %v; want admitted", err)
			case c.want == "":
			case !errors.As(err, &qe) || qe.Quota != c.want || qe.QueueWaits() != c.waits:
				t.Fatalf("AdmitQueued: %v; want over %s, waits %v", err, c.want, c.waits)
			}
		})
	}
}
