package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent/jsonschema"
	"github.com/plumbhq/plumb/pkg/model"
)

// execution runs one agent context: the step loop of docs/agent-core.md §2.2 items
// 6.1–6.8, shared by root runs and subagents.
type execution struct {
	cfg     *Config
	rc      *RunContext
	st      *State
	lg      *zap.Logger
	tools   map[string]*Tool
	schemas map[string]*jsonschema.Schema
	visible []string // sorted names offered to the model
	defs    []model.ToolDef
	owner   map[string]string // tool name → who provides it
	system  string
	modelH  ModelHandler
	toolH   ToolHandler
	// checkpoint persists the state (root only; nil for subagents).
	checkpoint func(ctx context.Context, phase Phase) error
	// onEdit records an EDIT applied to a stored call (root only).
	onEdit func(CallEdit)
	// redo is the step a takeover (Runner.Continue) finishes first: its
	// model call was committed, its tool results were not.
	redo *PendingStep
	// handOff, closed, stops the loop before its next step (root only;
	// see RunInput.HandOff).
	handOff <-chan struct{}
	// stop, closed, ends the run CANCELLED before its next step (root
	// only; see RunInput.Stop).
	stop <-chan struct{}
	// rollback, closed, ends the run CANCELLED before its next step and
	// discards what it did (root only; see RunInput.Rollback).
	rollback <-chan struct{}
	// steers, when set, reads the run's pending steers before each model
	// call (root only; SteerStore); consume hands the ids of those taken
	// to the next checkpoint.
	steers  func(ctx context.Context) ([]Steer, error)
	consume func(ids []int64)
}

func newExecution(cfg *Config, rc *RunContext, st *State) (*execution, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	x := &execution{
		cfg: cfg, rc: rc, st: st, lg: rc.Logger,
		tools:   make(map[string]*Tool),
		schemas: make(map[string]*jsonschema.Schema),
		owner:   make(map[string]string),
	}
	for _, m := range cfg.Middleware {
		for _, t := range m.Tools() {
			if err := x.addTool(t, "middleware "+m.Name()); err != nil {
				return nil, err
			}
		}
	}
	for _, t := range cfg.Tools {
		if err := x.addTool(t, "the tool registry"); err != nil {
			return nil, err
		}
	}
	x.settleTools()
	x.modelH = wrapModel(cfg.Middleware, x.callModel)
	x.toolH = wrapTool(cfg.Middleware, x.callTool)
	return x, nil
}

// addTool registers t unless the allow-list filters it out.
func (x *execution) addTool(t Tool, from string) error {
	if t.Name == "" || t.Func == nil {
		return fmt.Errorf("%w: %s provides a tool without a name or function", ErrInvalidConfig, from)
	}
	if prev, ok := x.owner[t.Name]; ok {
		return fmt.Errorf("%w: tool %q is provided by both %s and %s", ErrInvalidConfig, t.Name, prev, from)
	}
	x.owner[t.Name] = from
	if x.cfg.Allow != nil && !x.cfg.Allow(t.Name) {
		return nil
	}
	enforced := t.Schema
	if len(t.ValidationSchema) > 0 {
		enforced = t.ValidationSchema
	}
	s, err := jsonschema.Compile(enforced)
	if err != nil {
		return fmt.Errorf("%w: tool %s: %v", ErrInvalidConfig, t.Name, err)
	}
	x.tools[t.Name] = &t
	x.schemas[t.Name] = s
	if !t.Hidden {
		x.visible = append(x.visible, t.Name)
	}
	return nil
}

// settleTools sorts the visible tools and composes the definitions and
// the system prompt from them.
func (x *execution) settleTools() {
	sort.Strings(x.visible)
	x.defs = make([]model.ToolDef, 0, len(x.visible))
	for _, name := range x.visible {
		x.defs = append(x.defs, x.tools[name].Definition())
	}
	if x.cfg.SystemPrompt != nil {
		x.system = x.cfg.SystemPrompt(x.rc, slices.Clone(x.defs))
	}
}

// provideTools asks every ToolProvider of the stack for this segment's
// tools and adds them. The returned release (never nil) ends what the
// providers hold; call it when the context's segment ends.
func (x *execution) provideTools(ctx context.Context) (func(), error) {
	var releases []func()
	release := func() {
		for i := len(releases) - 1; i >= 0; i-- {
			releases[i]()
		}
	}
	added := false
	for _, m := range x.cfg.Middleware {
		p, ok := m.(ToolProvider)
		if !ok {
			continue
		}
		ts, rel, err := p.RunTools(ctx, x.rc)
		if rel != nil {
			releases = append(releases, rel)
		}
		if err != nil {
			return release, &hookError{"run_tools", m.Name(), err}
		}
		for _, t := range ts {
			if err := x.addTool(t, "middleware "+m.Name()); err != nil {
				return release, &hookError{"run_tools", m.Name(), err}
			}
			added = true
		}
	}
	if added {
		x.settleTools()
	}
	return release, nil
}

type endKind int

const (
	endCompleted endKind = iota
	endStepLimit
	endInterrupted
	endStopped // the context ended: cancellation or deadline
	endFailed
	endHandedOff  // stopped at a checkpoint to be continued elsewhere
	endSuperseded // stopped at a checkpoint for a newer run (RunInput.Stop)
	endRolledBack // stopped and discarded for a newer run (RunInput.Rollback)
)

type loopEnd struct {
	kind endKind
	err  error // endFailed
}

// storageError marks a failed checkpoint write.
type storageError struct{ err error }

func (e *storageError) Error() string { return "storage: " + e.err.Error() }
func (e *storageError) Unwrap() error { return e.err }

// hookError marks a failed middleware hook.
type hookError struct {
	hook, middleware string
	err              error
}

func (e *hookError) Error() string {
	return fmt.Sprintf("middleware %s: %s: %v", e.middleware, e.hook, e.err)
}
func (e *hookError) Unwrap() error { return e.err }

func (x *execution) save(ctx context.Context, phase Phase) error {
	if x.checkpoint == nil {
		return nil
	}
	if err := x.checkpoint(ctx, phase); err != nil {
		return &storageError{err}
	}
	return nil
}

func (x *execution) beforeAgent(ctx context.Context) error {
	for _, m := range x.cfg.Middleware {
		if err := m.BeforeAgent(ctx, x.rc, x.st); err != nil {
			return &hookError{"before_agent", m.Name(), err}
		}
	}
	return nil
}

func (x *execution) afterAgent(ctx context.Context) error {
	for i := len(x.cfg.Middleware) - 1; i >= 0; i-- {
		m := x.cfg.Middleware[i]
		if err := m.AfterAgent(ctx, x.rc, x.st); err != nil {
			return &hookError{"after_agent", m.Name(), err}
		}
	}
	return nil
}

// loop runs steps until the context completes, stops or pauses. With a
// plan, it first finishes the pending step with the plan's decisions.
func (x *execution) loop(ctx context.Context, plan *resumePlan) loopEnd {
	if plan != nil {
		if end, done := x.resumeStep(ctx, plan); done {
			return end
		}
	}
	if p := x.redo; p != nil {
		x.redo = nil
		if end, done := x.redoStep(ctx, p); done {
			return end
		}
	}
	for {
		if x.rc.Step() >= x.rc.Limits.MaxIterations {
			return loopEnd{kind: endStepLimit}
		}
		if ctx.Err() != nil {
			return loopEnd{kind: endStopped}
		}
		select {
		case <-x.rollback:
			// Checked first: a rollback discards the run anyway.
			return loopEnd{kind: endRolledBack}
		default:
		}
		select {
		case <-x.handOff:
			// The previous step is committed: stop here.
			return loopEnd{kind: endHandedOff}
		case <-x.stop:
			// The previous step is committed: end here, keeping it.
			return loopEnd{kind: endSuperseded}
		default:
		}
		if end, done := x.takeSteers(ctx); done {
			return end
		}
		if end, done := x.step(ctx); done {
			return end
		}
	}
}

// takeSteers appends the run's pending steers (user input sent to it
// while it runs) before its next model call, commits them in a
// checkpoint that consumes them (once), and emits steered for each.
func (x *execution) takeSteers(ctx context.Context) (loopEnd, bool) {
	if x.steers == nil {
		return loopEnd{}, false
	}
	pending, err := x.steers(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return loopEnd{kind: endStopped}, true
		}
		return loopEnd{kind: endFailed, err: &storageError{fmt.Errorf("read the run's steers: %w", err)}}, true
	}
	if len(pending) == 0 {
		return loopEnd{}, false
	}
	now := x.rc.Now()
	ids := make([]int64, 0, len(pending))
	for _, st := range pending {
		ids = append(ids, st.ID)
		for _, text := range st.Input {
			x.st.Append(Message{Message: model.Message{Role: model.RoleUser, Content: text}, Source: SourceSteer, CreatedAt: now})
		}
	}
	x.consume(ids)
	if err := x.save(ctx, PhaseInput); err != nil {
		return loopEnd{kind: endFailed, err: err}, true
	}
	for _, st := range pending {
		x.rc.Emit(Steered{Input: slices.Clone(st.Input)})
	}
	x.lg.Info("steered: user input delivered to the running run", zap.Int("steers", len(pending)))
	return loopEnd{}, false
}

// startStep starts the agent.step span of step n.
func (x *execution) startStep(ctx context.Context, n int, resumed bool) (context.Context, trace.Span) {
	return x.rc.tracer().Start(ctx, SpanStep, trace.WithAttributes(
		attribute.Int(AttrStep, n), attribute.String(AttrAgentPath, x.rc.AgentPath), attribute.Bool(AttrResumed, resumed)))
}

// resumeStep finishes the step a Resume continues (its model call was made
// in an earlier segment).
func (x *execution) resumeStep(ctx context.Context, plan *resumePlan) (end loopEnd, done bool) {
	ctx, span := x.startStep(ctx, x.rc.Step(), true)
	defer func() { endStep(span, end, done) }()
	return x.finishBatch(ctx, x.st.Pending(), plan, nil)
}

// redoStep runs again the tool calls of a step whose model call was
// committed but whose results were not (a takeover; at least once).
func (x *execution) redoStep(ctx context.Context, p *PendingStep) (end loopEnd, done bool) {
	ctx, span := x.startStep(ctx, x.rc.Step(), true)
	defer func() { endStep(span, end, done) }()
	return x.finishBatch(ctx, p, nil, p.Reminders)
}

// step runs one step: BeforeModel, the model call, then its tool calls.
// done is true when the loop must end.
func (x *execution) step(ctx context.Context) (end loopEnd, done bool) {
	ctx, span := x.startStep(ctx, x.rc.Step()+1, false)
	defer func() { endStep(span, end, done) }()
	for _, m := range x.cfg.Middleware {
		if err := m.BeforeModel(ctx, x.rc, x.st); err != nil {
			if ctx.Err() != nil {
				return loopEnd{kind: endStopped}, true
			}
			return loopEnd{kind: endFailed, err: &hookError{"before_model", m.Name(), err}}, true
		}
	}
	resp, err := x.callChain(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return loopEnd{kind: endStopped}, true
		}
		return loopEnd{kind: endFailed, err: err}, true
	}
	reminders := x.rc.takeReminders()
	msg := Message{Message: resp.Message, CreatedAt: x.rc.Now()}
	msg.Role = model.RoleAssistant
	index := x.st.Len()
	x.st.Append(msg)
	step := x.rc.nextStep()
	calls := msg.ToolCalls
	var p *PendingStep
	if len(calls) > 0 {
		p = &PendingStep{AssistantIndex: index, Calls: slices.Clone(calls), FinishReason: resp.FinishReason, Reminders: reminders}
		x.st.setPending(p.clone())
	}
	total := x.rc.accountUsage(resp.Usage)
	if err := x.save(ctx, PhaseModel); err != nil {
		return loopEnd{kind: endFailed, err: err}, true
	}
	x.rc.Emit(AssistantMessage{
		Text: msg.Content, Reasoning: msg.ReasoningContent, ToolCalls: slices.Clone(calls),
		Step: step, FinishReason: resp.FinishReason,
	})
	x.rc.Emit(UsageReport{Call: resp.Usage, Estimated: resp.Usage.Estimated, Purpose: PurposeAgent, Model: x.cfg.ProviderModel, RunTotal: total})
	if len(calls) == 0 {
		if err := x.afterAgent(ctx); err != nil {
			return loopEnd{kind: endFailed, err: err}, true
		}
		return loopEnd{kind: endCompleted}, true
	}
	return x.finishBatch(ctx, p, nil, reminders)
}

// callChain builds the request from State and runs the WrapModel chain,
// once more with a rebuilt request when a middleware asks for it
// (RetryModelCall).
func (x *execution) callChain(ctx context.Context) (model.Response, error) {
	call := func(retry bool) (model.Response, error) {
		x.rc.takeReminders() // reminders belong to the batch of this call
		return x.modelH(ctx, &ModelRequest{
			System:      x.system,
			Messages:    ModelMessages(x.st.Effective()),
			Tools:       slices.Clone(x.defs),
			MaxTokens:   x.cfg.MaxTokens,
			Temperature: x.cfg.Temperature,
			State:       x.st,
			Run:         x.rc,
			Retry:       retry,
		})
	}
	resp, err := call(false)
	var retry *RetryModelCall
	if errors.As(err, &retry) && ctx.Err() == nil {
		x.lg.Info("retrying the model call with a request rebuilt from the state", zap.Error(retry.Err))
		resp, err = call(true)
	}
	if errors.As(err, &retry) {
		err = retry.Err
	}
	return resp, err
}

// finishBatch dispatches a step's calls (or, with a plan, the calls still
// open in a pending step), appends the results and checkpoints. done is
// true when the loop must end.
func (x *execution) finishBatch(ctx context.Context, p *PendingStep, plan *resumePlan, reminders []Reminder) (loopEnd, bool) {
	if p == nil {
		return loopEnd{kind: endFailed, err: errors.New("resume without a pending step")}, true
	}
	if plan != nil {
		reminders = p.Reminders
		x.applyEdits(p, plan)
	}
	out := x.dispatch(ctx, p, plan, reminders)
	if out.stopped {
		// Results that arrived in time are appended in call order; the
		// others stay dangling for PatchToolCalls.
		x.appendResults(p.Calls, out.results)
		x.st.setPending(nil)
		return loopEnd{kind: endStopped}, true
	}
	if slices.ContainsFunc(out.interrupts, func(in *Interrupt) bool { return in != nil }) {
		np := p.clone()
		np.Results = make(map[string]ToolResult)
		np.Requests = nil
		np.Nested = nil
		np.Reminders = nil
		np.Started = out.started
		for i, c := range p.Calls {
			if r := out.results[i]; r != nil {
				np.Results[c.ID] = *r
				continue
			}
			in := out.interrupts[i]
			if in == nil {
				continue
			}
			if i == len(p.Calls)-1 {
				np.Reminders = reminders
			}
			if in.Nested != nil {
				if np.Nested == nil {
					np.Nested = make(map[string]*SubagentSnapshot)
				}
				np.Nested[c.ID] = in.Nested
				continue
			}
			np.Requests = append(np.Requests, x.request(c, in))
		}
		x.st.setPending(np)
		return loopEnd{kind: endInterrupted}, true
	}
	x.appendResults(p.Calls, out.results)
	x.st.setPending(nil)
	if err := x.save(ctx, PhaseTools); err != nil {
		return loopEnd{kind: endFailed, err: err}, true
	}
	return loopEnd{}, false
}

// applyEdits replaces the stored arguments of calls decided with EDIT
// (docs/agent-core.md §6.4: the stored assistant call gets the edited args).
func (x *execution) applyEdits(p *PendingStep, plan *resumePlan) {
	for i, c := range p.Calls {
		d, ok := plan.decisions[c.ID]
		if !ok || d.Type != DecisionEdit {
			continue
		}
		args := string(d.EditedArgs)
		p.Calls[i].Args = args
		if x.st.replaceCallArgs(p.AssistantIndex, c.ID, args) && x.onEdit != nil {
			x.onEdit(CallEdit{MessageIndex: p.AssistantIndex, CallID: c.ID, Args: args})
		}
	}
	x.st.setPending(p.clone())
}

func (x *execution) request(c model.ToolCall, in *Interrupt) InterruptRequest {
	r := InterruptRequest{
		ToolCallID:       c.ID,
		AgentPath:        x.rc.AgentPath,
		ParentToolCallID: x.rc.ParentToolCallID,
		Kind:             in.Kind,
		ToolName:         c.Name,
		Args:             c.Args,
		Description:      in.Description,
		Allowed:          slices.Clone(in.Allowed),
	}
	if r.Kind == "" {
		r.Kind = InterruptApproval
	}
	if r.Description == "" {
		r.Description = "Approval required: " + c.Name
	}
	if len(r.Allowed) == 0 {
		r.Allowed = AllDecisions()
	}
	if t := x.tools[c.Name]; t != nil {
		r.ArgsSchema = slices.Clone(t.Definition().Parameters)
	}
	return r
}

func (x *execution) appendResults(calls []model.ToolCall, results []*ToolResult) {
	var msgs []Message
	now := x.rc.Now()
	for i, c := range calls {
		r := results[i]
		if r == nil {
			continue
		}
		msgs = append(msgs, Message{
			Message:   model.Message{Role: model.RoleTool, Content: r.Content, ToolCallID: c.ID, Name: c.Name, Images: r.Images},
			IsError:   r.IsError,
			Origin:    originOf(r),
			CreatedAt: now,
		})
	}
	x.st.Append(msgs...)
}

// callModel is the model endpoint: the request on the wire, deltas as
// events. Whatever the middleware did to the messages, every tool call
// goes out paired with exactly one result: providers reject anything
// else, which would leave the thread unusable.
func (x *execution) callModel(ctx context.Context, req *ModelRequest) (model.Response, error) {
	paired, unanswered, orphans := PairToolCalls(req.Messages)
	if unanswered > 0 || orphans > 0 {
		x.lg.Debug("paired tool calls and results in the model request",
			zap.Int("unanswered-calls", unanswered), zap.Int("orphan-results", orphans))
	}
	msgs := make([]model.Message, 0, len(paired)+1)
	if req.System != "" {
		msgs = append(msgs, model.Message{Role: model.RoleSystem, Content: req.System})
	}
	msgs = append(msgs, paired...)
	step := x.rc.Step() + 1
	mreq := model.Request{
		Model:       req.Model,
		Messages:    msgs,
		Tools:       req.Tools,
		MaxTokens:   req.MaxTokens,
		Temperature: req.Temperature,
		Metadata:    model.Metadata{RunID: x.rc.RunID, AgentPath: x.rc.AgentPath, ParentToolCallID: x.rc.ParentToolCallID},
	}
	name := req.Model
	if name == "" {
		name = x.cfg.ProviderModel
	}
	attrs := []attribute.KeyValue{
		attribute.String(AttrOperation, "chat"), attribute.String(AttrRequestModel, name), attribute.String(AttrModelKey, x.rc.ModelKey),
		attribute.String(AttrAgentPath, x.rc.AgentPath), attribute.Int(AttrStep, step),
	}
	if p := x.cfg.Provider; p != "" {
		attrs = append(attrs, attribute.String(AttrProviderName, p), attribute.String(AttrSystem, p))
	}
	ctx, span := x.rc.tracer().Start(ctx, SpanModelCall, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	args := newArgStream(x.rc, step)
	resp, err := x.cfg.Model.Generate(ctx, mreq, func(d model.Delta) {
		attempt := max(d.Attempt, 1)
		if d.Reasoning != "" {
			x.rc.Emit(ReasoningDelta{Text: d.Reasoning, Step: step, Attempt: attempt})
		}
		if d.Text != "" {
			x.rc.Emit(MessageDelta{Text: d.Text, Step: step, Attempt: attempt})
		}
		if len(d.ToolCalls) > 0 {
			args.add(attempt, d.ToolCalls)
		}
	})
	args.flushAll()
	endModelCall(span, resp, err)
	return resp, err
}

// callTool is the tool endpoint: tool_call_started, then the tool.
func (x *execution) callTool(ctx context.Context, req *ToolRequest) (ToolResult, error) {
	// A client tool never runs here: it interrupts, or returns the decided
	// result, so tool_call_started goes with that result (docs/agent-core.md §8, ordering rule 3).
	if !req.Tool.Client {
		req.MarkStarted()
	}
	return req.Tool.Func(ctx, req)
}

// resolve applies docs/agent-core.md §4.3 to a call before dispatch: unknown tool,
// arguments that are not a JSON object, schema violations. It returns the
// tool and the (possibly coerced) arguments, or an error result.
func (x *execution) resolve(c model.ToolCall, finishReason string) (*Tool, string, *ToolResult) {
	t := x.tools[c.Name]
	if t == nil {
		content := fmt.Sprintf("Unknown tool %q. Available tools: %s.", c.Name, strings.Join(x.visible, ", "))
		for _, m := range x.cfg.Middleware {
			if e, ok := m.(UnknownToolExplainer); ok {
				if why, ok := e.ExplainUnknownTool(c.Name); ok {
					content = why
					break
				}
			}
		}
		return nil, "", &ToolResult{Content: content, IsError: true, Origin: OriginInvalidCall}
	}
	if t.Hidden {
		return t, c.Args, nil
	}
	args := c.Args
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	format := func(text string) string {
		if t.InvalidArgs != nil {
			return t.InvalidArgs(text)
		}
		return text
	}
	invalid := func(reason string) *ToolResult {
		text := fmt.Sprintf("Invalid arguments for %s: %s. Send a JSON object matching the tool schema.", c.Name, reason)
		if finishReason == model.FinishLength {
			text += " (the response was cut off at the output token limit)"
		}
		return &ToolResult{Content: format(text), IsError: true, Origin: OriginInvalidCall}
	}
	v, err := jsonschema.Decode([]byte(args))
	if err != nil {
		return nil, "", invalid(err.Error())
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, "", invalid("the arguments are not a JSON object")
	}
	out, err := x.schemas[c.Name].ValidateJSON([]byte(args))
	if err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return nil, "", &ToolResult{
				Content: format(fmt.Sprintf("Invalid arguments for %s: %s.", c.Name, ve.Error())),
				IsError: true, Origin: OriginInvalidCall,
			}
		}
		return nil, "", invalid(err.Error())
	}
	return t, string(out), nil
}
