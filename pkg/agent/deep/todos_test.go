package deep_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

var todoScenarios = []scenario{
	{"16_write_todos", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(call("c1", "write_todos", `{"todos":[{"content":"a","status":"in_progress"},{"content":"b","status":"pending"}]}`)), modeltest.Text("ok"))
		tr := e.run(input("plan it")).must(t)
		tr.checkEnvelope(t, 1)
		i := tr.index(func(ev agent.Event) bool { _, ok := ev.Payload.(agent.ToolResultEvent); return ok })
		if i < 0 || i+1 >= len(tr.events) || tr.events[i+1].Payload.Kind() != "todos_updated" {
			t.Fatalf("todos_updated does not directly follow the tool_result: %v", tr.kinds(false))
		}
		r := tr.result(t, "c1")
		if want := "Todo list updated (2 items: 1 pending, 1 in progress, 0 completed).\n- [in_progress] a\n- [pending] b"; r.Content != want || r.IsError {
			t.Errorf("result %q", r.Content)
		}
		if td := e.thread(tr.res.ThreadID); len(td.Todos) != 2 || td.Todos[0] != (agent.Todo{Content: "a", Status: agent.TodoInProgress}) {
			t.Errorf("thread todos %+v", td.Todos)
		}
		golden(t, "16_write_todos", tr)
	}},
	{"17_write_todos_twice_in_one_turn", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(
			call("c1", "write_todos", `{"todos":[{"content":"a","status":"pending"}]}`),
			call("c2", "write_todos", `{"todos":[{"content":"b","status":"pending"}]}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		for _, id := range []string{"c1", "c2"} {
			r := tr.result(t, id)
			if !r.IsError || r.Origin != agent.OriginBlocked || r.Content != "write_todos was called 2 times in one turn; none were applied. Send one call with the complete list." {
				t.Errorf("%s = %+v", id, r)
			}
		}
		if slices.Contains(tr.kinds(false), "todos_updated") {
			t.Error("todos_updated emitted")
		}
		if td := e.thread(tr.res.ThreadID); len(td.Todos) != 0 {
			t.Errorf("todos changed: %+v", td.Todos)
		}
	}},
	{"18_write_todos_bad_status", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(call("c1", "write_todos", `{"todos":[{"content":"a","status":"done"}]}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		r := tr.result(t, "c1")
		if !r.IsError || !strings.Contains(r.Content, `"pending", "in_progress", "completed"`) {
			t.Errorf("result %+v", r)
		}
	}},
	{"19_todos_disabled", func(t *testing.T) {
		off := false
		e := newEnv(t, withConfig(func(c *deep.Config) { c.Middleware.Todos.Enabled = &off }))
		e.srv.Script("main", modeltest.Calls(call("c1", "write_todos", `{"todos":[]}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		if got := requestTools(e.srv.Requests("main")[0]); slices.Contains(got, "write_todos") {
			t.Errorf("request 1 tools %v", got)
		}
		if r := tr.result(t, "c1"); !r.IsError || r.Origin != agent.OriginInvalidCall || !strings.HasPrefix(r.Content, `Unknown tool "write_todos"`) {
			t.Errorf("result %+v", r)
		}
	}},
	{"20_todos_reminder", func(t *testing.T) {
		e := newEnv(t)
		turns := []modeltest.Turn{modeltest.Calls(call("w", "write_todos", `{"todos":[{"content":"a","status":"in_progress"}]}`))}
		for i := range 11 {
			turns = append(turns, modeltest.Calls(call("e"+string(rune('a'+i)), "echo", `{"text":"x"}`), call("f"+string(rune('a'+i)), "echo", `{"text":"y"}`)))
		}
		e.srv.Script("main", append(turns, modeltest.Text("ok"))...)
		tr := e.run(input("go")).must(t)
		var with []string
		for id, r := range tr.results() {
			if strings.Contains(r.Content, "<system-reminder>") {
				with = append(with, id)
			}
		}
		// 10 echo steps after the write: the 10th step's last call.
		if !slices.Equal(with, []string{"fj"}) {
			t.Fatalf("reminders on %v, want [fj]", with)
		}
		r := tr.result(t, "fj")
		if !strings.HasPrefix(r.Content, "y\n\n<system-reminder>\n") || !strings.Contains(r.Content, "- [in_progress] a") || !strings.HasSuffix(r.Content, "\n</system-reminder>") {
			t.Errorf("content %q", r.Content)
		}
		// Persisted exactly as emitted.
		td := e.thread(tr.res.ThreadID)
		for _, m := range td.Messages {
			if m.ToolCallID == "fj" && m.Content != r.Content {
				t.Errorf("stored %q", m.Content)
			}
		}
	}},
}
