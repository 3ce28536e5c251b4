package render

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name.golden, or rewrites the file with
// -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

// at is an agent context that events are produced in.
type at struct{ path, parent string }

var root = at{"main", ""}

func (a at) ev(p any) *plumbv1.Event {
	e := &plumbv1.Event{AgentPath: a.path, ParentToolCallId: a.parent}
	switch p := p.(type) {
	case *plumbv1.RunStarted:
		e.Payload = &plumbv1.Event_RunStarted{RunStarted: p}
	case *plumbv1.MessageDelta:
		e.Payload = &plumbv1.Event_MessageDelta{MessageDelta: p}
	case *plumbv1.ReasoningDelta:
		e.Payload = &plumbv1.Event_ReasoningDelta{ReasoningDelta: p}
	case *plumbv1.AssistantMessage:
		e.Payload = &plumbv1.Event_Message{Message: p}
	case *plumbv1.ToolCallStarted:
		e.Payload = &plumbv1.Event_ToolCallStarted{ToolCallStarted: p}
	case *plumbv1.ToolCallDelta:
		e.Payload = &plumbv1.Event_ToolCallDelta{ToolCallDelta: p}
	case *plumbv1.ToolOutput:
		e.Payload = &plumbv1.Event_ToolOutput{ToolOutput: p}
	case *plumbv1.ToolResult:
		e.Payload = &plumbv1.Event_ToolResult{ToolResult: p}
	case *plumbv1.TodosUpdated:
		e.Payload = &plumbv1.Event_TodosUpdated{TodosUpdated: p}
	case *plumbv1.SubagentStarted:
		e.Payload = &plumbv1.Event_SubagentStarted{SubagentStarted: p}
	case *plumbv1.SubagentFinished:
		e.Payload = &plumbv1.Event_SubagentFinished{SubagentFinished: p}
	case *plumbv1.Interrupted:
		e.Payload = &plumbv1.Event_Interrupted{Interrupted: p}
	case *plumbv1.UsageReport:
		e.Payload = &plumbv1.Event_Usage{Usage: p}
	case *plumbv1.Summarized:
		e.Payload = &plumbv1.Event_Summarized{Summarized: p}
	case *plumbv1.RunError:
		e.Payload = &plumbv1.Event_Error{Error: p}
	case *plumbv1.RunFinished:
		e.Payload = &plumbv1.Event_RunFinished{RunFinished: p}
	case *plumbv1.Steered:
		e.Payload = &plumbv1.Event_Steered{Steered: p}
	default:
		panic("unknown payload")
	}
	return e
}

func (a at) sub(name string, callID string) at { return at{a.path + "/" + name, callID} }

func (a at) deltas(step int32, parts ...string) []*plumbv1.Event {
	var out []*plumbv1.Event
	for _, p := range parts {
		out = append(out, a.ev(&plumbv1.MessageDelta{Text: p, Step: step, Attempt: 1}))
	}
	return out
}

func (a at) msg(step int32, text string, calls ...*plumbv1.ToolCall) *plumbv1.Event {
	reason := "stop"
	if len(calls) > 0 {
		reason = "tool_calls"
	}
	return a.ev(&plumbv1.AssistantMessage{Text: text, Step: step, ToolCalls: calls, FinishReason: reason})
}

func (a at) call(id, name, args string) *plumbv1.Event {
	return a.ev(&plumbv1.ToolCallStarted{Id: id, Name: name, ArgsJson: args})
}

func (a at) ok(id, name, content string) *plumbv1.Event {
	return a.ev(&plumbv1.ToolResult{Id: id, Name: name, Content: content, Origin: plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_EXECUTED})
}

func (a at) fail(id, name, content string) *plumbv1.Event {
	return a.ev(&plumbv1.ToolResult{Id: id, Name: name, Content: content, IsError: true, Origin: plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_EXECUTED})
}

func (a at) usage(p, c int64, total *plumbv1.TokenUsage) *plumbv1.Event {
	return a.ev(&plumbv1.UsageReport{Call: tokens(p, c), Purpose: plumbv1.UsagePurpose_USAGE_PURPOSE_AGENT, Model: "gpt-test", RunTotal: total})
}

func tc(id, name, args string) *plumbv1.ToolCall {
	return &plumbv1.ToolCall{Id: id, Name: name, ArgsJson: args}
}

func tokens(p, c int64) *plumbv1.TokenUsage {
	return &plumbv1.TokenUsage{PromptTokens: p, CompletionTokens: c, TotalTokens: p + c}
}

func started(resumed bool) *plumbv1.Event {
	return root.ev(&plumbv1.RunStarted{ThreadId: "th-1", RunId: "run-1", Agent: "main", Model: "smart", Resumed: resumed})
}

func finished(status plumbv1.RunStatus, text string, u *plumbv1.TokenUsage) *plumbv1.Event {
	return root.ev(&plumbv1.RunFinished{Status: status, FinalText: text, Usage: u})
}

func todos(items ...string) *plumbv1.TodosUpdated {
	st := map[byte]plumbv1.TodoStatus{'x': plumbv1.TodoStatus_TODO_STATUS_COMPLETED, '>': plumbv1.TodoStatus_TODO_STATUS_IN_PROGRESS, ' ': plumbv1.TodoStatus_TODO_STATUS_PENDING}
	out := &plumbv1.TodosUpdated{}
	for _, it := range items {
		out.Todos = append(out.Todos, &plumbv1.Todo{Status: st[it[0]], Content: it[2:]})
	}
	return out
}

// flat joins events and slices of events into one stream and numbers it.
func flat(parts ...any) []*plumbv1.Event {
	var out []*plumbv1.Event
	for _, p := range parts {
		switch p := p.(type) {
		case *plumbv1.Event:
			out = append(out, p)
		case []*plumbv1.Event:
			out = append(out, p...)
		default:
			panic("flat: bad part")
		}
	}
	for i, e := range out {
		e.Sequence = uint64(i + 1)
		e.RunId, e.ThreadId = "run-1", "th-1"
		e.Timestamp = timestamppb.New(time.Date(2026, 11, 22, 10, 0, i, 0, time.UTC))
	}
	return out
}

var (
	completed = plumbv1.RunStatus_RUN_STATUS_COMPLETED
	approve   = plumbv1.DecisionType_DECISION_TYPE_APPROVE
	edit      = plumbv1.DecisionType_DECISION_TYPE_EDIT
	reject    = plumbv1.DecisionType_DECISION_TYPE_REJECT
	respond   = plumbv1.DecisionType_DECISION_TYPE_RESPOND
)

func exit(n int32) *int32 { return &n }

// scenarios are the event sequences rendered against golden files.
func scenarios() map[string][]*plumbv1.Event {
	researcher := root.sub("researcher", "t1")
	explorer := root.sub("explore", "t2")
	nested := researcher.sub("explore", "r1")
	return map[string][]*plumbv1.Event{
		"plain_text": flat(
			started(false),
			root.ev(&plumbv1.ReasoningDelta{Text: "thinking...", Step: 1, Attempt: 1}),
			root.deltas(1, "Hello", ", world!", "\n\nHere is a second", " paragraph."),
			root.msg(1, "Hello, world!\n\nHere is a second paragraph."),
			root.usage(120, 14, tokens(120, 14)),
			finished(completed, "Hello, world!\n\nHere is a second paragraph.", tokens(120, 14)),
		),
		"tool_streams": flat(
			started(false),
			root.ev(&plumbv1.ToolCallDelta{Index: 0, Id: "c1", Name: "write_file", Args: `{"file_path":"/a.md",`, Step: 1, Attempt: 1}),
			root.ev(&plumbv1.ToolCallDelta{Index: 0, Args: `"content":"# A\n"}`, Step: 1, Attempt: 1}),
			root.ev(&plumbv1.ToolCallDelta{Index: 1, Id: "c2", Name: "execute", Args: `{"command":"make"}`, Step: 1, Attempt: 1}),
			root.msg(1, "", tc("c1", "write_file", `{"file_path":"/a.md","content":"# A\n"}`), tc("c2", "execute", `{"command":"make"}`)),
			root.call("c1", "write_file", `{"file_path":"/a.md","content":"# A\n"}`),
			root.call("c2", "execute", `{"command":"make"}`),
			root.ok("c1", "write_file", "Wrote /a.md (1 line)."),
			root.ev(&plumbv1.ToolOutput{Id: "c2", Name: "execute", Text: "cc -o a a.c\ncc -o b"}),
			root.ev(&plumbv1.ToolOutput{Id: "c2", Name: "execute", Text: " b.c\n" + strings.Repeat("warning: x\n", 25) + "done"}),
			root.ev(&plumbv1.ToolResult{Id: "c2", Name: "execute", Content: "…", ExitCode: exit(0), Origin: plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_EXECUTED}),
			root.deltas(2, "Built."),
			root.msg(2, "Built."),
			finished(completed, "Built.", tokens(10, 2)),
		),
		"parallel_tools": flat(
			started(false),
			root.deltas(1, "Let me look around."),
			root.msg(1, "Let me look around.",
				tc("c1", "read_file", `{"file_path":"/src/main.go"}`),
				tc("c2", "execute", `{"command":"go test ./...\n  -race"}`),
				tc("c3", "write_file", `{"file_path":"/notes.md","content":"# Notes\nlong text"}`),
				tc("c4", "grep", `{"pattern":"TODO","path":"/src"}`),
				tc("c5", "fetch_url", `{"url":"https://example.com/a/very/long/path/that/goes/on/and/on/and/on/and/keeps/going/until/it/has/to/be/cut/somewhere"}`)),
			root.usage(500, 80, tokens(500, 80)),
			root.call("c1", "read_file", `{"file_path":"/src/main.go"}`),
			root.call("c2", "execute", `{"command":"go test ./...\n  -race"}`),
			root.call("c3", "write_file", `{"file_path":"/notes.md","content":"# Notes\nlong text"}`),
			root.call("c4", "grep", `{"pattern":"TODO","path":"/src"}`),
			root.call("c5", "fetch_url", `{"url":"https://example.com/a/very/long/path/that/goes/on/and/on/and/on/and/keeps/going/until/it/has/to/be/cut/somewhere"}`),
			root.ok("c3", "write_file", "Wrote /notes.md (2 lines)."),
			root.fail("c1", "read_file", "\nError: file not found: /src/main.go\nDid you mean /src/app.go?"),
			root.ev(&plumbv1.ToolResult{Id: "c2", Name: "execute", Content: "FAIL\nexit code 1", ExitCode: exit(1), Origin: plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_EXECUTED}),
			root.ev(&plumbv1.ToolResult{Id: "c4", Name: "grep", Content: "big", OffloadedPath: "/large_tool_results/c4", Origin: plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_EXECUTED}),
			root.fail("c5", "fetch_url", "fetch_url failed: timeout"),
			root.deltas(2, "The tests fail; see notes."),
			root.msg(2, "The tests fail; see notes."),
			root.usage(900, 20, tokens(1400, 100)),
			finished(completed, "The tests fail; see notes.", tokens(1400, 100)),
		),
		"todos": flat(
			started(false),
			root.msg(1, "", tc("w1", "write_todos", `{"todos":[{"content":"Read the code","status":"in_progress"},{"content":"Fix the bug","status":"pending"},{"content":"Run the tests","status":"pending"}]}`)),
			root.call("w1", "write_todos", `{"todos":[{"content":"Read the code","status":"in_progress"},{"content":"Fix the bug","status":"pending"},{"content":"Run the tests","status":"pending"}]}`),
			root.ok("w1", "write_todos", "Todo list updated (3 items: 2 pending, 1 in progress, 0 completed)."),
			root.ev(todos("> Read the code", "  Fix the bug", "  Run the tests")),
			root.msg(2, "", tc("w2", "write_todos", `{"todos":[]}`)),
			root.call("w2", "write_todos", `{"todos":[{"content":"Read the code","status":"completed"},{"content":"Fix the bug","status":"in_progress"},{"content":"Run the tests","status":"pending"}]}`),
			root.ok("w2", "write_todos", "Todo list updated."),
			root.ev(todos("x Read the code", "> Fix the bug", "  Run the tests")),
			root.deltas(3, "Working on it."),
			root.msg(3, "Working on it."),
			finished(plumbv1.RunStatus_RUN_STATUS_MAX_ITERATIONS, "Working on it.", tokens(3000, 200)),
		),
		"subagents": flat(
			started(false),
			root.deltas(1, "Delegating."),
			root.msg(1, "Delegating.",
				tc("t1", "task", `{"subagent_type":"researcher","description":"Find where the parser\nhandles errors."}`),
				tc("t2", "task", `{"subagent_type":"explore","description":"List the repository layout."}`)),
			root.call("t1", "task", `{"subagent_type":"researcher","description":"Find where the parser\nhandles errors."}`),
			root.call("t2", "task", `{"subagent_type":"explore","description":"List the repository layout."}`),
			researcher.ev(&plumbv1.SubagentStarted{Subagent: "researcher", Description: "Find where the parser\nhandles errors.", Depth: 1}),
			explorer.ev(&plumbv1.SubagentStarted{Subagent: "explore", Description: "List the repository layout.", Depth: 1}),
			researcher.deltas(1, "I will ask explore", " for help."),
			explorer.deltas(1, "Listing"),
			researcher.msg(1, "I will ask explore for help.", tc("r1", "task", `{"subagent_type":"explore","description":"Find parser files."}`)),
			explorer.deltas(1, " now.\nDone"),
			researcher.call("r1", "task", `{"subagent_type":"explore","description":"Find parser files."}`),
			nested.ev(&plumbv1.SubagentStarted{Subagent: "explore", Description: "Find parser files.", Depth: 2}),
			explorer.msg(1, "Listing now.\nDone", tc("c1", "ls", `{"path":"/"}`)),
			nested.msg(1, "", tc("c1", "glob", `{"pattern":"**/parse*.go"}`)),
			explorer.call("c1", "ls", `{"path":"/"}`),
			nested.call("c1", "glob", `{"pattern":"**/parse*.go"}`),
			explorer.ok("c1", "ls", "/src\n/docs"),
			nested.ok("c1", "glob", "/src/parser.go"),
			nested.ev(todos("x Find files")),
			nested.deltas(2, "Found /src/parser.go."),
			explorer.deltas(2, "Two directories."),
			nested.msg(2, "Found /src/parser.go."),
			explorer.msg(2, "Two directories."),
			nested.ev(&plumbv1.SubagentFinished{Status: plumbv1.SubagentStatus_SUBAGENT_STATUS_COMPLETED, Usage: tokens(300, 20)}),
			researcher.ok("r1", "task", "Found /src/parser.go."),
			explorer.ev(&plumbv1.SubagentFinished{Status: plumbv1.SubagentStatus_SUBAGENT_STATUS_COMPLETED, Usage: tokens(200, 10)}),
			root.ok("t2", "task", "Two directories."),
			researcher.msg(2, "Errors are handled in parser.go:42."),
			researcher.ev(&plumbv1.SubagentFinished{Status: plumbv1.SubagentStatus_SUBAGENT_STATUS_STEP_LIMIT, Usage: tokens(900, 60)}),
			root.fail("t1", "task", "Errors are handled in parser.go:42.\n[subagent stopped: step limit 2 reached]"),
			root.deltas(2, "All done."),
			root.msg(2, "All done."),
			finished(completed, "All done.", tokens(2000, 150)),
		),
		"interrupt": flat(
			started(false),
			root.msg(1, "",
				tc("c1", "ls", `{"path":"/"}`),
				tc("c2", "execute", `{"command":"rm -rf /tmp/build"}`),
				tc("t1", "task", `{"subagent_type":"general-purpose","description":"Clean up"}`)),
			root.usage(100, 30, tokens(100, 30)),
			root.call("c1", "ls", `{"path":"/"}`),
			root.call("t1", "task", `{"subagent_type":"general-purpose","description":"Clean up"}`),
			root.ok("c1", "ls", "/tmp"),
			at{"main/general-purpose", "t1"}.ev(&plumbv1.SubagentStarted{Subagent: "general-purpose", Description: "Clean up", Depth: 1}),
			at{"main/general-purpose", "t1"}.msg(1, "", tc("g1", "delete", `{"file_path":"/tmp/old"}`)),
			root.ev(&plumbv1.Interrupted{InterruptId: "int-1", Requests: []*plumbv1.InterruptRequest{
				{ToolCallId: "c2", AgentPath: "main", Kind: plumbv1.InterruptKind_INTERRUPT_KIND_APPROVAL, ToolName: "execute",
					ArgsJson: `{"command":"rm -rf /tmp/build"}`, Description: "Shell command in the workspace",
					AllowedDecisions: []plumbv1.DecisionType{approve, edit, reject, respond}},
				{ToolCallId: "g1", AgentPath: "main/general-purpose", ParentToolCallId: "t1", Kind: plumbv1.InterruptKind_INTERRUPT_KIND_APPROVAL, ToolName: "delete",
					ArgsJson: `{"file_path":"/tmp/old"}`, Description: "Approval required: delete",
					AllowedDecisions: []plumbv1.DecisionType{approve, reject}},
			}}),
		),
		"resumed_cancelled": flat(
			root.ev(&plumbv1.RunStarted{ThreadId: "th-1", RunId: "run-1", Agent: "main", Model: "smart", Resumed: true}),
			root.call("c2", "execute", `{"command":"rm -rf /tmp/build"}`),
			root.ev(&plumbv1.ToolResult{Id: "c2", Name: "execute", Content: "The user rejected this execute call. Reason: too risky", IsError: true, Origin: plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_REJECTED}),
			at{"main/general-purpose", "t1"}.ev(&plumbv1.SubagentStarted{Subagent: "general-purpose", Description: "Clean up", Depth: 1, Resumed: true}),
			at{"main/general-purpose", "t1"}.call("g1", "delete", `{"file_path":"/tmp/old"}`),
			at{"main/general-purpose", "t1"}.ev(&plumbv1.ToolResult{Id: "g1", Name: "delete", Content: "Deleted /tmp/old.", Origin: plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_EXECUTED}),
			at{"main/general-purpose", "t1"}.ev(&plumbv1.Summarized{CutoffIndex: 12, MessagesSummarized: 10, TokensBefore: 150000, TokensAfter: 9000, TranscriptPath: "/conversation_history/th-1/t1.md", Fallback: true}),
			root.ev(&plumbv1.Summarized{CutoffIndex: 40, MessagesSummarized: 38, TokensBefore: 170000, TokensAfter: 12000, TranscriptPath: "/conversation_history/th-1.md"}),
			root.deltas(2, "Half a sen"),
			finished(plumbv1.RunStatus_RUN_STATUS_CANCELLED, "", tokens(5000, 400)),
		),
		"error": flat(
			started(false),
			root.deltas(1, "Let me"),
			root.ev(&plumbv1.RunError{Code: "MODEL_RATE_LIMITED", Message: "rate limited by the provider\nretry after 30s", Retryable: true}),
		),
		"retry_attempt": flat(
			started(false),
			root.deltas(1, "The answer", " is"),
			root.ev(&plumbv1.MessageDelta{Text: "The answer ", Step: 1, Attempt: 2}),
			root.ev(&plumbv1.MessageDelta{Text: " forty", Step: 1, Attempt: 1}),
			root.ev(&plumbv1.MessageDelta{Text: "is 42.", Step: 1, Attempt: 2}),
			root.msg(1, "The answer is 42."),
			root.usage(50, 8, tokens(50, 8)),
			// a reply that arrives whole, without deltas, and is cut off
			root.ev(&plumbv1.AssistantMessage{Text: "Whole reply\nwith two lines.", Step: 2, FinishReason: "length"}),
			finished(plumbv1.RunStatus_RUN_STATUS_DEADLINE_EXCEEDED, "The answer is 42.", nil),
		),
	}
}

func TestGoldenEvents(t *testing.T) {
	for name, events := range scenarios() {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			r := New(&b, Options{Width: 72})
			for _, e := range events {
				if err := r.Event(e); err != nil {
					t.Fatal(err)
				}
			}
			golden(t, "events_"+name, b.Bytes())
		})
	}
}

func TestOutcome(t *testing.T) {
	tests := []struct {
		name     string
		ending   Ending
		status   plumbv1.RunStatus
		code     string
		requests int
	}{
		{"plain_text", EndFinished, completed, "", 0},
		{"todos", EndFinished, plumbv1.RunStatus_RUN_STATUS_MAX_ITERATIONS, "", 0},
		{"interrupt", EndInterrupted, 0, "", 2},
		{"error", EndError, 0, "MODEL_RATE_LIMITED", 0},
		{"resumed_cancelled", EndFinished, plumbv1.RunStatus_RUN_STATUS_CANCELLED, "", 0},
	}
	all := scenarios()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(&bytes.Buffer{}, Options{})
			for _, e := range all[tt.name] {
				_ = r.Event(e)
			}
			o := r.Outcome()
			if o.Ending != tt.ending || o.Status != tt.status || o.Error.GetCode() != tt.code ||
				len(o.Interrupt.GetRequests()) != tt.requests || o.LastSequence != uint64(len(all[tt.name])) {
				t.Errorf("outcome = %+v", o)
			}
			if o.ThreadID != "th-1" || o.RunID != "run-1" {
				t.Errorf("ids = %q %q", o.ThreadID, o.RunID)
			}
		})
	}
}

// A new segment (Resume) clears the previous segment's ending.
func TestOutcomeResetByRunStarted(t *testing.T) {
	r := New(&bytes.Buffer{}, Options{})
	for _, e := range scenarios()["interrupt"] {
		_ = r.Event(e)
	}
	_ = r.Event(started(true))
	if o := r.Outcome(); o.Ending != EndNone || o.Interrupt != nil {
		t.Fatalf("outcome after run_started = %+v", o)
	}
}

// A steered event shows each steered message's first line.
func TestSteered(t *testing.T) {
	var out bytes.Buffer
	r := New(&out, Options{})
	_ = r.Event(started(false))
	_ = r.Event(root.ev(&plumbv1.Steered{Input: []string{"use Python 3.12\nplease", "and tests"}}))
	if got := out.String(); !strings.Contains(got, "» steered: use Python 3.12\n") || strings.Contains(got, "please") || !strings.Contains(got, "» steered: and tests\n") {
		t.Fatalf("rendered %q", got)
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, os.ErrClosed
	}
	w.n--
	return len(p), nil
}

func TestWriteErrorSticks(t *testing.T) {
	w := &failWriter{n: 1}
	r := New(w, Options{})
	var err error
	for _, e := range scenarios()["plain_text"] {
		err = r.Event(e)
	}
	if err == nil || r.Err() == nil {
		t.Fatal("write error not reported")
	}
	if r.Outcome().Ending != EndFinished {
		t.Fatal("outcome not tracked after a write error")
	}
}

func TestGoldenInterrupt(t *testing.T) {
	ev := scenarios()["interrupt"]
	in := ev[len(ev)-1].GetInterrupted()
	in.Requests = append(in.Requests, &plumbv1.InterruptRequest{
		ToolCallId: "k1", AgentPath: "main", Kind: plumbv1.InterruptKind_INTERRUPT_KIND_CLIENT_TOOL, ToolName: "get_location",
		ArgsJson: `{}`, AllowedDecisions: []plumbv1.DecisionType{respond, reject},
	})
	var b bytes.Buffer
	for _, l := range Interrupt(in) {
		b.WriteString(l + "\n")
	}
	golden(t, "interrupt_requests", b.Bytes())
}

func testThread() *plumbv1.Thread {
	ts := func(m int) *timestamppb.Timestamp {
		return timestamppb.New(time.Date(2026, 11, 22, 10, m, 0, 0, time.UTC))
	}
	ev := scenarios()["interrupt"]
	return &plumbv1.Thread{
		Id: "th-1", CreatedAt: ts(0), UpdatedAt: ts(5), Metadata: map[string]string{"team": "core", "env": "dev"},
		Status: plumbv1.ThreadStatus_THREAD_STATUS_INTERRUPTED, MessageCount: 4,
		Todos:            todos("x Read", "> Write").GetTodos(),
		PendingInterrupt: ev[len(ev)-1].GetInterrupted(),
		LastRun: &plumbv1.RunRecord{RunId: "run-1", Status: plumbv1.RunStatus_RUN_STATUS_INTERRUPTED, Usage: tokens(100, 30),
			StartedAt: ts(1)},
		Usage:     &plumbv1.TokenUsage{PromptTokens: 1000, CompletionTokens: 200, TotalTokens: 1200, CachedTokens: 300},
		SandboxId: "sbx-1",
	}
}

func TestGoldenThread(t *testing.T) {
	th := testThread()
	var b bytes.Buffer
	if err := Thread(&b, th, time.UTC, 72); err != nil {
		t.Fatal(err)
	}
	golden(t, "thread_basic", b.Bytes())

	full := proto.Clone(th).(*plumbv1.Thread)
	full.PendingInterrupt, full.Status = nil, plumbv1.ThreadStatus_THREAD_STATUS_IDLE
	full.LastRun.Status, full.LastRun.FinishedAt, full.LastRun.FinalText = completed, timestamppb.New(time.Date(2026, 11, 22, 10, 4, 0, 0, time.UTC)), "Cleaned up.\nBye."
	full.Messages = []*plumbv1.ThreadMessage{
		{Index: 0, Role: "user", Content: "Clean up /tmp", CreatedAt: full.CreatedAt},
		{Index: 1, Role: "assistant", Reasoning: "Use ls\nfirst.", ToolCalls: []*plumbv1.ToolCall{tc("c1", "ls", `{"path":"/tmp"}`)}},
		{Index: 2, Role: "tool", Name: "ls", ToolCallId: "c1", Content: "/tmp/old\n/tmp/build\n", Origin: plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_EXECUTED},
		{Index: 3, Role: "tool", Name: "delete", ToolCallId: "c2", Content: "The user rejected this delete call.", IsError: true, Origin: plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_REJECTED},
		{Index: 4, Role: "user", Source: "summarization", Content: "<summary>\nwork so far\n</summary>"},
		{Index: 5, Role: "assistant", Content: "Cleaned up.\nBye."},
	}
	full.Files = []*plumbv1.StateFile{{Path: "/notes.md", Size: 12, ModifiedAt: full.UpdatedAt}}
	full.Checkpoints = []*plumbv1.Checkpoint{{Id: 7, RunId: "run-1", Phase: plumbv1.CheckpointPhase_CHECKPOINT_PHASE_FINAL, Step: 2, MessageCount: 6, CreatedAt: full.UpdatedAt}}
	b.Reset()
	if err := Thread(&b, full, time.UTC, 72); err != nil {
		t.Fatal(err)
	}
	golden(t, "thread_full", b.Bytes())
}

func TestGoldenTables(t *testing.T) {
	th := testThread()
	other := &plumbv1.Thread{Id: "th-2", Status: plumbv1.ThreadStatus_THREAD_STATUS_IDLE, UpdatedAt: th.CreatedAt}
	var b bytes.Buffer
	if err := Threads(&b, []*plumbv1.Thread{th, other}, time.UTC); err != nil {
		t.Fatal(err)
	}
	b.WriteString("\n")
	agents := []*plumbv1.AgentInfo{
		{Name: "main", Kind: plumbv1.AgentKind_AGENT_KIND_PRIMARY, Model: "smart", Subagents: []string{"general-purpose", "explore"},
			InterruptOn: []*plumbv1.InterruptRule{{Tool: "execute"}, {Tool: "delete"}}, Description: "The default agent."},
		{Name: "explore", Kind: plumbv1.AgentKind_AGENT_KIND_SUBAGENT, Model: "fast",
			Description: "Reads files and answers one focused question about the code base, with paths and line numbers."},
	}
	if err := Agents(&b, agents, 72); err != nil {
		t.Fatal(err)
	}
	golden(t, "tables", b.Bytes())
}

func TestCallSummary(t *testing.T) {
	tests := []struct {
		name, tool, args string
		width            int
		want             string
	}{
		{"file path", "write_file", `{"file_path":"/a.txt","content":"x"}`, 0, "write_file /a.txt"},
		{"execute newlines", "execute", `{"command":"cd /src &&\n  make test","timeout":30}`, 0, "execute cd /src && make test"},
		{"ls without path", "ls", `{}`, 0, "ls"},
		{"task", "task", `{"subagent_type":"explore","description":"Look\nhere"}`, 0, "task explore: Look here"},
		{"todos", "write_todos", `{"todos":[{},{}]}`, 0, "write_todos 2 items"},
		{"todo", "write_todos", `{"todos":[{}]}`, 0, "write_todos 1 item"},
		{"grep", "grep", `{"pattern":"x","path":"/s"}`, 0, "grep x in /s"},
		{"unknown tool, guessed key", "fetch", `{"limit":3,"url":"http://x"}`, 0, "fetch http://x"},
		{"unknown tool, first string in order", "custom", `{"n":1,"b":"second","a":"first"}`, 0, "custom second"},
		{"unknown tool, no strings", "counter", `{"n":1,"m":[1, 2]}`, 0, `counter {"n":1,"m":[1,2]}`},
		{"not an object", "weird", `[1,2]`, 0, "weird [1,2]"},
		{"malformed", "weird", `{"a":`, 0, `weird {"a":`},
		{"cut", "execute", `{"command":"` + strings.Repeat("x", 50) + `"}`, 20, "execute xxxxxxxxxxx…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CallSummary(tt.tool, tt.args, tt.width); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCut(t *testing.T) {
	tests := []struct {
		in    string
		width int
		want  string
	}{
		{"hello", 5, "hello"},
		{"hello!", 5, "hell…"},
		{"héllo wörld", 4, "hél…"},
		{"abc", 1, "…"},
		{"abc", 0, "abc"},
	}
	for _, tt := range tests {
		if got := Cut(tt.in, tt.width); got != tt.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", tt.in, tt.width, got, tt.want)
		}
	}
}

func TestDecision(t *testing.T) {
	ev := scenarios()["interrupt"]
	reqs := ev[len(ev)-1].GetInterrupted().GetRequests()
	tests := []struct {
		req  *plumbv1.InterruptRequest
		d    *plumbv1.Decision
		want string
	}{
		{reqs[0], &plumbv1.Decision{Type: approve}, "» approve execute rm -rf /tmp/build"},
		{reqs[1], &plumbv1.Decision{Type: reject, Message: "keep\nit"}, "» reject delete /tmp/old in main/general-purpose: keep it"},
		{reqs[0], &plumbv1.Decision{Type: edit, EditedArgsJson: `{"command":"ls"}`}, `» edit execute rm -rf /tmp/build: args {"command":"ls"}`},
		{reqs[0], &plumbv1.Decision{Type: respond, Message: "no such place", IsError: true}, "» respond execute rm -rf /tmp/build: no such place (as an error)"},
	}
	for _, tt := range tests {
		if got := Decision(tt.req, tt.d, 0); got != tt.want {
			t.Errorf("got  %q\nwant %q", got, tt.want)
		}
	}
}

func TestFlush(t *testing.T) {
	var b bytes.Buffer
	r := New(&b, Options{})
	for _, e := range flat(started(false), root.deltas(1, "half")) {
		_ = r.Event(e)
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = r.Flush()
	if !strings.HasSuffix(b.String(), "\nhalf\n") {
		t.Fatalf("output %q", b.String())
	}
}
