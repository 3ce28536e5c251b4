package agent

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/model"
)

// SubagentRequest describes one subagent invocation from a task tool.
type SubagentRequest struct {
	// Name is the subagent profile; the context's path is
	// "<parent path>/<Name>".
	Name string
	// Description is the task; it becomes the subagent's only input.
	Description string
	// Config is the subagent's own setup (fresh middleware); its Limits
	// carry the profile's max_steps (MaxIterations) and timeout.
	Config *Config
}

// SubagentOutcome is how a subagent invocation ended.
type SubagentOutcome struct {
	// Status is how it ended; meaningless when Interrupt is set.
	Status SubagentStatus
	// Text is its last non-empty assistant text ("" if none).
	Text string
	// Err is the failure of a FAILED subagent.
	Err error
	// Usage is its token usage, its own subagents included.
	Usage model.Usage
	// Limits are the limits it ran under (for the messages of docs/agent-core.md §5.3).
	Limits Limits
	// Interrupt is set when the subagent suspended: return it from the
	// task tool as the error so that the parent interrupts too.
	Interrupt *Interrupt
}

var errSubagentTimeout = errors.New("subagent timeout")

// RunSubagent runs (or, when parent.Resume is set, resumes) a subagent for
// the task call parent (docs/agent-core.md §5.3): it emits subagent_started, runs a
// nested executor whose events carry the subagent's agent path and the
// task call id, and emits subagent_finished unless the subagent suspended.
// The subagent shares the run's event stream and usage totals; it never
// emits run-level events. The invocation is an agent.subagent span below
// the task call's span.
func RunSubagent(ctx context.Context, parent *ToolRequest, sr SubagentRequest) SubagentOutcome {
	ctx, span := parent.Run.tracer().Start(ctx, SpanSubagent, trace.WithAttributes(
		attribute.String(AttrOperation, "invoke_agent"), attribute.String(AttrAgentName, sr.Name),
		attribute.String(AttrAgentPath, parent.Run.AgentPath+"/"+sr.Name), attribute.String(AttrParentToolCallID, parent.Call.ID),
		attribute.Bool(AttrResumed, parent.Resume != nil && parent.Resume.Snapshot != nil)))
	out := runSubagent(ctx, parent, sr)
	endSubagent(span, out)
	return out
}

func runSubagent(ctx context.Context, parent *ToolRequest, sr SubagentRequest) SubagentOutcome {
	cfg := sr.Config
	var lim Limits
	if cfg != nil {
		lim = cfg.Limits.WithDefaults()
	}
	modelKey := ""
	var b = parent.Run.Backend
	if cfg != nil {
		modelKey = cfg.ModelKey
		if cfg.Backend != nil {
			b = cfg.Backend
		}
	}
	rc := parent.Run.child(sr.Name, modelKey, parent.Call.ID, lim, b)
	var (
		st      *State
		elapsed time.Duration
		plan    *resumePlan
	)
	desc := sr.Description
	resumed := parent.Resume != nil && parent.Resume.Snapshot != nil
	if resumed {
		snap := parent.Resume.Snapshot
		st = RestoreState(snap.State.clone())
		rc.step = snap.Step
		rc.usage = snap.Usage
		elapsed = snap.Elapsed
		desc = snap.Description
		plan = parent.Resume.plan
		if plan == nil {
			plan = &resumePlan{}
		}
	} else {
		st = NewState()
		st.Append(Message{
			Message:   model.Message{Role: model.RoleUser, Content: desc},
			Source:    SourceInput,
			CreatedAt: rc.Now(),
		})
	}
	parent.MarkStarted()
	rc.Emit(SubagentStarted{Subagent: sr.Name, Description: desc, Depth: rc.Depth, Resumed: resumed})

	out := SubagentOutcome{Limits: lim}
	finish := func(status SubagentStatus, err error) SubagentOutcome {
		out.Status, out.Err = status, err
		out.Text = LastText(st.Messages())
		out.Usage = rc.Usage()
		parent.Run.addUsage(out.Usage)
		rc.Emit(SubagentFinished{Status: status, Usage: out.Usage})
		return out
	}
	x, err := newExecution(cfg, rc, st)
	if err != nil {
		rc.Logger.Error("subagent config", zap.Error(err))
		return finish(SubagentFailed, err)
	}
	sctx, cancel := context.WithTimeoutCause(ctx, max(lim.Timeout-elapsed, time.Millisecond), errSubagentTimeout)
	defer cancel()
	segStart := time.Now()
	stopped := func() SubagentOutcome {
		if ctx.Err() == nil && errors.Is(context.Cause(sctx), errSubagentTimeout) {
			return finish(SubagentDeadlineExceeded, nil)
		}
		return finish(SubagentCancelled, nil)
	}
	release, err := x.provideTools(sctx)
	defer release()
	if err != nil {
		if sctx.Err() != nil {
			return stopped()
		}
		return finish(SubagentFailed, err)
	}
	if err := x.beforeAgent(sctx); err != nil {
		if sctx.Err() != nil {
			return stopped()
		}
		return finish(SubagentFailed, err)
	}
	end := x.loop(sctx, plan)
	switch end.kind {
	case endCompleted:
		return finish(SubagentCompleted, nil)
	case endStepLimit:
		return finish(SubagentStepLimit, nil)
	case endInterrupted:
		out.Usage = rc.Usage()
		out.Interrupt = &Interrupt{Nested: &SubagentSnapshot{
			Subagent:    sr.Name,
			Description: desc,
			AgentPath:   rc.AgentPath,
			TaskCallID:  parent.Call.ID,
			Depth:       rc.Depth,
			Step:        rc.Step(),
			Elapsed:     elapsed + time.Since(segStart),
			Usage:       out.Usage,
			State:       st.Snapshot(),
		}}
		return out
	case endStopped:
		return stopped()
	default:
		if sctx.Err() != nil {
			return stopped()
		}
		rc.Logger.Warn("subagent failed", zap.Error(end.err))
		return finish(SubagentFailed, end.err)
	}
}

// clone deep-copies a snapshot.
func (s Snapshot) clone() Snapshot { return RestoreState(s).Snapshot() }

// ErrorInfo classifies err as an error event: a CodedError (a hook's,
// such as a quota's) keeps its own code, a model error keeps its code and
// retryability, a failed checkpoint is STORAGE (retryable), anything else
// is INTERNAL.
func ErrorInfo(err error) RunError {
	if err == nil {
		return RunError{Code: CodeInternal, Message: "unknown failure"}
	}
	var ce CodedError
	if errors.As(err, &ce) {
		return ce.RunError()
	}
	var me *model.Error
	if errors.As(err, &me) {
		msg := me.Message
		if msg == "" {
			msg = me.Error()
		}
		return RunError{Code: string(me.Code), Message: msg, Retryable: me.Retryable}
	}
	if errors.Is(err, ErrLeaseLost) {
		return RunError{Code: CodeLeaseLost, Message: "another agentd replica took the thread over; the run goes on there: " + err.Error()}
	}
	var se *storageError
	if errors.As(err, &se) {
		return RunError{Code: CodeStorage, Message: se.Error(), Retryable: true}
	}
	return RunError{Code: CodeInternal, Message: err.Error()}
}
