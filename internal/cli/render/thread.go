package render

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Request renders interrupt request i (1-based) of n in full, for a human
// about to decide it: tool, kind and agent, the description, the arguments
// pretty-printed, and the decisions allowed.
func Request(req *plumbv1.InterruptRequest, i, n int) []string {
	head := fmt.Sprintf("[%d/%d] %s · %s · %s (call %s)", i, n, req.GetToolName(),
		enumWord(req.GetKind().String(), "INTERRUPT_KIND_"), req.GetAgentPath(), req.GetToolCallId())
	out := []string{head}
	if d := strings.TrimSpace(req.GetDescription()); d != "" {
		for l := range strings.SplitSeq(d, "\n") {
			out = append(out, "  "+l)
		}
	}
	out = append(out, "  args:")
	for l := range strings.SplitSeq(PrettyJSON(req.GetArgsJson()), "\n") {
		out = append(out, "    "+l)
	}
	return append(out, "  allowed: "+strings.ReplaceAll(allowed(req.GetAllowedDecisions()), "/", ", "))
}

// Interrupt renders every request of an interrupt with Request, under a
// header naming the interrupt.
func Interrupt(in *plumbv1.Interrupted) []string {
	reqs := in.GetRequests()
	out := []string{"interrupt " + in.GetInterruptId() + ": " + plural(len(reqs), "call") + " waiting for a decision"}
	for i, req := range reqs {
		out = append(out, Request(req, i+1, len(reqs))...)
	}
	return out
}

// Threads writes a table of threads, times in loc.
func Threads(w io.Writer, threads []*plumbv1.Thread, loc *time.Location) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tMESSAGES\tUPDATED\tLAST RUN\tLABELS")
	for _, t := range threads {
		last := "-"
		if lr := t.GetLastRun(); lr != nil {
			last = enumWord(lr.GetStatus().String(), "RUN_STATUS_")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", t.GetId(), threadStatus(t.GetStatus()), t.GetMessageCount(),
			stamp(t.GetUpdatedAt(), loc), last, or(labels(t.GetMetadata()), "-"))
	}
	return tw.Flush()
}

// Agents writes a table of agent profiles.
func Agents(w io.Writer, agents []*plumbv1.AgentInfo, width int) error {
	if width <= 0 {
		width = DefaultWidth
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tMODEL\tSUBAGENTS\tINTERRUPT ON\tDESCRIPTION")
	for _, a := range agents {
		var gated []string
		for _, r := range a.GetInterruptOn() {
			gated = append(gated, r.GetTool())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.GetName(), enumWord(a.GetKind().String(), "AGENT_KIND_"),
			or(a.GetModel(), "-"), or(strings.Join(a.GetSubagents(), ","), "-"), or(strings.Join(gated, ","), "-"),
			Cut(OneLine(a.GetDescription()), width/2))
	}
	return tw.Flush()
}

// Thread writes a thread's metadata, status, usage, last run, todos and
// pending interrupt, and with the FULL view its message log, State files
// and checkpoints. Times are shown in loc.
func Thread(w io.Writer, t *plumbv1.Thread, loc *time.Location, width int) error {
	if width <= 0 {
		width = DefaultWidth
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	kv := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	kv("id", t.GetId())
	kv("status", threadStatus(t.GetStatus()))
	kv("created", stamp(t.GetCreatedAt(), loc))
	kv("updated", stamp(t.GetUpdatedAt(), loc))
	kv("labels", or(labels(t.GetMetadata()), "-"))
	kv("messages", strconv.FormatInt(t.GetMessageCount(), 10))
	kv("sandbox", or(t.GetSandboxId(), "-"))
	if u := t.GetUsage(); u != nil {
		kv("usage", Usage(u))
	}
	if lr := t.GetLastRun(); lr != nil {
		kv("last run", lr.GetRunId()+" "+enumWord(lr.GetStatus().String(), "RUN_STATUS_"))
		kv("  started", stamp(lr.GetStartedAt(), loc))
		if lr.GetFinishedAt() != nil {
			kv("  finished", stamp(lr.GetFinishedAt(), loc))
		}
		if u := lr.GetUsage(); u != nil {
			kv("  usage", Usage(u))
		}
		if f := FirstLine(lr.GetFinalText()); f != "" {
			kv("  final", Cut(f, width))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var out []string
	if todos := t.GetTodos(); len(todos) > 0 {
		out = append(out, Todos(todos)...)
	}
	if in := t.GetPendingInterrupt(); in != nil {
		out = append(out, Interrupt(in)...)
	}
	if msgs := t.GetMessages(); len(msgs) > 0 {
		out = append(out, "message log:")
		for _, m := range msgs {
			out = append(out, message(m, loc, width)...)
		}
	}
	if files := t.GetFiles(); len(files) > 0 {
		out = append(out, "state files:")
		for _, f := range files {
			out = append(out, fmt.Sprintf("  %s  %d bytes  %s", f.GetPath(), f.GetSize(), stamp(f.GetModifiedAt(), loc)))
		}
	}
	if cps := t.GetCheckpoints(); len(cps) > 0 {
		out = append(out, "checkpoints:")
		for _, c := range cps {
			out = append(out, CheckpointLine(c, loc))
		}
	}
	for _, l := range out {
		if _, err := io.WriteString(w, l+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// originWord says how a tool result was produced when the tool did not
// simply run; "" for EXECUTED and UNSPECIFIED.
func originWord(o plumbv1.ToolResultOrigin) string {
	switch o {
	case plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_REJECTED:
		return "rejected"
	case plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_RESPONDED:
		return "answered"
	case plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_BLOCKED:
		return "blocked"
	case plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_INVALID_CALL:
		return "invalid call"
	}
	return ""
}

// message renders one entry of the message log: a header, then the text
// indented, then the tool calls it made.
func message(m *plumbv1.ThreadMessage, loc *time.Location, width int) []string {
	head := fmt.Sprintf("[%d] %s", m.GetIndex(), m.GetRole())
	if m.GetRole() == "tool" {
		mark := "✓"
		if m.GetIsError() {
			mark = "✗"
		}
		head += fmt.Sprintf(" %s %s (call %s)", mark, m.GetName(), m.GetToolCallId())
		if o := originWord(m.GetOrigin()); o != "" {
			head += " " + o
		}
	}
	if s := m.GetSource(); s != "" {
		head += " from " + s
	}
	if m.GetCreatedAt() != nil {
		head += "  " + stamp(m.GetCreatedAt(), loc)
	}
	out := []string{"  " + head}
	if r := strings.TrimSpace(m.GetReasoning()); r != "" {
		out = append(out, "      (reasoning) "+Cut(OneLine(r), width))
	}
	if c := strings.TrimRight(m.GetContent(), "\n"); c != "" {
		for l := range strings.SplitSeq(c, "\n") {
			out = append(out, strings.TrimRight("      "+l, " "))
		}
	}
	for _, tc := range m.GetToolCalls() {
		out = append(out, "      → "+CallSummary(tc.GetName(), tc.GetArgsJson(), width)+" (call "+tc.GetId()+")")
	}
	return out
}

func threadStatus(s plumbv1.ThreadStatus) string {
	return enumWord(s.String(), "THREAD_STATUS_")
}

// labels renders metadata as "k=v" pairs sorted by key.
func labels(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return strings.Join(keys, ",")
}

func stamp(ts *timestamppb.Timestamp, loc *time.Location) string {
	if ts == nil {
		return "-"
	}
	if loc == nil {
		loc = time.UTC
	}
	return ts.AsTime().In(loc).Format(time.DateTime)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Decision renders the answer given to an interrupt request in one line:
// "» approve write_file /a.txt", with the reason, response or new
// arguments after a colon.
func Decision(req *plumbv1.InterruptRequest, d *plumbv1.Decision, width int) string {
	if width <= 0 {
		width = DefaultWidth
	}
	s := "» " + DecisionName(d.GetType()) + " " + CallSummary(req.GetToolName(), req.GetArgsJson(), width)
	if req.GetParentToolCallId() != "" {
		s += " in " + req.GetAgentPath()
	}
	detail := d.GetMessage()
	if d.GetType() == plumbv1.DecisionType_DECISION_TYPE_EDIT {
		detail = "args " + d.GetEditedArgsJson()
	}
	if d.GetIsError() {
		detail += " (as an error)"
	}
	if detail = OneLine(detail); detail != "" {
		s += ": " + Cut(detail, width)
	}
	return s
}

// CheckpointLine is one checkpoint as `threads show --full` and `threads
// checkpoints` print it, with the workspace snapshot taken there, if any.
func CheckpointLine(c *plumbv1.Checkpoint, loc *time.Location) string {
	l := fmt.Sprintf("  %d  run %s  %s  step %d  %d messages  %s", c.GetId(), c.GetRunId(),
		enumWord(c.GetPhase().String(), "CHECKPOINT_PHASE_"), c.GetStep(), c.GetMessageCount(), stamp(c.GetCreatedAt(), loc))
	if c.GetSnapshotId() != "" {
		l += "  snapshot " + c.GetSnapshotId()
	}
	return l
}
