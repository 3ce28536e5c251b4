package render

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

// Options configure a Renderer.
type Options struct {
	// Width caps one-line summaries, in runes; 0 means DefaultWidth.
	Width int
}

// Ending says how an event stream ended.
type Ending int

// Stream endings. EndNone means no terminal event has been seen (yet).
const (
	EndNone Ending = iota
	EndFinished
	EndInterrupted
	EndError
)

// Outcome is what a Renderer learned about the run from its terminal event.
type Outcome struct {
	// Ending is which terminal event arrived, if any.
	Ending Ending
	// Status is the run_finished status (EndFinished only).
	Status plumbv1.RunStatus
	// Interrupt is the pending interrupt (EndInterrupted only).
	Interrupt *plumbv1.Interrupted
	// Error is the run error (EndError only).
	Error *plumbv1.RunError
	// ThreadID and RunID come from the events' envelopes.
	ThreadID, RunID string
	// LastSequence is the highest event sequence seen (for Attach).
	LastSequence uint64
}

// Renderer writes a readable live view of a run's events. Feed it every
// event of a stream in order with Event; one Renderer may follow a run
// across Resume segments. It is not safe for concurrent use.
type Renderer struct {
	w     io.Writer
	width int
	err   error

	// midLine is set while the current output line is unfinished; open is
	// the text stream that wrote it.
	midLine bool
	open    streamKey

	streams map[streamKey]*textStream
	calls   map[callKey]string
	subs    map[ctxKey]*subagent
	uses    map[string]int
	writing map[writeKey]bool
	outputs map[callKey]*output
	usage   *plumbv1.TokenUsage
	out     Outcome
}

// ctxKey identifies an agent context of the run.
type ctxKey struct{ path, parent string }

// streamKey identifies one model call's streamed text.
type streamKey struct {
	ctx  ctxKey
	step int32
}

// callKey identifies one tool call.
type callKey struct {
	ctx ctxKey
	id  string
}

// writeKey identifies a tool call the model is writing (its id may not be
// known yet).
type writeKey struct {
	stream streamKey
	index  int32
}

// output is what the view has shown of a running call's output.
type output struct {
	partial string // the line not ended yet
	lines   int
	cut     bool
}

// maxOutputLines caps the output lines shown per call: the view follows a
// command, the result and --json carry everything.
const maxOutputLines = 20

type textStream struct {
	attempt int32
	printed bool
}

// subagent is a subagent invocation the view has seen.
type subagent struct {
	label string
	depth int
}

// New returns a Renderer writing to w.
func New(w io.Writer, opts Options) *Renderer {
	width := opts.Width
	if width <= 0 {
		width = DefaultWidth
	}
	return &Renderer{
		w: w, width: width,
		streams: map[streamKey]*textStream{},
		calls:   map[callKey]string{},
		subs:    map[ctxKey]*subagent{},
		uses:    map[string]int{},
		writing: map[writeKey]bool{},
		outputs: map[callKey]*output{},
	}
}

// Outcome reports the terminal event seen so far.
func (r *Renderer) Outcome() Outcome { return r.out }

// Err is the first write error, if any; once it is set nothing more is
// written.
func (r *Renderer) Err() error { return r.err }

// Flush ends a line of streamed text that is still open, for when the
// stream breaks off without a terminal event.
func (r *Renderer) Flush() error {
	if r.midLine {
		r.write("\n")
		r.midLine = false
	}
	return r.err
}

// Event renders one event and returns the first write error so far.
func (r *Renderer) Event(ev *plumbv1.Event) error {
	if ev.GetSequence() > r.out.LastSequence {
		r.out.LastSequence = ev.GetSequence()
	}
	if id := ev.GetThreadId(); id != "" {
		r.out.ThreadID = id
	}
	if id := ev.GetRunId(); id != "" {
		r.out.RunID = id
	}
	ck := ctxKey{ev.GetAgentPath(), ev.GetParentToolCallId()}
	switch p := ev.GetPayload().(type) {
	case *plumbv1.Event_RunStarted:
		r.runStarted(p.RunStarted)
	case *plumbv1.Event_MessageDelta:
		d := p.MessageDelta
		r.delta(ck, d.GetStep(), d.GetAttempt(), d.GetText())
	case *plumbv1.Event_Message:
		r.message(ck, p.Message)
	case *plumbv1.Event_ToolCallStarted:
		s := CallSummary(p.ToolCallStarted.GetName(), p.ToolCallStarted.GetArgsJson(), r.width)
		r.calls[callKey{ck, p.ToolCallStarted.GetId()}] = s
		r.line(ck, "→ "+s)
	case *plumbv1.Event_ToolCallDelta:
		d := p.ToolCallDelta
		if k := (writeKey{streamKey{ck, d.GetStep()}, d.GetIndex()}); !r.writing[k] && d.GetName() != "" {
			r.writing[k] = true
			r.line(ck, "… "+d.GetName()+" (the model is writing the call)")
		}
	case *plumbv1.Event_ToolOutput:
		r.toolOutput(ck, p.ToolOutput)
	case *plumbv1.Event_ToolResult:
		r.endOutput(ck, p.ToolResult.GetId())
		r.toolResult(ck, p.ToolResult)
	case *plumbv1.Event_TodosUpdated:
		r.lines(ck, Todos(p.TodosUpdated.GetTodos()))
	case *plumbv1.Event_SubagentStarted:
		r.subagentStarted(ck, p.SubagentStarted)
	case *plumbv1.Event_SubagentFinished:
		r.subagentFinished(ck, p.SubagentFinished)
	case *plumbv1.Event_Usage:
		if t := p.Usage.GetRunTotal(); t != nil && ck.parent == "" {
			r.usage = t
		}
	case *plumbv1.Event_Summarized:
		r.line(ck, summarized(p.Summarized))
	case *plumbv1.Event_Steered:
		for _, in := range p.Steered.GetInput() {
			r.line(ck, "» steered: "+FirstLine(in))
		}
	case *plumbv1.Event_SandboxLost:
		r.line(ck, "⚠ sandbox worker "+p.SandboxLost.GetWorker()+" lost: "+FirstLine(p.SandboxLost.GetMessage()))
	case *plumbv1.Event_EgressRequest:
		q := p.EgressRequest.GetRequest()
		r.line(ck, fmt.Sprintf("? egress %s:%d waits for approval (request %s; agentctl egress decide %s %s approve)",
			q.GetHost(), q.GetPort(), q.GetRequestId(), r.out.ThreadID, q.GetRequestId()))
	case *plumbv1.Event_EgressDecided:
		r.line(ck, egressDecided(p.EgressDecided))
	case *plumbv1.Event_Interrupted:
		r.interrupted(p.Interrupted)
	case *plumbv1.Event_Error:
		e := p.Error
		r.out.Ending, r.out.Error = EndError, e
		r.usageLine()
		msg := "■ failed: " + e.GetCode()
		if m := FirstLine(e.GetMessage()); m != "" {
			msg += ": " + m
		}
		if e.GetRetryable() {
			msg += " (retryable)"
		}
		r.line(ctxKey{}, msg)
	case *plumbv1.Event_RunFinished:
		f := p.RunFinished
		r.out.Ending, r.out.Status = EndFinished, f.GetStatus()
		if f.GetUsage() != nil {
			r.usage = f.GetUsage()
		}
		r.usageLine()
		r.line(ctxKey{}, "■ "+finishedText(f.GetStatus()))
	}
	// Reasoning deltas are not shown: the view is for the reply and the
	// actions; --json carries everything.
	return r.err
}

// toolOutput shows the complete lines of a running call's output, each
// under a gutter, up to maxOutputLines per call.
func (r *Renderer) toolOutput(ck ctxKey, o *plumbv1.ToolOutput) {
	k := callKey{ck, o.GetId()}
	st := r.outputs[k]
	if st == nil {
		st = &output{}
		r.outputs[k] = st
	}
	ls := strings.Split(st.partial+o.GetText(), "\n")
	st.partial = ls[len(ls)-1]
	r.outputLines(ck, st, ls[:len(ls)-1])
}

// endOutput shows the unfinished last line of a call's output.
func (r *Renderer) endOutput(ck ctxKey, id string) {
	k := callKey{ck, id}
	if st := r.outputs[k]; st != nil {
		if st.partial != "" {
			r.outputLines(ck, st, []string{st.partial})
		}
		delete(r.outputs, k)
	}
}

func (r *Renderer) outputLines(ck ctxKey, st *output, ls []string) {
	var out []string
	for _, l := range ls {
		switch {
		case st.lines < maxOutputLines:
			out = append(out, "  │ "+Cut(strings.TrimRight(l, "\r"), r.width))
			st.lines++
		case !st.cut:
			out = append(out, "  │ …")
			st.cut = true
		}
	}
	if len(out) > 0 {
		r.lines(ck, out)
	}
}

func (r *Renderer) runStarted(s *plumbv1.RunStarted) {
	var b strings.Builder
	b.WriteString("▶ ")
	if s.GetResumed() {
		b.WriteString("resumed ")
	}
	fmt.Fprintf(&b, "thread %s · run %s", s.GetThreadId(), s.GetRunId())
	if s.GetAgent() != "" {
		b.WriteString(" · agent " + s.GetAgent())
	}
	if s.GetModel() != "" {
		b.WriteString(" · model " + s.GetModel())
	}
	r.out.Ending, r.out.Interrupt, r.out.Error = EndNone, nil, nil
	r.line(ctxKey{}, b.String())
}

// delta streams assistant text. A higher attempt for a step means the
// model call was retried and its earlier text is void: the view says so
// and starts the step's text again on a new line.
func (r *Renderer) delta(ck ctxKey, step, attempt int32, text string) {
	key := streamKey{ck, step}
	st := r.streams[key]
	if st == nil {
		st = &textStream{attempt: attempt}
		r.streams[key] = st
	}
	switch {
	case attempt < st.attempt:
		return
	case attempt > st.attempt:
		st.attempt = attempt
		if st.printed {
			st.printed = false
			r.line(ck, "↻ model call retried (attempt "+strconv.Itoa(int(attempt))+"); its reply starts over")
		}
	}
	if text == "" {
		return
	}
	st.printed = true
	r.text(key, text)
}

// text writes streamed text, putting the context's prefix at the start of
// every line it begins.
func (r *Renderer) text(key streamKey, text string) {
	prefix := r.prefix(key.ctx)
	if r.midLine && r.open != key {
		r.write("\n")
		r.midLine = false
	}
	for text != "" {
		seg, rest, nl := strings.Cut(text, "\n")
		text = rest
		if seg != "" {
			if !r.midLine {
				r.write(prefix)
				r.midLine, r.open = true, key
			}
			r.write(seg)
		}
		if nl {
			if !r.midLine {
				r.write(strings.TrimRight(prefix, " "))
			}
			r.write("\n")
			r.midLine = false
		}
	}
}

func (r *Renderer) message(ck ctxKey, m *plumbv1.AssistantMessage) {
	key := streamKey{ck, m.GetStep()}
	st := r.streams[key]
	delete(r.streams, key)
	switch {
	case st != nil && st.printed:
		if r.midLine && r.open == key {
			r.write("\n")
			r.midLine = false
		}
	case strings.TrimSpace(m.GetText()) != "":
		// No deltas reached us (a replay that started mid-call, or a
		// provider that does not stream): show the whole text now.
		r.lines(ck, strings.Split(strings.TrimRight(m.GetText(), "\n"), "\n"))
	}
	if m.GetFinishReason() == "length" {
		r.line(ck, "(the reply was cut off at the output token limit)")
	}
}

func (r *Renderer) toolResult(ck ctxKey, t *plumbv1.ToolResult) {
	k := callKey{ck, t.GetId()}
	s, ok := r.calls[k]
	if !ok {
		s = t.GetName()
	}
	delete(r.calls, k)
	failed := t.GetIsError() || t.ExitCode != nil && t.GetExitCode() != 0
	mark := "✓ "
	if failed {
		mark = "✗ "
	}
	var notes []string
	if t.ExitCode != nil {
		notes = append(notes, "exit "+strconv.Itoa(int(t.GetExitCode())))
	}
	if t.GetOrigin() == plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_RESPONDED {
		notes = append(notes, originWord(t.GetOrigin()))
	}
	if p := t.GetOffloadedPath(); p != "" {
		notes = append(notes, "saved to "+p)
	}
	line := mark + s
	if len(notes) > 0 {
		line += " (" + strings.Join(notes, ", ") + ")"
	}
	if t.GetIsError() {
		if f := FirstLine(t.GetContent()); f != "" {
			line += " — " + Cut(f, r.width)
		}
	}
	r.line(ck, line)
}

func (r *Renderer) subagentStarted(ck ctxKey, s *plumbv1.SubagentStarted) {
	sub := r.subs[ck]
	if sub == nil {
		name := s.GetSubagent()
		if name == "" {
			name = lastSegment(ck.path)
		}
		r.uses[name]++
		label := name
		if n := r.uses[name]; n > 1 {
			label += "#" + strconv.Itoa(n)
		}
		depth := int(s.GetDepth())
		if depth <= 0 {
			depth = max(strings.Count(ck.path, "/"), 1)
		}
		sub = &subagent{label: label, depth: depth}
		r.subs[ck] = sub
	}
	word := "started"
	if s.GetResumed() {
		word = "resumed"
	}
	line := word + " (depth " + strconv.Itoa(sub.depth) + ")"
	if d := s.GetDescription(); d != "" {
		line += ": " + Cut(OneLine(d), r.width)
	}
	r.line(ck, line)
}

func (r *Renderer) subagentFinished(ck ctxKey, f *plumbv1.SubagentFinished) {
	line := "finished: " + enumWord(f.GetStatus().String(), "SUBAGENT_STATUS_")
	if u := f.GetUsage(); u.GetTotalTokens() > 0 {
		line += ", " + strconv.FormatInt(u.GetTotalTokens(), 10) + " tokens"
	}
	r.line(ck, line)
}

func (r *Renderer) interrupted(in *plumbv1.Interrupted) {
	r.out.Ending, r.out.Interrupt = EndInterrupted, in
	reqs := in.GetRequests()
	r.line(ctxKey{}, "⏸ waiting for a decision on "+plural(len(reqs), "call")+" (interrupt "+in.GetInterruptId()+"):")
	for i, req := range reqs {
		r.line(ctxKey{}, "  "+strconv.Itoa(i+1)+". "+r.requestLine(req))
	}
	r.usageLine()
	r.line(ctxKey{}, "■ interrupted")
}

// requestLine is the one-line form of an interrupt request.
func (r *Renderer) requestLine(req *plumbv1.InterruptRequest) string {
	s := CallSummary(req.GetToolName(), req.GetArgsJson(), r.width)
	if req.GetParentToolCallId() != "" {
		s += " in " + req.GetAgentPath()
	}
	return s + " [" + allowed(req.GetAllowedDecisions()) + "]"
}

func (r *Renderer) usageLine() {
	if r.usage == nil {
		return
	}
	r.line(ctxKey{}, "usage: "+Usage(r.usage))
}

// prefix is what starts each line of an agent context: nothing at the
// root, and indentation by depth plus the subagent's label below it.
func (r *Renderer) prefix(ck ctxKey) string {
	if ck.parent == "" {
		return ""
	}
	sub := r.subs[ck]
	if sub == nil {
		// Joined mid-run (Attach with --after): make do with the path.
		sub = &subagent{label: lastSegment(ck.path), depth: max(strings.Count(ck.path, "/"), 1)}
		r.subs[ck] = sub
	}
	return strings.Repeat("  ", sub.depth) + "[" + sub.label + "] "
}

// line writes one whole line in an agent context, finishing any streamed
// text first.
func (r *Renderer) line(ck ctxKey, s string) {
	r.lines(ck, []string{s})
}

func (r *Renderer) lines(ck ctxKey, ls []string) {
	prefix := r.prefix(ck)
	if r.midLine {
		r.write("\n")
		r.midLine = false
	}
	for _, l := range ls {
		if l == "" {
			r.write(strings.TrimRight(prefix, " ") + "\n")
			continue
		}
		r.write(prefix + l + "\n")
	}
}

func (r *Renderer) write(s string) {
	if r.err != nil || s == "" {
		return
	}
	_, r.err = io.WriteString(r.w, s)
}

// Todos renders a todo list as a checklist: a header line with the count
// done, then one "[x]" (completed), "[>]" (in progress) or "[ ]" line per
// item.
func Todos(todos []*plumbv1.Todo) []string {
	done := 0
	for _, t := range todos {
		if t.GetStatus() == plumbv1.TodoStatus_TODO_STATUS_COMPLETED {
			done++
		}
	}
	out := []string{fmt.Sprintf("todos (%d/%d done)", done, len(todos))}
	for _, t := range todos {
		box := "[ ]"
		switch t.GetStatus() {
		case plumbv1.TodoStatus_TODO_STATUS_COMPLETED:
			box = "[x]"
		case plumbv1.TodoStatus_TODO_STATUS_IN_PROGRESS:
			box = "[>]"
		}
		out = append(out, "  "+box+" "+OneLine(t.GetContent()))
	}
	return out
}

// Usage renders token counts: "prompt P, completion C, total T", plus the
// cached and reasoning counts when non-zero.
func Usage(u *plumbv1.TokenUsage) string {
	s := fmt.Sprintf("prompt %d, completion %d, total %d tokens", u.GetPromptTokens(), u.GetCompletionTokens(), u.GetTotalTokens())
	if u.GetCachedTokens() > 0 {
		s += fmt.Sprintf(" (%d cached)", u.GetCachedTokens())
	}
	if u.GetReasoningTokens() > 0 {
		s += fmt.Sprintf(" (%d reasoning)", u.GetReasoningTokens())
	}
	return s
}

func summarized(s *plumbv1.Summarized) string {
	line := fmt.Sprintf("⋯ summarized %s to free context (%d → %d tokens)",
		plural(int(s.GetMessagesSummarized()), "message"), s.GetTokensBefore(), s.GetTokensAfter())
	if s.GetFallback() {
		line += ", fallback summary"
	}
	if p := s.GetTranscriptPath(); p != "" {
		line += "; transcript " + p
	}
	return line
}

func finishedText(s plumbv1.RunStatus) string {
	switch s {
	case plumbv1.RunStatus_RUN_STATUS_COMPLETED:
		return "completed"
	case plumbv1.RunStatus_RUN_STATUS_MAX_ITERATIONS:
		return "stopped: iteration limit reached"
	case plumbv1.RunStatus_RUN_STATUS_CANCELLED:
		return "cancelled"
	case plumbv1.RunStatus_RUN_STATUS_DEADLINE_EXCEEDED:
		return "stopped: run deadline exceeded"
	}
	return "finished: " + enumWord(s.String(), "RUN_STATUS_")
}

func allowed(ds []plumbv1.DecisionType) string {
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = DecisionName(d)
	}
	return strings.Join(names, "/")
}

func lastSegment(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// egressDecided is the line of an egress_decided event.
func egressDecided(d *plumbv1.EgressDecided) string {
	dest := fmt.Sprintf("%s:%d", d.GetHost(), d.GetPort())
	switch {
	case d.GetAllowed() && d.GetDecidedBy() != "":
		scope := strings.TrimPrefix(d.GetScope().String(), "EGRESS_GRANT_SCOPE_")
		return fmt.Sprintf("✓ egress %s approved for the %s by %s", dest, strings.ToLower(scope), d.GetDecidedBy())
	case d.GetAllowed():
		return "✓ egress " + dest + " approved"
	case d.GetDecidedBy() != "":
		return "✗ egress " + dest + " rejected by " + d.GetDecidedBy()
	}
	return "✗ egress " + dest + " refused: " + FirstLine(d.GetReason())
}
