package agent

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/plumbhq/plumb/pkg/model"
)

// Span names. A run segment (Run or Resume) is one agent.run span; its
// steps, their model and tool calls, and subagents nest below it. Spans
// carry ids, names, counts and outcomes, never prompts, arguments, results
// or file contents.
const (
	SpanRun       = "agent.run"
	SpanSubagent  = "agent.subagent"
	SpanStep      = "agent.step"
	SpanModelCall = "agent.model_call"
	SpanToolCall  = "agent.tool_call"
)

// Span attribute keys: the OpenTelemetry GenAI conventions where one
// fits, plumb.* otherwise.
const (
	AttrOperation     = "gen_ai.operation.name"
	AttrAgentName     = "gen_ai.agent.name"
	AttrConversation  = "gen_ai.conversation.id"
	AttrRequestModel  = "gen_ai.request.model"
	AttrInputTokens   = "gen_ai.usage.input_tokens"
	AttrOutputTokens  = "gen_ai.usage.output_tokens"
	AttrFinishReasons = "gen_ai.response.finish_reasons"
	AttrProviderName  = "gen_ai.provider.name"
	// AttrSystem is the provider under its older name (before
	// gen_ai.provider.name), kept for backends that still read it.
	AttrSystem     = "gen_ai.system"
	AttrToolName   = "gen_ai.tool.name"
	AttrToolCallID = "gen_ai.tool.call.id"
	AttrErrorType  = "error.type"

	AttrThreadID         = "plumb.thread.id"
	AttrRunID            = "plumb.run.id"
	AttrRunStatus        = "plumb.run.status"
	AttrResumed          = "plumb.resumed"
	AttrAgentPath        = "plumb.agent.path"
	AttrParentToolCallID = "plumb.parent_tool_call.id"
	AttrModelKey         = "plumb.model.key"
	AttrStep             = "plumb.step"
	AttrStepEnd          = "plumb.step.end"
	AttrTokensEstimated  = "plumb.usage.estimated"
	AttrCachedTokens     = "plumb.usage.cached_tokens"
	AttrReasoningTokens  = "plumb.usage.reasoning_tokens"
	AttrToolCalls        = "plumb.tool_calls"
	AttrToolIsError      = "plumb.tool.is_error"
	AttrToolOrigin       = "plumb.tool.origin"
	AttrToolInterrupted  = "plumb.tool.interrupted"
	AttrToolNoResult     = "plumb.tool.no_result"
	AttrSubagentStatus   = "plumb.subagent.status"
)

// tracerName is the instrumentation scope of the executor's spans.
const tracerName = "github.com/plumbhq/plumb/pkg/agent"

var noopTracer = noop.NewTracerProvider().Tracer(tracerName)

// WithTracerProvider sets the provider of the runner's spans (default
// otel.GetTracerProvider(), a no-op until a daemon installs one).
func WithTracerProvider(tp trace.TracerProvider) RunnerOption {
	return func(r *Runner) {
		if tp != nil {
			r.tracer = tp.Tracer(tracerName)
		}
	}
}

func defaultTracer() trace.Tracer { return otel.GetTracerProvider().Tracer(tracerName) }

// tracer returns the run's tracer (a no-op one for a RunContext built
// outside a Runner).
func (rc *RunContext) tracer() trace.Tracer {
	if rc == nil || rc.shared == nil || rc.shared.tracer == nil {
		return noopTracer
	}
	return rc.shared.tracer
}

// startResumed starts the agent.run span of a segment that goes on with
// an existing thread (Resume, Continue).
func (r *Runner) startResumed(ctx context.Context, threadID string) (context.Context, trace.Span) {
	return r.tracer.Start(ctx, SpanRun, trace.WithAttributes(attribute.Bool(AttrResumed, true),
		attribute.String(AttrThreadID, threadID), attribute.String(AttrConversation, threadID)))
}

// endRun records how a run segment ended on its span and ends it.
func endRun(span trace.Span, res *RunResult, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if err != nil && !errors.Is(err, ErrHandedOff) {
		// Refused before run_started.
		span.SetAttributes(attribute.String(AttrErrorType, refusalType(err)))
		span.SetStatus(codes.Error, err.Error())
		return
	}
	if res == nil {
		return
	}
	span.SetAttributes(attribute.String(AttrRunStatus, string(res.Status)))
	span.SetAttributes(usageAttrs(res.Usage)...)
	if res.Error != nil {
		span.SetAttributes(attribute.String(AttrErrorType, res.Error.Code))
		span.SetStatus(codes.Error, res.Error.Message)
	}
}

// endModelCall records a model call's outcome and ends its span.
func endModelCall(span trace.Span, resp model.Response, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.SetAttributes(attribute.String(AttrErrorType, errorType(err)))
		span.SetStatus(codes.Error, err.Error())
		return
	}
	span.SetAttributes(usageAttrs(resp.Usage)...)
	span.SetAttributes(
		attribute.StringSlice(AttrFinishReasons, []string{resp.FinishReason}),
		attribute.Int(AttrToolCalls, len(resp.Message.ToolCalls)),
	)
}

func usageAttrs(u model.Usage) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.Int(AttrInputTokens, u.Prompt),
		attribute.Int(AttrOutputTokens, u.Completion),
		attribute.Bool(AttrTokensEstimated, u.Estimated),
		attribute.Int(AttrCachedTokens, u.Cached),
		attribute.Int(AttrReasoningTokens, u.Reasoning),
	}
}

// endToolCall records a call's result (nil: none, the run stopped) and
// ends its span. A tool error is a result the model sees, but the span
// still says it failed.
func endToolCall(span trace.Span, res *ToolResult, interrupted bool) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	switch {
	case interrupted:
		span.SetAttributes(attribute.Bool(AttrToolInterrupted, true))
	case res == nil:
		span.SetAttributes(attribute.Bool(AttrToolNoResult, true))
	default:
		origin := res.Origin
		if origin == "" {
			origin = OriginExecuted
		}
		span.SetAttributes(attribute.Bool(AttrToolIsError, res.IsError), attribute.String(AttrToolOrigin, string(origin)))
		if res.IsError {
			span.SetStatus(codes.Error, "the tool returned an error result")
		}
	}
}

// endStep records how a step ended and ends its span.
func endStep(span trace.Span, end loopEnd, done bool) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	how := "continue"
	if done {
		switch end.kind {
		case endCompleted:
			how = "completed"
		case endStepLimit:
			how = "step_limit"
		case endInterrupted:
			how = "interrupted"
		case endStopped:
			how = "stopped"
		case endSuperseded:
			how = "superseded"
		case endRolledBack:
			how = "rolled_back"
		case endFailed:
			how = "failed"
		}
	}
	span.SetAttributes(attribute.String(AttrStepEnd, how))
	if done && end.kind == endFailed && end.err != nil {
		span.SetAttributes(attribute.String(AttrErrorType, errorType(end.err)))
		span.SetStatus(codes.Error, end.err.Error())
	}
}

// errorType is a stable, low-cardinality name for err: the model error
// code, else the run error code.
func errorType(err error) string {
	var me *model.Error
	if errors.As(err, &me) {
		return string(me.Code)
	}
	return ErrorInfo(err).Code
}

// refusalType names why a run was refused before run_started.
func refusalType(err error) string {
	for _, e := range []struct {
		err  error
		name string
	}{
		{ErrInvalidInput, "INVALID_INPUT"},
		{ErrThreadBusy, "THREAD_BUSY"},
		{ErrThreadNotFound, "THREAD_NOT_FOUND"},
		{ErrPendingInterrupt, "PENDING_INTERRUPT"},
		{ErrNoPendingInterrupt, "NO_PENDING_INTERRUPT"},
		{ErrStaleInterrupt, "STALE_INTERRUPT"},
	} {
		if errors.Is(err, e.err) {
			return e.name
		}
	}
	return errorType(err)
}

// setAgentAttrs names the agent and model of a run span once configured.
func setAgentAttrs(span trace.Span, cfg *Config) {
	if !span.IsRecording() {
		return
	}
	agent := cfg.Agent
	if agent == "" {
		agent = "main"
	}
	span.SetAttributes(attribute.String(AttrOperation, "invoke_agent"), attribute.String(AttrAgentName, agent),
		attribute.String(AttrModelKey, cfg.ModelKey), attribute.String(AttrRequestModel, cfg.ProviderModel))
}

// endSubagent records how a subagent invocation ended and ends its span.
func endSubagent(span trace.Span, out SubagentOutcome) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if out.Interrupt != nil {
		span.SetAttributes(attribute.Bool(AttrToolInterrupted, true))
		return
	}
	span.SetAttributes(attribute.String(AttrSubagentStatus, string(out.Status)))
	span.SetAttributes(usageAttrs(out.Usage)...)
	if out.Err != nil {
		span.SetAttributes(attribute.String(AttrErrorType, errorType(out.Err)))
		span.SetStatus(codes.Error, out.Err.Error())
	}
}
