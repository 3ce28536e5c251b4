package deep_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

func task(id, subagent, description string) modeltest.Call {
	return call(id, "task", `{"subagent_type":"`+subagent+`","description":"`+description+`"}`)
}

func withSubagents(subs map[string]profile.Profile) option {
	return withConfig(func(c *deep.Config) { c.Subagents = subs })
}

var researcher = profile.Profile{
	Description: "Reads code and docs and answers one focused question.",
	Tools:       []string{"@read", "task", "echo"},
	Subagents:   []string{"explore"},
	Model:       "fast",
}

var subagentScenarios = []scenario{
	{"21_task_general_purpose", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(task("t1", "general-purpose", "find X")), modeltest.Text("done"))
		e.srv.Script("main/general-purpose", modeltest.Text("X=42"))
		tr := e.run(input("what is X?")).must(t)
		tr.checkEnvelope(t, 1)
		started := tr.index(func(ev agent.Event) bool { _, ok := ev.Payload.(agent.SubagentStarted); return ok })
		finished := tr.index(func(ev agent.Event) bool { _, ok := ev.Payload.(agent.SubagentFinished); return ok })
		callStarted := tr.index(func(ev agent.Event) bool { p, ok := ev.Payload.(agent.ToolCallStarted); return ok && p.ID == "t1" })
		result := tr.index(func(ev agent.Event) bool { p, ok := ev.Payload.(agent.ToolResultEvent); return ok && p.ID == "t1" })
		if !(callStarted < started && started < finished && finished < result) {
			t.Fatalf("order: tool_call_started %d, subagent_started %d, subagent_finished %d, tool_result %d", callStarted, started, finished, result)
		}
		for i := started; i <= finished; i++ {
			ev := tr.events[i]
			if ev.AgentPath != "main/general-purpose" || ev.ParentToolCallID != "t1" {
				t.Errorf("event %d %s: agent path %q parent %q", i, ev.Payload.Kind(), ev.AgentPath, ev.ParentToolCallID)
			}
		}
		if s := tr.events[started].Payload.(agent.SubagentStarted); s.Subagent != "general-purpose" || s.Description != "find X" || s.Depth != 1 {
			t.Errorf("subagent_started %+v", s)
		}
		if f := tr.events[finished].Payload.(agent.SubagentFinished); f.Status != agent.SubagentCompleted || f.Usage.Total == 0 {
			t.Errorf("subagent_finished %+v", f)
		}
		if r := tr.result(t, "t1"); r.Content != "X=42" || r.IsError {
			t.Errorf("task result %+v", r)
		}
		sub := e.srv.Requests("main/general-purpose")[0]
		msgs := requestMessages(sub)
		if len(msgs) != 2 || !strings.HasPrefix(msgs[0], "system: ") || msgs[1] != "user: find X" {
			t.Errorf("sub request = %q", msgs)
		}
		if !strings.Contains(msgs[0], "you are a subagent") && !strings.Contains(msgs[0], "You are a subagent") {
			t.Errorf("sub system prompt lacks the subagent identity")
		}
		tr.finished(t, agent.StatusCompleted)
		golden(t, "21_task_general_purpose", tr)
	}},
	{"23_task_result_is_last_nonempty_text", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(task("t1", "general-purpose", "do it")), modeltest.Text("done"))
		withCall := modeltest.Calls(call("s1", "echo", `{"text":"x"}`))
		withCall.Text = []string{"ans", "wer"}
		e.srv.Script("main/general-purpose", withCall, modeltest.Text(""))
		tr := e.run(input("go")).must(t)
		if r := tr.result(t, "t1"); r.Content != "answer" || r.IsError {
			t.Errorf("task result %+v", r)
		}
	}},
	{"24_unknown_subagent_type", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(task("t1", "nope", "x")), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		r := tr.result(t, "t1")
		if !r.IsError || r.Content != `Unknown subagent type "nope". Available: bash, explore, general-purpose.` {
			t.Errorf("result %+v", r)
		}
		if slices.Contains(tr.kinds(false), "subagent_started") {
			t.Error("a subagent started")
		}
	}},
	{"25_parallel_subagents", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(task("t1", "general-purpose", "a"), task("t2", "general-purpose", "b")), modeltest.Text("done"))
		slow := func(text string) modeltest.Turn {
			tu := modeltest.Text(text)
			tu.FirstByteDelay = 300 * time.Millisecond
			return tu
		}
		e.srv.Script(modeltest.Key("main/general-purpose", "t1"), slow("A"))
		e.srv.Script(modeltest.Key("main/general-purpose", "t2"), slow("B"))
		// Parallel is shown by the event order below (both started before
		// either finished), not by wall time.
		tr := e.run(input("go")).must(t)
		tr.checkEnvelope(t, 1)
		var startedBoth, finishedFirst int = -1, -1
		n := 0
		for i, ev := range tr.events {
			if ev.AgentPath == "main/general-purpose" && ev.ParentToolCallID != "t1" && ev.ParentToolCallID != "t2" {
				t.Errorf("sub event %d labelled %q", i, ev.ParentToolCallID)
			}
			switch ev.Payload.(type) {
			case agent.SubagentStarted:
				if n++; n == 2 {
					startedBoth = i
				}
			case agent.SubagentFinished:
				if finishedFirst < 0 {
					finishedFirst = i
				}
			}
		}
		if startedBoth < 0 || startedBoth > finishedFirst {
			t.Errorf("subagents did not overlap: both started at %d, first finished at %d", startedBoth, finishedFirst)
		}
		if tr.result(t, "t1").Content != "A" || tr.result(t, "t2").Content != "B" {
			t.Error("results mixed up")
		}
		if got := toolOrder(e.thread(tr.res.ThreadID)); !slices.Equal(got, []string{"t1", "t2"}) {
			t.Errorf("log order %v", got)
		}
	}},
	{"26_nested_subagents", func(t *testing.T) {
		e := newEnv(t, withSubagents(map[string]profile.Profile{"researcher": researcher}))
		e.srv.Script("main", modeltest.Calls(task("t1", "researcher", "q")), modeltest.Text("done"))
		e.srv.Script("main/researcher", modeltest.Calls(task("t2", "explore", "look")), modeltest.Text("R"))
		e.srv.Script("main/researcher/explore", modeltest.Text("E"))
		tr := e.run(input("go")).must(t)
		tr.checkEnvelope(t, 1)
		for _, ev := range tr.events {
			switch ev.AgentPath {
			case "main/researcher":
				if ev.ParentToolCallID != "t1" {
					t.Errorf("researcher event with parent %q", ev.ParentToolCallID)
				}
			case "main/researcher/explore":
				if ev.ParentToolCallID != "t2" {
					t.Errorf("explore event with parent %q", ev.ParentToolCallID)
				}
			}
		}
		var t2 agent.Event
		for _, ev := range tr.events {
			if r, ok := ev.Payload.(agent.ToolResultEvent); ok && r.ID == "t2" {
				t2 = ev
			}
		}
		if r, _ := t2.Payload.(agent.ToolResultEvent); r.Content != "E" || t2.AgentPath != "main/researcher" {
			t.Errorf("t2 result %+v at %q", t2.Payload, t2.AgentPath)
		}
		if r := tr.result(t, "t1"); r.Content != "R" {
			t.Errorf("t1 result %+v", r)
		}
		golden(t, "26_nested_subagents", tr)
	}},
	{"27_depth_limit", func(t *testing.T) {
		e := newEnv(t, withConfig(func(c *deep.Config) { c.Middleware.Subagents.MaxDepth = 2 }))
		e.srv.Script("main", modeltest.Calls(task("t1", "general-purpose", "a")), modeltest.Text("done"))
		e.srv.Script("main/general-purpose", modeltest.Calls(task("t2", "general-purpose", "b")), modeltest.Text("mid"))
		e.srv.Script("main/general-purpose/general-purpose", modeltest.Calls(task("t3", "general-purpose", "c")), modeltest.Text("deep"))
		tr := e.run(input("go")).must(t)
		deepReq := e.srv.Requests("main/general-purpose/general-purpose")[0]
		if slices.Contains(requestTools(deepReq), "task") {
			t.Errorf("depth-2 request offers task: %v", requestTools(deepReq))
		}
		if !slices.Contains(requestTools(e.srv.Requests("main/general-purpose")[0]), "task") {
			t.Error("depth-1 request lacks task")
		}
		if r := tr.result(t, "t3"); !r.IsError || r.Content != "Subagent depth limit (2) reached; do the work directly." {
			t.Errorf("t3 %+v", r)
		}
		tr.finished(t, agent.StatusCompleted)
	}},
	{"28_subagent_step_limit", func(t *testing.T) {
		e := newEnv(t, withSubagents(map[string]profile.Profile{"general-purpose": {MaxSteps: 2}}))
		e.srv.Script("main", modeltest.Calls(task("t1", "general-purpose", "loop")), modeltest.Text("done"))
		e.srv.Script("main/general-purpose", modeltest.Calls(call("s1", "echo", `{"text":"1"}`)), modeltest.Calls(call("s2", "echo", `{"text":"2"}`)))
		tr := e.run(input("go")).must(t)
		if n := e.srv.Count("main/general-purpose"); n != 2 {
			t.Errorf("%d sub requests, want 2", n)
		}
		if r := tr.result(t, "t1"); !r.IsError || !strings.HasSuffix(r.Content, "[subagent stopped: step limit 2 reached]") {
			t.Errorf("t1 %+v", r)
		}
		for _, ev := range tr.events {
			if f, ok := ev.Payload.(agent.SubagentFinished); ok && f.Status != agent.SubagentStepLimit {
				t.Errorf("subagent_finished %+v", f)
			}
		}
	}},
	{"29_subagent_timeout", func(t *testing.T) {
		e := newEnv(t, withSubagents(map[string]profile.Profile{"general-purpose": {Timeout: time.Second}}))
		e.srv.Script("main", modeltest.Calls(task("t1", "general-purpose", "wait")), modeltest.Text("done"))
		e.srv.Script("main/general-purpose", modeltest.Calls(call("s1", "sleep", `{"ms":5000}`)))
		// The 5 s sleep is cut by the 1 s timeout: the result says so.
		tr := e.run(input("go")).must(t)
		if r := tr.result(t, "t1"); !r.IsError || !strings.HasPrefix(r.Content, "Subagent general-purpose timed out after 1s") {
			t.Errorf("t1 %+v", r)
		}
		var status agent.SubagentStatus
		for _, ev := range tr.events {
			if f, ok := ev.Payload.(agent.SubagentFinished); ok {
				status = f.Status
			}
		}
		if status != agent.SubagentDeadlineExceeded {
			t.Errorf("subagent_finished status %q", status)
		}
		tr.finished(t, agent.StatusCompleted)
	}},
	{"31_subagent_model", func(t *testing.T) {
		e := newEnv(t, withSubagents(map[string]profile.Profile{"researcher": researcher}))
		e.srv.Script("main", modeltest.Calls(task("t1", "researcher", "q")), modeltest.Text("done"))
		e.srv.Script("main/researcher", modeltest.Text("R"))
		e.run(input("go")).must(t)
		if m := e.srv.Requests("main/researcher")[0].Body.Model; m != fastModel {
			t.Errorf("researcher model %q, want %q", m, fastModel)
		}
		if m := e.srv.Requests("main")[0].Body.Model; m != smartModel {
			t.Errorf("main model %q", m)
		}
	}},
}

// TestSubagentCappedByCaller: the read-only plan agent delegating to a
// subagent that may write gets a subagent that cannot (its tools and
// preset are capped by plan's), unless the subagent's profile opts out
// with CapByParent=false (cap_by_parent: false).
func TestSubagentCappedByCaller(t *testing.T) {
	off := false
	for _, tt := range []struct {
		name      string
		capParent *bool
		written   bool
	}{
		{"capped by default", nil, false},
		{"explicit opt-out", &off, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, withFiles(), withConfig(func(c *deep.Config) {
				c.Agents = map[string]profile.Profile{profile.Plan: {Subagents: []string{"writer"}}}
				c.Subagents = map[string]profile.Profile{"writer": {
					Description: "Writes files.", Tools: []string{"@read", "@write"}, Permissions: "edit", CapByParent: tt.capParent,
				}}
			}))
			e.srv.Script("plan", modeltest.Calls(task("t1", "writer", "write /a.txt")), modeltest.Text("done"))
			e.srv.Script("plan/writer", modeltest.Calls(call("w1", "write_file", `{"file_path":"/a.txt","content":"x"}`)), modeltest.Text("W"))
			in := input("go")
			in.Spec.Agent = profile.Plan
			tr := e.run(in).must(t)
			tr.finished(t, agent.StatusCompleted)

			offered := requestTools(e.srv.Requests("plan/writer")[0])
			if slices.Contains(offered, "write_file") != tt.written || !slices.Contains(offered, "read_file") {
				t.Errorf("writer under plan is offered %v", offered)
			}
			r := tr.result(t, "w1")
			if _, ok := e.readFile("/a.txt"); ok != tt.written || r.IsError == tt.written {
				t.Errorf("write_file result %+v; file written: %v, want %v", r, ok, tt.written)
			}
			if !tt.written && !strings.HasPrefix(r.Content, `Unknown tool "write_file"`) {
				t.Errorf("capped write_file result %q", r.Content)
			}
		})
	}
}
