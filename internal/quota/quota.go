package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// Names of the quotas, as in the config and in ExceededError.Quota.
const (
	ConcurrentRuns = "concurrent_runs"
	RunsPerMinute  = "runs_per_minute"
	TokensPerDay   = "tokens_per_day"
	LiveSandboxes  = "live_sandboxes"
)

// Code is the error code of a run that crossed a quota mid-run, and the
// ErrorInfo reason of a request refused for one.
const Code = "QUOTA_EXCEEDED"

// Limits are one tenant's quotas; 0 is unlimited.
type Limits struct {
	ConcurrentRuns int
	RunsPerMinute  int
	TokensPerDay   int
	LiveSandboxes  int
}

// zero reports whether l limits nothing.
func (l Limits) zero() bool { return l == Limits{} }

// Policy is the default Limits and the tenants' own (complete: a tenant's
// entry replaces the default for that tenant).
type Policy struct {
	Default Limits
	Tenants map[string]Limits
}

// For returns tenant's limits ("" is store.DefaultTenant).
func (p Policy) For(tenant string) Limits {
	if l, ok := p.Tenants[store.TenantOrDefault(tenant)]; ok {
		return l
	}
	return p.Default
}

// Enabled reports whether any tenant has a quota.
func (p Policy) Enabled() bool {
	if !p.Default.zero() {
		return true
	}
	for _, l := range p.Tenants {
		if !l.zero() {
			return true
		}
	}
	return false
}

// ErrExceeded is what an *ExceededError matches.
var ErrExceeded = errors.New("quota exceeded")

// ExceededError is a request or a run over one of its tenant's quotas.
type ExceededError struct {
	// Quota names it (ConcurrentRuns, ...).
	Quota string
	// Limit is the quota, Current what was counted.
	Limit, Current int
}

// Error implements error.
func (e *ExceededError) Error() string {
	what := map[string]string{
		ConcurrentRuns: "runs running", RunsPerMinute: "runs in the last minute",
		TokensPerDay: "tokens in the last 24 hours", LiveSandboxes: "live sandboxes",
	}[e.Quota]
	return fmt.Sprintf("quota %s exceeded: %d %s, the limit is %d", e.Quota, e.Current, what, e.Limit)
}

// Is matches ErrExceeded.
func (e *ExceededError) Is(target error) bool { return target == ErrExceeded }

// QueueWaits reports whether a queued run over this quota waits in its
// queue rather than ending (AdmitQueued): concurrent_runs and
// live_sandboxes free up as the tenant's other runs end and sandboxes go;
// tokens_per_day is a budget, and a run over it ends FAILED.
func (e *ExceededError) QueueWaits() bool {
	return e.Quota == ConcurrentRuns || e.Quota == LiveSandboxes
}

// RunError ends a run that crossed the quota (agent.CodedError).
func (e *ExceededError) RunError() agent.RunError {
	return agent.RunError{Code: Code, Message: e.Error()}
}

// Metadata is the ErrorInfo metadata of the error: the quota, its limit
// and the count.
func (e *ExceededError) Metadata() map[string]string {
	return map[string]string{"quota": e.Quota, "limit": fmt.Sprint(e.Limit), "current": fmt.Sprint(e.Current)}
}

// Counts is what the checks read from the shared store.
type Counts interface {
	store.QuotaCounts
	store.Ledger
}

// Checker checks the quotas of a Policy against the store.
type Checker struct {
	policy Policy
	counts Counts
	// sandboxes: live_sandboxes is checked (agentd has sandbox workers).
	sandboxes bool
	now       func() time.Time
}

// Config configures a Checker.
type Config struct {
	// Policy is the quotas.
	Policy Policy
	// Counts reads the store. Required.
	Counts Counts
	// Sandboxes reports that runs may create sandboxes: without it
	// live_sandboxes is not checked.
	Sandboxes bool
	// Now is the clock (time.Now).
	Now func() time.Time
}

// New returns the checker of cfg.
func New(cfg Config) (*Checker, error) {
	if cfg.Counts == nil {
		return nil, errors.New("quota: a store to count in is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Checker{policy: cfg.Policy, counts: cfg.Counts, sandboxes: cfg.Sandboxes, now: cfg.Now}, nil
}

// Admit checks a Run or Resume of tenant on thread threadID ("" = a new
// thread) against the tenant's quotas, in the order concurrent_runs,
// runs_per_minute, tokens_per_day, live_sandboxes: the first one the
// request is over is an *ExceededError. Runs on threadID itself do not
// count as concurrent, and its own sandbox does not count as another.
func (c *Checker) Admit(ctx context.Context, tenant, threadID string) error {
	return c.admit(ctx, tenant, threadID, c.policy.For(tenant))
}

// admit checks a run of tenant on threadID against l.
func (c *Checker) admit(ctx context.Context, tenant, threadID string, l Limits) error {
	if l.zero() {
		return nil
	}
	now := c.now()
	if l.ConcurrentRuns > 0 {
		n, err := c.counts.RunningRuns(ctx, tenant, threadID)
		if err != nil {
			return fmt.Errorf("count running runs: %w", err)
		}
		if n >= l.ConcurrentRuns {
			return &ExceededError{Quota: ConcurrentRuns, Limit: l.ConcurrentRuns, Current: n}
		}
	}
	if l.RunsPerMinute > 0 {
		n, err := c.counts.RunsSince(ctx, tenant, now.Add(-time.Minute))
		if err != nil {
			return fmt.Errorf("count recent runs: %w", err)
		}
		if n >= l.RunsPerMinute {
			return &ExceededError{Quota: RunsPerMinute, Limit: l.RunsPerMinute, Current: n}
		}
	}
	if err := c.checkTokens(ctx, tenant, l); err != nil {
		return err
	}
	if l.LiveSandboxes > 0 && c.sandboxes {
		n, err := c.counts.LiveSandboxes(ctx, tenant, threadID)
		if err != nil {
			return fmt.Errorf("count live sandboxes: %w", err)
		}
		if n >= l.LiveSandboxes {
			return &ExceededError{Quota: LiveSandboxes, Limit: l.LiveSandboxes, Current: n}
		}
	}
	return nil
}

// AdmitQueued checks a queued run of tenant on thread threadID as it is
// about to start, in the order concurrent_runs, tokens_per_day,
// live_sandboxes: the first one it is over is an *ExceededError, whose
// QueueWaits says whether the run waits (it stays QUEUED and starts once
// the quota allows) or ends FAILED. runs_per_minute is not checked again:
// it limits how many runs are asked for, and the queued run was counted,
// and admitted, when it was asked for (Admit); counting it again as it
// starts would count it twice.
func (c *Checker) AdmitQueued(ctx context.Context, tenant, threadID string) error {
	l := c.policy.For(tenant)
	l.RunsPerMinute = 0
	return c.admit(ctx, tenant, threadID, l)
}

// checkTokens: tenant's tokens of the last 24 hours must be under
// tokens_per_day.
func (c *Checker) checkTokens(ctx context.Context, tenant string, l Limits) error {
	if l.TokensPerDay <= 0 {
		return nil
	}
	n, err := store.TokensSince(ctx, c.counts, store.TenantOrDefault(tenant), c.now().Add(-24*time.Hour))
	if err != nil {
		return fmt.Errorf("count tokens: %w", err)
	}
	if n >= l.TokensPerDay {
		return &ExceededError{Quota: TokensPerDay, Limit: l.TokensPerDay, Current: n}
	}
	return nil
}

// TenantOf finds a thread's tenant (the thread store's record).
type TenantOf func(ctx context.Context, threadID string) (string, error)

// TokensMetered reports whether some tenant has a tokens_per_day quota
// (Middleware is needed).
func (c *Checker) TokensMetered() bool {
	some := c.policy.Default.TokensPerDay > 0
	for _, l := range c.policy.Tenants {
		some = some || l.TokensPerDay > 0
	}
	return some
}

// Middleware returns an agent middleware, for one agent context, that
// checks tokens_per_day before every model call of the context
// (subagents get their own): a run whose tenant reached it ends FAILED
// with code QUOTA_EXCEEDED there, before the call.
func (c *Checker) Middleware(tenantOf TenantOf) agent.Middleware {
	return &middleware{c: c, tenantOf: tenantOf}
}

type middleware struct {
	agent.BaseMiddleware
	c        *Checker
	tenantOf TenantOf

	mu             sync.Mutex
	thread, tenant string // the context's thread and its tenant, once known
}

// Name implements agent.Middleware.
func (*middleware) Name() string { return "quota" }

// BeforeModel implements agent.Middleware.
func (m *middleware) BeforeModel(ctx context.Context, rc *agent.RunContext, _ *agent.State) error {
	tenant, err := m.tenantOfThread(ctx, rc.ThreadID)
	if err != nil {
		return fmt.Errorf("the thread's tenant: %w", err)
	}
	return m.c.checkTokens(ctx, tenant, m.c.policy.For(tenant))
}

func (m *middleware) tenantOfThread(ctx context.Context, threadID string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.thread == threadID && m.thread != "" {
		return m.tenant, nil
	}
	t, err := m.tenantOf(ctx, threadID)
	if err != nil {
		return "", err
	}
	m.thread, m.tenant = threadID, t
	return t, nil
}
