package agentd

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// usageMetrics are agentd's per-tenant counters: tokens by model and kind
// (counted where the usage ledger row is written) and runs by their end.
type usageMetrics struct {
	tokens *prometheus.CounterVec
	runs   *prometheus.CounterVec
}

func newUsageMetrics() *usageMetrics {
	return &usageMetrics{
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plumb_tokens_total",
			Help: "Model tokens of the runs this replica held, by tenant, model and kind (prompt, completion, cached, reasoning); cached is part of prompt, reasoning of completion.",
		}, []string{"tenant", "model", "kind"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plumb_runs_total",
			Help: "Run segments this replica ended, by tenant and status (COMPLETED, FAILED, CANCELLED, INTERRUPTED, ...).",
		}, []string{"tenant", "status"}),
	}
}

// addTokens counts one ledger row.
func (m *usageMetrics) addTokens(e store.UsageEntry) {
	t := store.TenantOrDefault(e.Tenant)
	for _, k := range []struct {
		kind string
		n    int
	}{{"prompt", e.Usage.Prompt}, {"completion", e.Usage.Completion}, {"cached", e.Usage.Cached}, {"reasoning", e.Usage.Reasoning}} {
		if k.n > 0 {
			m.tokens.WithLabelValues(t, e.Model, k.kind).Add(float64(k.n))
		}
	}
}

// endStatus is the status label of a segment's end.
func endStatus(p agent.Payload) string {
	switch e := p.(type) {
	case agent.RunFinished:
		return string(e.Status)
	case agent.RunError:
		return string(agent.StatusFailed)
	case agent.Interrupted:
		return string(agent.StatusInterrupted)
	}
	return "UNKNOWN"
}

// MeterUsage makes c count plumb_tokens_total and plumb_runs_total on reg:
// tokens as each model call's ledger row is written (under the thread's
// stored tenant), runs as each segment ends on this replica (OnRunEnd,
// which may tell a taken-over run's end twice: the counter may count it
// twice too). cmd/agentd calls it with its /metrics registry.
func (a *Agentd) MeterUsage(c *agentsvc.Config, reg prometheus.Registerer) {
	m := newUsageMetrics()
	reg.MustRegister(m.tokens, m.runs)
	if l, ok := a.Store.(store.Ledger); ok && c.OnUsage != nil {
		c.OnUsage = runhost.RecordUsage(a.Store, countingLedger{Ledger: l, m: m})
	}
	next := c.OnRunEnd
	c.OnRunEnd = func(ctx context.Context, end runhost.RunEnd) error {
		tenant := ""
		if end.Thread != nil {
			tenant = store.TenantOf(end.Thread.Thread)
		} else if t, err := a.Store.Thread(ctx, end.ThreadID); err == nil {
			tenant = store.TenantOf(t)
		}
		m.runs.WithLabelValues(store.TenantOrDefault(tenant), endStatus(end.Payload)).Inc()
		if next != nil {
			return next(ctx, end)
		}
		return nil
	}
}

// countingLedger counts each row it records.
type countingLedger struct {
	store.Ledger
	m *usageMetrics
}

func (l countingLedger) RecordUsage(ctx context.Context, e store.UsageEntry) error {
	if err := l.Ledger.RecordUsage(ctx, e); err != nil {
		return err
	}
	l.m.addTokens(e)
	return nil
}
