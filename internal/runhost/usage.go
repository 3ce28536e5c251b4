package runhost

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
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
