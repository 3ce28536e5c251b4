package agent

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// batch collects the outcomes of one step's calls. Once closed (the
// executor stopped waiting), late outcomes are dropped and emit nothing.
type batch struct {
	mu         sync.Mutex
	closed     bool
	results    []*ToolResult
	interrupts []*Interrupt
	started    []string
}

type batchOut struct {
	results    []*ToolResult
	interrupts []*Interrupt
	started    []string
	stopped    bool
}

// resumePlan routes Resume decisions through the tree of suspended
// contexts: decisions for this context's own requests by call id, and a
// plan per suspended task call.
type resumePlan struct {
	decisions map[string]Decision
	nested    map[string]*resumePlan
}

// SubagentResume carries a suspended subagent and the decisions that
// reach it; the task tool passes it to RunSubagent.
type SubagentResume struct {
	// Snapshot is the saved subagent.
	Snapshot *SubagentSnapshot
	plan     *resumePlan
}

var errToolPanic = errors.New("tool panicked")

// dispatch runs the calls of p that have no result yet, concurrently, and
// waits for them (docs/agent-core.md §2.2 items 6.6–6.7).
func (x *execution) dispatch(ctx context.Context, p *PendingStep, plan *resumePlan, reminders []Reminder) batchOut {
	n := len(p.Calls)
	b := &batch{results: make([]*ToolResult, n), interrupts: make([]*Interrupt, n)}
	lim := x.rc.Limits
	toolSem := make(chan struct{}, lim.MaxParallelTools)
	subSem := make(chan struct{}, lim.MaxParallelSubagents)
	var wg sync.WaitGroup
	for i, c := range p.Calls {
		if plan != nil {
			if r, ok := p.Results[c.ID]; ok {
				b.results[i] = &r
				continue
			}
		}
		var rem []Reminder
		if i == n-1 {
			rem = reminders
		}
		req := &ToolRequest{Call: c, Index: i, Batch: slices.Clone(p.Calls), FinishReason: p.FinishReason, State: x.st, Run: x.rc, batch: b}
		req.started = slices.Contains(p.Started, c.ID)
		if plan != nil {
			if d, ok := plan.decisions[c.ID]; ok {
				req.Decision = &d
				if d.Type == DecisionEdit {
					req.Call.Args = string(d.EditedArgs)
				}
			}
			if snap := p.Nested[c.ID]; snap != nil {
				req.Resume = &SubagentResume{Snapshot: snap, plan: plan.nested[c.ID]}
			}
			if req.Decision == nil && req.Resume == nil {
				x.lg.Error("resumed call has neither a result nor a decision", zap.String("tool-call-id", c.ID))
				b.finish(x, req, ToolResult{Content: fmt.Sprintf("%s failed: internal error", c.Name), IsError: true, Origin: OriginExecuted}, rem)
				continue
			}
		}
		tool, args, bad := x.resolve(req.Call, p.FinishReason)
		if bad != nil {
			_, span := x.startToolCall(ctx, req)
			endToolCall(span, bad, false)
			b.finish(x, req, *bad, rem)
			continue
		}
		req.Tool, req.Call.Args = tool, args
		wg.Add(1)
		go func() {
			defer wg.Done()
			x.runCall(ctx, req, b, rem, toolSem, subSem)
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t := time.NewTimer(lim.CancelGrace)
		select {
		case <-done:
		case <-t.C:
			x.lg.Warn("stopped waiting for tool calls after the cancel grace", zap.Duration("cancel-grace", lim.CancelGrace))
		}
		t.Stop()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return batchOut{
		results:    slices.Clone(b.results),
		interrupts: slices.Clone(b.interrupts),
		started:    slices.Clone(b.started),
		stopped:    ctx.Err() != nil,
	}
}

// runCall runs one call through the WrapTool chain with its timeout,
// turning errors and panics into error results.
func (x *execution) runCall(ctx context.Context, req *ToolRequest, b *batch, rem []Reminder, toolSem, subSem chan struct{}) {
	acquire := func(sem chan struct{}) bool {
		select {
		case sem <- struct{}{}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if req.Tool.Subagent {
		if !acquire(subSem) {
			return
		}
		defer func() { <-subSem }()
	}
	if !acquire(toolSem) {
		return
	}
	defer func() { <-toolSem }()

	// The span starts once the call has its slots: it times the call, not
	// its wait. Whatever the tool calls (sandboxd) nests below it.
	spanCtx, span := x.startToolCall(ctx, req)
	var (
		traced      *ToolResult
		interrupted bool
	)
	defer func() { endToolCall(span, traced, interrupted) }()
	name := req.Call.Name
	timeout := req.Tool.Timeout
	if timeout == 0 {
		timeout = x.rc.Limits.ToolTimeout
	}
	callCtx, cancel := spanCtx, context.CancelFunc(func() {})
	if timeout > 0 {
		callCtx, cancel = context.WithTimeout(spanCtx, timeout)
	}
	defer cancel()
	start := time.Now()
	type ret struct {
		res ToolResult
		err error
	}
	ch := make(chan ret, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				x.lg.Error("tool panicked",
					zap.String("tool", name), zap.String("tool-call-id", req.Call.ID),
					zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
				ch <- ret{err: errToolPanic}
			}
		}()
		res, err := x.toolH(callCtx, req)
		ch <- ret{res, err}
	}()
	var r ret
	timedOut := false
	if timeout > 0 {
		// The watchdog frees the step when a tool ignores its context.
		wd := time.NewTimer(timeout + x.rc.Limits.CancelGrace)
		select {
		case r = <-ch:
		case <-wd.C:
			timedOut = true
		}
		wd.Stop()
	} else {
		r = <-ch
	}
	var in *Interrupt
	if !timedOut && errors.As(r.err, &in) {
		interrupted = true
		b.interrupt(req, in)
		return
	}
	res := r.res
	switch {
	case timedOut || (r.err != nil && errors.Is(callCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil):
		res = ToolResult{Content: fmt.Sprintf("tool %s timed out after %s", name, FormatDuration(timeout)), IsError: true}
	case errors.Is(r.err, errToolPanic):
		res = ToolResult{Content: name + " failed: internal error", IsError: true}
	case ctx.Err() != nil && (r.err != nil || res.IsError):
		// The run stopped and the call failed because of it: no result,
		// the call stays dangling.
		return
	case r.err != nil:
		res = ToolResult{Content: fmt.Sprintf("%s failed: %v", name, r.err), IsError: true}
	}
	res.Duration = time.Since(start)
	traced = &res
	b.finish(x, req, res, rem)
}

// startToolCall starts the agent.tool_call span of req.
func (x *execution) startToolCall(ctx context.Context, req *ToolRequest) (context.Context, trace.Span) {
	return x.rc.tracer().Start(ctx, SpanToolCall, trace.WithAttributes(
		attribute.String(AttrOperation, "execute_tool"), attribute.String(AttrToolName, req.Call.Name),
		attribute.String(AttrToolCallID, req.Call.ID), attribute.String(AttrAgentPath, x.rc.AgentPath),
		attribute.Int(AttrStep, x.rc.Step())))
}

// finish records a call's result and emits tool_call_started (if the tool
// was never invoked), tool_result and the call's follow-up events back to
// back.
func (b *batch) finish(x *execution, req *ToolRequest, res ToolResult, rem []Reminder) {
	if res.Origin == "" {
		res.Origin = OriginExecuted
	}
	res = withReminders(res, rem)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.results[req.Index] = &res
	var ps []Payload
	req.mu.Lock()
	if !req.started {
		req.started = true
		ps = append(ps, ToolCallStarted{ID: req.Call.ID, Name: req.Call.Name, Args: req.Call.Args})
	}
	req.mu.Unlock()
	ps = append(ps, ToolResultEvent{
		ID: req.Call.ID, Name: req.Call.Name, Content: res.Content, IsError: res.IsError,
		ExitCode: res.ExitCode, OffloadedPath: res.OffloadedPath, Origin: res.Origin, Duration: res.Duration,
	})
	ps = append(ps, req.takeAfter()...)
	x.rc.emitAll(ps...)
}

func (b *batch) interrupt(req *ToolRequest, in *Interrupt) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.interrupts[req.Index] = in
	if req.wasStarted() {
		b.started = append(b.started, req.Call.ID)
	}
}

// FormatDuration renders d compactly: 1s, 1m30s, 10m, 2h.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if d >= time.Minute && strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if d >= time.Hour && strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
