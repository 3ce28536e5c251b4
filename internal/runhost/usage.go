package runhost

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// UsageCall is one model call of a run: what Config.OnUsage is told.
type UsageCall struct {
	ThreadID, RunID string
	// AgentPath is the agent that made the call ("main" or a subagent's
	// path).
	AgentPath string
	// Report is the call's usage event.
	Report agent.UsageReport
	// Time is when the call ended.
	Time time.Time
}

// usageTimeout bounds one OnUsage call.
const usageTimeout = 30 * time.Second

// watchUsage wraps sink to tell Config.OnUsage of each usage event after
// it passed on.
func (h *Host) watchUsage(ctx context.Context, sink agent.Sink) agent.Sink {
	if h.cfg.OnUsage == nil {
		return sink
	}
	ctx = context.WithoutCancel(ctx)
	return func(e agent.Event) {
		sink(e)
		r, ok := e.Payload.(agent.UsageReport)
		if !ok {
			return
		}
		c, cancel := context.WithTimeout(ctx, usageTimeout)
		defer cancel()
		if err := h.cfg.OnUsage(c, UsageCall{ThreadID: e.ThreadID, RunID: e.RunID, AgentPath: e.AgentPath, Report: r, Time: e.Time}); err != nil {
			h.lg.Warn("record a model call's usage", zap.String("thread-id", e.ThreadID), zap.String("run-id", e.RunID), zap.Error(err))
		}
	}
}

// ThreadTenants finds a stored thread's record (its tenant).
type ThreadTenants interface {
	Thread(ctx context.Context, id string) (agent.Thread, error)
}

// RecordUsage is an OnUsage that appends each model call to the usage
// ledger l, under the thread's tenant as stored (a taken-over run has no
// caller to name it).
func RecordUsage(threads ThreadTenants, l store.Ledger) func(ctx context.Context, u UsageCall) error {
	return func(ctx context.Context, u UsageCall) error {
		t, err := threads.Thread(ctx, u.ThreadID)
		if err != nil {
			return err
		}
		return l.RecordUsage(ctx, store.UsageEntry{
			Tenant: store.TenantOf(t), ThreadID: u.ThreadID, RunID: u.RunID,
			Model: u.Report.Model, At: u.Time, Usage: u.Report.Call,
		})
	}
}
