package runhost

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// RunEnd is a run segment that reached its end (run_finished or a run
// error) or paused on an interrupt: what Config.OnRunEnd is told.
type RunEnd struct {
	ThreadID, RunID string
	// Payload is the segment's last event: agent.RunFinished,
	// agent.RunError or agent.Interrupted.
	Payload agent.Payload
	// Time is when it happened.
	Time time.Time
	// Thread is the thread as stored after it, when the host has it at
	// hand (a takeover settling a dead replica's run); nil otherwise.
	Thread *agent.ThreadData
}

// runEndTimeout bounds one OnRunEnd call.
const runEndTimeout = 30 * time.Second

// watchEnd wraps sink to note a segment's last event: the end that
// reportEnd tells Config.OnRunEnd about. ended returns it (nil when the
// segment did not end or pause: handed off, or lost its lease).
func (h *Host) watchEnd(sink agent.Sink) (_ agent.Sink, ended func() *RunEnd) {
	if h.cfg.OnRunEnd == nil && h.cfg.Steers == nil {
		return sink, func() *RunEnd { return nil }
	}
	var (
		mu  sync.Mutex
		end *RunEnd
	)
	return func(e agent.Event) {
			sink(e)
			// The root agent's path is its name (any primary agent, not
			// only "main"); a subagent's events name its task call.
			if !agent.IsTerminal(e.Payload) || e.ParentToolCallID != "" {
				return
			}
			if re, ok := e.Payload.(agent.RunError); ok && re.Code == agent.CodeLeaseLost {
				return // the run goes on on the replica that took it over
			}
			mu.Lock()
			end = &RunEnd{ThreadID: e.ThreadID, RunID: e.RunID, Payload: e.Payload, Time: e.Time}
			mu.Unlock()
		}, func() *RunEnd {
			mu.Lock()
			defer mu.Unlock()
			return end
		}
}

// reportEnd queues the steers the ended run did not take
// (queueLeftSteers) and tells Config.OnRunEnd about end (from watchEnd),
// unless the
// runtime call's error or the context's cause says the lease was lost
// (the run goes on elsewhere). The caller still holds the thread's lease
// and has flushed the segment's events: a replica that dies after the
// event and before the report leaves the lease unreleased, and the
// replica that settles it reports the run's end from the store
// (settleEnded); what a webhook announces, the event log has.
func (h *Host) reportEnd(ctx context.Context, threadID string, end *RunEnd, err error) {
	if end == nil || errors.Is(err, agent.ErrLeaseLost) || errors.Is(err, store.ErrLeaseLost) || errors.Is(context.Cause(ctx), store.ErrLeaseLost) {
		return
	}
	if end.ThreadID == "" {
		end.ThreadID = threadID
	}
	h.queueLeftSteers(ctx, threadID, end)
	if h.cfg.OnRunEnd != nil {
		h.runEnded(context.WithoutCancel(ctx), *end)
	}
}

// runEnded calls Config.OnRunEnd, logging a failure (the run has ended
// either way; the hook's own retries are its business).
func (h *Host) runEnded(ctx context.Context, end RunEnd) {
	ctx, cancel := context.WithTimeout(ctx, runEndTimeout)
	defer cancel()
	if err := h.cfg.OnRunEnd(ctx, end); err != nil {
		h.lg.Warn("report the end of a run", zap.String("thread-id", end.ThreadID), zap.String("run-id", end.RunID), zap.Error(err))
	}
}

// settleEnded reports the end of td's last run as stored, when a takeover
// finds the lease of a run that had already ended or paused: its replica
// may have died between the event and its own report. OnRunEnd must
// treat a second report of the same end as a no-op.
func (h *Host) settleEnded(ctx context.Context, td *agent.ThreadData) {
	if h.cfg.OnRunEnd == nil || td.LastRun == nil || td.LastRun.Status == agent.StatusRunning {
		return
	}
	lr := td.LastRun
	end := RunEnd{ThreadID: td.Thread.ID, RunID: lr.RunID, Time: lr.FinishedAt, Thread: td}
	switch {
	case td.Interrupt != nil && td.Interrupt.RunID == lr.RunID:
		end.Payload, end.Time = agent.Interrupted{InterruptID: td.Interrupt.InterruptID, Requests: td.Interrupt.Requests}, td.Interrupt.CreatedAt
	case lr.Status == agent.StatusFailed && lr.Error != nil:
		end.Payload = *lr.Error
	case lr.Status == agent.StatusInterrupted:
		return // an interrupt answered or abandoned since: nothing left to report
	default:
		end.Payload = agent.RunFinished{Status: lr.Status, FinalText: lr.FinalText, Usage: lr.Usage}
	}
	h.runEnded(ctx, end)
}
