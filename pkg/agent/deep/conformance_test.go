package deep_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// scenario is one docs/agent-core.md §11 conformance case, named after its number.
type scenario struct {
	name string
	run  func(t *testing.T)
}

// TestConformance runs the docs/agent-core.md §11 scenarios as a client sees them:
// every Run and Resume goes through AgentService over bufconn to the deep
// runtime on SQLite (harness_test.go). Scenarios 47 and 73 are in
// TestAdapterScenarioParts; 71 (detach and Attach) and 77 (listing and
// deleting threads) live with the adapter's tests in
// internal/server/agentsvc; 10–15 and 62–68 are also covered at the
// adapter level in pkg/model/openai.
func TestConformance(t *testing.T) {
	var all []scenario
	all = append(all, loopScenarios...)
	all = append(all, todoScenarios...)
	all = append(all, subagentScenarios...)
	all = append(all, interruptScenarios...)
	all = append(all, fileScenarios...)
	all = append(all, summaryScenarios...)
	all = append(all, modelScenarios...)
	all = append(all, limitScenarios...)
	all = append(all, promptScenarios...)
	all = append(all, streamScenarios...)
	for _, sc := range all {
		t.Run(sc.name, sc.run)
	}
}

var loopScenarios = []scenario{
	{"01_text", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Text("Hello"))
		tr := e.run(input("hi")).must(t)
		tr.checkEnvelope(t, 1)
		want := []string{"run_started", "message_delta", "message_delta", "message_delta", "message", "usage", "run_finished"}
		if got := tr.kinds(false); !slices.Equal(got, want) {
			t.Fatalf("events = %v, want %v", got, want)
		}
		if f := tr.finished(t, agent.StatusCompleted); f.FinalText != "Hello" {
			t.Errorf("final text %q", f.FinalText)
		}
		td := e.thread(tr.res.ThreadID)
		if len(td.Messages) != 2 || td.Messages[0].Role != model.RoleUser || td.Messages[1].Role != model.RoleAssistant {
			t.Errorf("log = %+v", td.Messages)
		}
		golden(t, "01_text", tr)
	}},
	{"03_parallel_tools", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"ms":300}`), call("c2", "sleep", `{"ms":300}`), call("c3", "sleep", `{"ms":300}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		// Parallel: every call started before any result (each sleeps
		// 300 ms). Not a wall-clock bound, which a loaded machine breaks.
		peak := peakTools(tr)
		if peak != 3 {
			t.Errorf("observed concurrency %d, want 3", peak)
		}
		tr.finished(t, agent.StatusCompleted)
		if got := toolOrder(e.thread(tr.res.ThreadID)); !slices.Equal(got, []string{"c1", "c2", "c3"}) {
			t.Errorf("log results %v", got)
		}
	}},
	{"04_results_in_call_order", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"ms":400}`), call("c2", "sleep", `{"ms":10}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		tr.checkEnvelope(t, 1)
		if got := tr.resultOrder(); !slices.Equal(got, []string{"c2", "c1"}) {
			t.Errorf("tool_result order %v, want c2 before c1", got)
		}
		if got := toolOrder(e.thread(tr.res.ThreadID)); !slices.Equal(got, []string{"c1", "c2"}) {
			t.Errorf("persisted order %v", got)
		}
		// The next request carries the results in call order too.
		reqs := e.srv.Requests("main")
		if got := requestMessages(reqs[1]); !strings.HasPrefix(got[3], "tool(c1)") || !strings.HasPrefix(got[4], "tool(c2)") {
			t.Errorf("request 2 = %q", got)
		}
	}},
	{"05_max_parallel_tools", func(t *testing.T) {
		e := newEnv(t, withConfig(func(c *deep.Config) { c.Limits.MaxParallelTools = 2 }))
		e.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"ms":200}`), call("c2", "sleep", `{"ms":200}`), call("c3", "sleep", `{"ms":200}`), call("c4", "sleep", `{"ms":200}`)), modeltest.Text("ok"))
		start := time.Now()
		tr := e.run(input("go")).must(t)
		if d := time.Since(start); d < 400*time.Millisecond {
			t.Errorf("wall time %v, want ≥ 400ms", d)
		}
		peak := peakTools(tr)
		if peak > 2 {
			t.Errorf("observed concurrency %d, want ≤ 2", peak)
		}
	}},
	{"06_unknown_tool", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(call("c1", "frobnicate", `{}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		tr.checkEnvelope(t, 1)
		r := tr.result(t, "c1")
		want := `Unknown tool "frobnicate". Available tools: big, counter, echo, fail, panic, sleep, task, write_todos.`
		if !r.IsError || r.Origin != agent.OriginInvalidCall || r.Content != want {
			t.Errorf("result = %+v\nwant %q", r, want)
		}
		tr.finished(t, agent.StatusCompleted)
		golden(t, "06_unknown_tool", tr)
	}},
	{"07_malformed_json", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(call("c1", "echo", `{"text":"/a`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		r := tr.result(t, "c1")
		if !r.IsError || r.Origin != agent.OriginInvalidCall || !strings.HasPrefix(r.Content, "Invalid arguments for echo: ") ||
			!strings.HasSuffix(r.Content, "Send a JSON object matching the tool schema.") {
			t.Errorf("result = %+v", r)
		}
		if strings.Contains(r.Content, "output token limit") {
			t.Error("length hint without finish_reason length")
		}
		tr.finished(t, agent.StatusCompleted)
	}},
	{"08_schema_violation", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"msx":3}`), call("c2", "echo", `{}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		if r := tr.result(t, "c2"); !r.IsError || r.Content != "Invalid arguments for echo: text: required field is missing." {
			t.Errorf("c2 = %+v", r)
		}
		if r := tr.result(t, "c1"); !r.IsError || !strings.Contains(r.Content, "ms: required field is missing") {
			t.Errorf("c1 = %+v", r)
		}
		if e.kit.Count() != 0 {
			t.Error("a tool ran")
		}
	}},
	{"09_tool_error_and_panic", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main",
			modeltest.Calls(call("c1", "fail", `{"msg":"boom"}`)),
			modeltest.Calls(call("c2", "panic", `{}`)),
			modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		tr.checkEnvelope(t, 1)
		if r := tr.result(t, "c1"); !r.IsError || r.Content != "fail failed: boom" || r.Origin != agent.OriginExecuted {
			t.Errorf("c1 = %+v", r)
		}
		if r := tr.result(t, "c2"); !r.IsError || r.Content != "panic failed: internal error" {
			t.Errorf("c2 = %+v", r)
		}
		tr.finished(t, agent.StatusCompleted)
		golden(t, "09_tool_error_and_panic", tr)
	}},
	{"10_fragment_assembly", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Turn{Chunks: []modeltest.Chunk{
			{ToolCalls: []modeltest.Fragment{{Index: 0, ID: "c1", Name: "ls"}}},
			{ToolCalls: []modeltest.Fragment{{Index: 1, ID: "c2", Name: "glob", Args: `{"pat`}}},
			{ToolCalls: []modeltest.Fragment{{Index: 0, Args: `{"path":"/"}`}}},
			{ToolCalls: []modeltest.Fragment{{Index: 1, Args: `tern":"*"}`}}},
			{FinishReason: "tool_calls"},
		}}, modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		checkCalls(t, tr, []model.ToolCall{{ID: "c1", Name: "ls", Args: `{"path":"/"}`}, {ID: "c2", Name: "glob", Args: `{"pattern":"*"}`}})
	}},
	{"11_fragments_without_index", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Turn{Chunks: []modeltest.Chunk{
			{ToolCalls: []modeltest.Fragment{{NoIndex: true, ID: "c1", Name: "ls"}}},
			{ToolCalls: []modeltest.Fragment{{NoIndex: true, Args: `{"path":"/"}`}}},
			{ToolCalls: []modeltest.Fragment{{NoIndex: true, ID: "c2", Name: "glob", Args: `{"pat`}}},
			{ToolCalls: []modeltest.Fragment{{NoIndex: true, Args: `tern":"*"}`}}},
			{FinishReason: "tool_calls"},
		}}, modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		checkCalls(t, tr, []model.ToolCall{{ID: "c1", Name: "ls", Args: `{"path":"/"}`}, {ID: "c2", Name: "glob", Args: `{"pattern":"*"}`}})
	}},
	{"12_reused_index", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Turn{Chunks: []modeltest.Chunk{
			{ToolCalls: []modeltest.Fragment{{Index: 0, ID: "c1", Name: "echo", Args: `{"text":"a"}`}}},
			{ToolCalls: []modeltest.Fragment{{Index: 0, ID: "c2", Name: "echo", Args: `{"text":"b"}`}}},
			{FinishReason: "tool_calls"},
		}}, modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		checkCalls(t, tr, []model.ToolCall{{ID: "c1", Name: "echo", Args: `{"text":"a"}`}, {ID: "c2", Name: "echo", Args: `{"text":"b"}`}})
		if tr.result(t, "c1").Content != "a" || tr.result(t, "c2").Content != "b" {
			t.Error("results do not match their calls")
		}
	}},
	{"13_synthesized_and_deduplicated_ids", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(call("", "echo", `{"text":"a"}`), call("x", "echo", `{"text":"b"}`), call("x", "echo", `{"text":"c"}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		msg := firstMessage(t, tr)
		if len(msg.ToolCalls) != 3 || !strings.HasPrefix(msg.ToolCalls[0].ID, "call_") || len(msg.ToolCalls[0].ID) != len("call_")+26 ||
			msg.ToolCalls[1].ID != "x" || msg.ToolCalls[2].ID != "x_2" {
			t.Fatalf("calls = %+v", msg.ToolCalls)
		}
		td := e.thread(tr.res.ThreadID)
		if got := toolOrder(td); !slices.Equal(got, []string{msg.ToolCalls[0].ID, "x", "x_2"}) {
			t.Errorf("tool messages %v", got)
		}
		if tr.result(t, "x_2").Content != "c" {
			t.Error("x_2 answered the wrong call")
		}
	}},
	{"14_tool_call_with_stop", func(t *testing.T) {
		e := newEnv(t)
		turn := modeltest.Calls(call("c1", "counter", `{}`))
		turn.FinishReason = "stop"
		e.srv.Script("main", turn, modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		if r := tr.result(t, "c1"); r.IsError || e.kit.Count() != 1 {
			t.Errorf("c1 = %+v, count %d", r, e.kit.Count())
		}
		tr.finished(t, agent.StatusCompleted)
	}},
	{"15_length_cut_arguments", func(t *testing.T) {
		e := newEnv(t)
		turn := modeltest.Calls(call("c1", "echo", `{"text":"abc`))
		turn.FinishReason = "length"
		e.srv.Script("main", turn, modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		if r := tr.result(t, "c1"); !r.IsError || !strings.Contains(r.Content, "(the response was cut off at the output token limit)") {
			t.Errorf("c1 = %+v", r)
		}
	}},
}

func toolOrder(td *agent.ThreadData) []string {
	var ids []string
	for _, m := range td.Messages {
		if m.Role == model.RoleTool {
			ids = append(ids, m.ToolCallID)
		}
	}
	return ids
}

func firstMessage(t *testing.T, tr *transcript) agent.AssistantMessage {
	t.Helper()
	for _, ev := range tr.events {
		if m, ok := ev.Payload.(agent.AssistantMessage); ok {
			return m
		}
	}
	t.Fatal("no message event")
	return agent.AssistantMessage{}
}

func checkCalls(t *testing.T, tr *transcript, want []model.ToolCall) {
	t.Helper()
	if got := firstMessage(t, tr).ToolCalls; !slices.Equal(got, want) {
		t.Errorf("message.tool_calls = %+v, want %+v", got, want)
	}
}

var _ = profile.Main

// peakTools is the most tool calls in flight at once in tr's events.
func peakTools(tr *transcript) int {
	inFlight, peak := 0, 0
	for _, ev := range tr.events {
		switch ev.Payload.(type) {
		case agent.ToolCallStarted:
			inFlight++
			peak = max(peak, inFlight)
		case agent.ToolResultEvent:
			inFlight--
		}
	}
	return peak
}
