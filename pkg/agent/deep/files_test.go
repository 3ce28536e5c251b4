package deep_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/agent/prompt"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

var fileScenarios = []scenario{
	{"02_write_file", func(t *testing.T) {
		e := newEnv(t, withFiles())
		e.srv.Script("main", modeltest.Calls(call("c1", "write_file", `{"file_path":"/a.txt","content":"x"}`)), modeltest.Text("ok"))
		tr := e.run(input("write it")).must(t)
		tr.checkEnvelope(t, 1)
		s := tr.index(func(ev agent.Event) bool { p, ok := ev.Payload.(agent.ToolCallStarted); return ok && p.ID == "c1" })
		r := tr.index(func(ev agent.Event) bool { p, ok := ev.Payload.(agent.ToolResultEvent); return ok && p.ID == "c1" })
		if s < 0 || r < s {
			t.Fatalf("tool_call_started %d, tool_result %d", s, r)
		}
		if got, ok := e.readFile("/a.txt"); !ok || got != "x" {
			t.Errorf("/a.txt = %q, %v", got, ok)
		}
		req := requestMessages(e.srv.Requests("main")[1])
		if !slices.Contains(req, "tool(c1): Wrote 1 bytes to /a.txt (created it).") {
			t.Errorf("request 2 = %q", req)
		}
		golden(t, "02_write_file", tr)
	}},
	{"07_malformed_json_read_file", func(t *testing.T) {
		e := newEnv(t, withFiles())
		e.srv.Script("main", modeltest.Calls(call("c1", "read_file", `{"file_path":"/a`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		r := tr.result(t, "c1")
		if !r.IsError || r.Origin != agent.OriginInvalidCall || !strings.Contains(r.Content, "Invalid arguments for read_file") {
			t.Errorf("c1 %+v", r)
		}
		tr.finished(t, agent.StatusCompleted)
	}},
	{"08_missing_required_file_path", func(t *testing.T) {
		e := newEnv(t, withFiles())
		e.srv.Script("main", modeltest.Calls(call("c1", "read_file", `{"offset":3}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		r := tr.result(t, "c1")
		if want := "Error [invalid_argument]: Invalid arguments for read_file: file_path: required field is missing."; !r.IsError || r.Content != want {
			t.Errorf("c1 %+v, want %q", r, want)
		}
	}},
	{"22_subagent_shares_files_not_context", func(t *testing.T) {
		e := newEnv(t, withFiles())
		e.srv.Script("main",
			modeltest.Calls(call("w", "write_todos", `{"todos":[{"content":"secret-todo","status":"in_progress"}]}`)),
			modeltest.Calls(task("t1", "general-purpose", "write notes")),
			modeltest.Calls(call("r", "read_file", `{"file_path":"/n.md"}`)),
			modeltest.Text("done"))
		e.srv.Script("main/general-purpose", modeltest.Calls(call("s1", "write_file", `{"file_path":"/n.md","content":"note"}`)), modeltest.Text("written"))
		tr := e.run(input("parent-only-message")).must(t)
		if r := tr.result(t, "r"); r.IsError || !strings.Contains(r.Content, "1  note") {
			t.Errorf("parent read %+v", r)
		}
		for _, req := range e.srv.Requests("main/general-purpose") {
			for _, m := range requestMessages(req) {
				if strings.Contains(m, "secret-todo") || strings.Contains(m, "parent-only-message") {
					t.Errorf("sub request leaks parent context: %q", m)
				}
			}
		}
		if td := e.thread(tr.res.ThreadID); len(td.Todos) != 1 {
			t.Errorf("parent todos %+v", td.Todos)
		}
	}},
	{"30_explore_is_read_only", func(t *testing.T) {
		e := newEnv(t, withFiles())
		e.srv.Script("main", modeltest.Calls(task("t1", "explore", "look")), modeltest.Text("done"))
		e.srv.Script("main/explore", modeltest.Calls(call("s1", "write_file", `{"file_path":"/x","content":"y"}`)), modeltest.Text("E"))
		tr := e.run(input("go")).must(t)
		if got := requestTools(e.srv.Requests("main/explore")[0]); !slices.Equal(got, []string{"glob", "grep", "ls", "read_file"}) {
			t.Errorf("explore tools %v", got)
		}
		var s1 agent.ToolResultEvent
		for _, ev := range tr.events {
			if r, ok := ev.Payload.(agent.ToolResultEvent); ok && r.ID == "s1" {
				s1 = r
			}
		}
		if !s1.IsError || s1.Origin != agent.OriginInvalidCall || !strings.HasPrefix(s1.Content, `Unknown tool "write_file". Available tools: glob, grep, ls, read_file.`) {
			t.Errorf("s1 %+v", s1)
		}
		if _, ok := e.readFile("/x"); ok {
			t.Error("explore wrote a file")
		}
	}},
	{"32_approve", func(t *testing.T) {
		e := newEnv(t, withFiles(), gate(map[string]profile.InterruptRule{"write_file": {}}))
		e.srv.Script("main", modeltest.Calls(call("c1", "write_file", `{"file_path":"/a.txt","content":"x"}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		tr.checkEnvelope(t, 1)
		if got := tr.kinds(false)[len(tr.kinds(false))-3:]; !slices.Equal(got, []string{"message", "usage", "interrupted"}) {
			t.Errorf("stream 1 ends %v", got)
		}
		in := tr.interrupted(t)
		if len(in.Requests) != 1 || in.Requests[0].ToolCallID != "c1" || !slices.Equal(in.Requests[0].Allowed, agent.AllDecisions()) {
			t.Fatalf("requests %+v", in.Requests)
		}
		if _, ok := e.readFile("/a.txt"); ok {
			t.Fatal("file written before approval")
		}
		tr2 := e.resume(tr.res.ThreadID, in.InterruptID, decide("c1", agent.DecisionApprove)).must(t)
		tr2.checkEnvelope(t, tr.events[len(tr.events)-1].Sequence+1)
		if got := tr2.kinds(true); !slices.Equal(got[:3], []string{"run_started", "tool_call_started", "tool_result"}) {
			t.Errorf("stream 2 %v", got)
		}
		tr2.finished(t, agent.StatusCompleted)
		if got, ok := e.readFile("/a.txt"); !ok || got != "x" {
			t.Errorf("/a.txt = %q, %v", got, ok)
		}
		golden(t, "32_approve", tr, tr2)
	}},
	{"33_edit", func(t *testing.T) {
		e := newEnv(t, withFiles(), gate(map[string]profile.InterruptRule{"write_file": {}}))
		e.srv.Script("main", modeltest.Calls(call("c1", "write_file", `{"file_path":"/a.txt","content":"x"}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		in := tr.interrupted(t)
		tr2 := e.resume(tr.res.ThreadID, in.InterruptID, agent.Decision{ToolCallID: "c1", Type: agent.DecisionEdit, EditedArgs: json.RawMessage(`{"file_path": "/b.txt", "content": "y"}`)}).must(t)
		var started agent.ToolCallStarted
		for _, ev := range tr2.events {
			if s, ok := ev.Payload.(agent.ToolCallStarted); ok {
				started = s
			}
		}
		if started.Args != `{"file_path":"/b.txt","content":"y"}` {
			t.Errorf("tool_call_started args %s", started.Args)
		}
		if got, ok := e.readFile("/b.txt"); !ok || got != "y" {
			t.Errorf("/b.txt = %q, %v", got, ok)
		}
		if _, ok := e.readFile("/a.txt"); ok {
			t.Error("/a.txt exists")
		}
		td := e.thread(tr.res.ThreadID)
		if c := td.Messages[1].ToolCalls[0]; c.Args != `{"file_path":"/b.txt","content":"y"}` {
			t.Errorf("stored call args %s", c.Args)
		}
		if got := requestMessages(e.srv.Requests("main")[1]); !strings.Contains(strings.Join(got, "\n"), "Wrote 1 bytes to /b.txt") {
			t.Errorf("request %q", got)
		}
	}},
	{"34_reject", func(t *testing.T) {
		e := newEnv(t, withFiles(), gate(map[string]profile.InterruptRule{"write_file": {}}))
		e.srv.Script("main", modeltest.Calls(call("c1", "write_file", `{"file_path":"/a.txt","content":"x"}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		in := tr.interrupted(t)
		tr2 := e.resume(tr.res.ThreadID, in.InterruptID, agent.Decision{ToolCallID: "c1", Type: agent.DecisionReject, Message: "wrong file"}).must(t)
		r := tr2.result(t, "c1")
		if !r.IsError || r.Origin != agent.OriginRejected || !strings.Contains(r.Content, "wrong file") {
			t.Errorf("c1 %+v", r)
		}
		if got := tr2.kinds(true)[:3]; !slices.Equal(got, []string{"run_started", "tool_call_started", "tool_result"}) {
			t.Errorf("stream 2 %v", got)
		}
		if _, ok := e.readFile("/a.txt"); ok {
			t.Error("rejected call ran")
		}
		if got := requestMessages(e.srv.Requests("main")[1]); !slices.Contains(got, "tool(c1): "+r.Content) {
			t.Errorf("next request %q", got)
		}
	}},
	{"35_respond", func(t *testing.T) {
		e := newEnv(t, withFiles(), gate(map[string]profile.InterruptRule{"write_file": {}}))
		e.srv.Script("main", modeltest.Calls(call("c1", "write_file", `{"file_path":"/a.txt","content":"x"}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		in := tr.interrupted(t)
		tr2 := e.resume(tr.res.ThreadID, in.InterruptID, agent.Decision{ToolCallID: "c1", Type: agent.DecisionRespond, Message: "pretend done"}).must(t)
		if r := tr2.result(t, "c1"); r.IsError || r.Content != "pretend done" || r.Origin != agent.OriginResponded {
			t.Errorf("c1 %+v", r)
		}
		if _, ok := e.readFile("/a.txt"); ok {
			t.Error("responded call ran")
		}
	}},
	{"59_eviction", func(t *testing.T) {
		e := newEnv(t, withFiles())
		e.srv.Script("main", modeltest.Calls(call("c1", "big", `{"lines":1000,"width":100}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		r := tr.result(t, "c1")
		if !strings.HasPrefix(r.Content, "[The result of big (call c1) was too large to show: 100999 characters, 1000 lines. The full output was saved to /large_tool_results/c1.") {
			t.Errorf("notice: %.300s", r.Content)
		}
		for _, want := range []string{"\n   1  line 1 ", "\n   5  line 5 ", "… [990 lines omitted] …", "\n 996  line 996 ", "\n1000  line 1000 "} {
			if !strings.Contains(r.Content, want) {
				t.Errorf("preview lacks %q", want)
			}
		}
		if strings.Contains(r.Content, "line 6 ") || r.OffloadedPath != "/large_tool_results/c1" {
			t.Errorf("preview/offloaded path wrong: %q", r.OffloadedPath)
		}
		if got, ok := e.readFile("/large_tool_results/c1"); !ok || len(got) != 100999 || !strings.HasPrefix(got, "line 1 x") {
			t.Errorf("offloaded file: %d bytes, %v", len(got), ok)
		}
	}},
	{"60_read_file_not_evicted", func(t *testing.T) {
		e := newEnv(t, withFiles())
		e.writeFile("/big.txt", strings.Repeat(strings.Repeat("y", 99)+"\n", 1000))
		e.srv.Script("main", modeltest.Calls(call("c1", "read_file", `{"file_path":"/big.txt"}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		r := tr.result(t, "c1")
		if r.OffloadedPath != "" || strings.Contains(r.Content, "too large to show") || len(r.Content) > 80000 {
			t.Errorf("read_file evicted or over the cap: %d chars, %q", len(r.Content), r.OffloadedPath)
		}
		if !strings.Contains(r.Content, "Continue with offset=") {
			t.Errorf("no pagination notice: %.200s", r.Content[len(r.Content)-300:])
		}
		if _, ok := e.readFile("/large_tool_results/c1"); ok {
			t.Error("read_file result offloaded")
		}
	}},
	{"61_eviction_path_sanitized", func(t *testing.T) {
		e := newEnv(t, withFiles())
		e.srv.Script("main", modeltest.Calls(call("call.a/b", "big", `{"lines":1000,"width":100}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		if r := tr.result(t, "call.a/b"); r.OffloadedPath != "/large_tool_results/call_a_b" {
			t.Errorf("offloaded path %q", r.OffloadedPath)
		}
		if _, ok := e.readFile("/large_tool_results/call_a_b"); !ok {
			t.Error("file missing")
		}
	}},
	{"75_memory", func(t *testing.T) {
		e := newEnv(t, withFiles(), withConfig(func(c *deep.Config) {
			c.Middleware.Memory.Paths = []string{"/memories/AGENTS.md", "/missing/AGENTS.md"}
		}))
		e.writeFile("/memories/AGENTS.md", "prefers tabs\n")
		e.srv.Script("main", modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		tr.finished(t, agent.StatusCompleted)
		p := systemPrompt(e.srv.Requests("main")[0])
		if !strings.HasSuffix(p, "<agent_memory path=\"/memories/AGENTS.md\">\nprefers tabs\n</agent_memory>") {
			t.Errorf("system prompt ends %q", p[max(0, len(p)-200):])
		}
		if strings.Contains(p, "/missing/") {
			t.Error("missing memory file mentioned")
		}
	}},
	{"user_message_offload", func(t *testing.T) {
		e := newEnv(t, withFiles())
		e.srv.Script("main", modeltest.Text("ok"), modeltest.Text("ok again"))
		big := strings.Repeat("0123456789\n", 20001)
		tr := e.run(input(big)).must(t)
		tr.finished(t, agent.StatusCompleted)
		msgs := requestMessages(e.srv.Requests("main")[0])
		p := "/conversation_history/" + tr.res.ThreadID + "_message_0.md"
		if !strings.HasPrefix(msgs[1], "user: [This message is 220011 characters long") || !strings.Contains(msgs[1], p) || len(msgs[1]) > 2000 {
			t.Errorf("request shows %.300q", msgs[1])
		}
		if got, ok := e.readFile(p); !ok || got != big {
			t.Errorf("offloaded file: %d chars, %v", len(got), ok)
		}
		if td := e.thread(tr.res.ThreadID); td.Messages[0].Content != big {
			t.Error("the log lost the full text")
		}
		// A later run reuses the offloaded file.
		e.run(agent.RunInput{ThreadID: tr.res.ThreadID, Input: []string{"more"}}).must(t)
		if msgs := requestMessages(e.srv.Requests("main")[1]); !strings.Contains(msgs[1], p) {
			t.Errorf("second request shows %.200q", msgs[1])
		}
	}},
	{"file_modified_reminder", func(t *testing.T) {
		e := newEnv(t, withFiles())
		e.writeFile("/a.txt", "one\n")
		e.srv.Script("main",
			modeltest.Calls(call("r1", "read_file", `{"file_path":"/a.txt"}`)),
			modeltest.Calls(task("t1", "general-purpose", "change a.txt")),
			modeltest.Calls(call("e1", "echo", `{"text":"x"}`), call("e2", "echo", `{"text":"y"}`)),
			modeltest.Calls(call("w1", "write_file", `{"file_path":"/a.txt","content":"mine, longer\n"}`)),
			modeltest.Calls(call("e3", "echo", `{"text":"z"}`)),
			modeltest.Text("ok"))
		e.srv.Script("main/general-purpose", modeltest.Calls(call("s1", "write_file", `{"file_path":"/a.txt","content":"two two\n"}`)), modeltest.Text("changed"))
		tr := e.run(input("go")).must(t)
		tr.finished(t, agent.StatusCompleted)
		rs := tr.results()
		if r := rs["e2"]; !strings.Contains(r.Content, "<system-reminder>\nThese files changed since you last read them") || !strings.Contains(r.Content, "/a.txt") {
			t.Errorf("e2 %q", r.Content)
		}
		if strings.Contains(rs["e1"].Content, "system-reminder") {
			t.Error("reminder on a call that is not the batch's last")
		}
		// The context's own write does not count as an outside change.
		if strings.Contains(rs["e3"].Content, "system-reminder") {
			t.Errorf("own write reminded: %q", rs["e3"].Content)
		}
	}},
}

// TestMemoryPromptSection: prompt.sections.memory replaces the memory
// section's guidance (the loaded files still follow it) or, with false,
// drops the section and the loading.
func TestMemoryPromptSection(t *testing.T) {
	const custom = "# Team notes\nThese notes come from earlier sessions; follow them unless the user says otherwise."
	block := "<agent_memory path=\"/memories/AGENTS.md\">\nprefers tabs\n</agent_memory>"
	for _, tt := range []struct {
		name     string
		override *prompt.Override
		want     string // the prompt's end; "" = no memory section at all
	}{
		{"default guidance", nil, "never store secrets, credentials or one-off details in it.\n\n" + block},
		{"replaced guidance", &prompt.Override{Text: custom}, "</env>\n\n" + custom + "\n\n" + block},
		{"disabled", &prompt.Override{Disabled: true}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, withFiles(), withConfig(func(c *deep.Config) {
				c.Middleware.Memory.Paths = []string{"/memories/AGENTS.md"}
				if tt.override != nil {
					c.Prompt.Sections = map[string]prompt.Override{prompt.Memory: *tt.override}
				}
			}))
			e.writeFile("/memories/AGENTS.md", "prefers tabs\n")
			e.srv.Script("main", modeltest.Text("ok"))
			e.run(input("go")).must(t).finished(t, agent.StatusCompleted)
			p := systemPrompt(e.srv.Requests("main")[0])
			switch {
			case tt.want == "":
				if strings.Contains(p, "agent_memory") || strings.Contains(p, "# Memory") {
					t.Errorf("disabled memory section is in the prompt: %q", p[max(0, len(p)-300):])
				}
			case !strings.HasSuffix(p, tt.want):
				t.Errorf("system prompt ends %q, want %q", p[max(0, len(p)-300):], tt.want)
			}
			if tt.override != nil && tt.override.Text != "" && strings.Contains(p, "# Memory") {
				t.Error("the default guidance is still there")
			}
		})
	}
}
