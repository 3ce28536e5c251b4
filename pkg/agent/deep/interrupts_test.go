package deep_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// gate configures interrupt_on for main.
func gate(rules map[string]profile.InterruptRule) option {
	return withConfig(func(c *deep.Config) {
		if c.Agents == nil {
			c.Agents = map[string]profile.Profile{}
		}
		p := c.Agents["main"]
		p.InterruptOn = rules
		c.Agents["main"] = p
	})
}

func decide(id string, typ agent.DecisionType) agent.Decision {
	return agent.Decision{ToolCallID: id, Type: typ}
}

var locationTool = agent.ClientToolDef{
	Name: "get_location", Description: "The user's location.",
	Parameters: json.RawMessage(`{"type":"object","properties":{}}`),
}

var interruptScenarios = []scenario{
	{"36_two_gated_calls", func(t *testing.T) {
		e := newEnv(t, withFiles(), gate(map[string]profile.InterruptRule{"write_file": {}, "delete": {Allowed: []agent.DecisionType{agent.DecisionApprove, agent.DecisionReject}, Description: "Delete files?"}}))
		e.writeFile("/old.txt", "keep me")
		e.srv.Script("main", modeltest.Calls(call("c1", "write_file", `{"file_path":"/a.txt","content":"x"}`), call("c2", "delete", `{"file_path":"/old.txt"}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		tr.checkEnvelope(t, 1)
		in := tr.interrupted(t)
		if len(in.Requests) != 2 || in.Requests[0].ToolCallID != "c1" || in.Requests[1].ToolCallID != "c2" {
			t.Fatalf("requests %+v", in.Requests)
		}
		r1, r2 := in.Requests[0], in.Requests[1]
		if r1.Kind != agent.InterruptApproval || r1.Description != "Approval required: write_file" || !slices.Equal(r1.Allowed, agent.AllDecisions()) ||
			r1.AgentPath != "main" || r1.ToolName != "write_file" || r1.Args != `{"file_path":"/a.txt","content":"x"}` || len(r1.ArgsSchema) == 0 {
			t.Errorf("request 1 %+v", r1)
		}
		if r2.Description != "Delete files?" || !slices.Equal(r2.Allowed, []agent.DecisionType{agent.DecisionApprove, agent.DecisionReject}) {
			t.Errorf("request 2 %+v", r2)
		}
		if slices.Contains(tr.kinds(false), "tool_call_started") {
			t.Error("gated calls got tool_call_started")
		}
		td := e.thread(tr.res.ThreadID)
		if td.Status() != agent.ThreadInterrupted || td.Interrupt.InterruptID != in.InterruptID {
			t.Fatalf("thread status %s", td.Status())
		}
		tr2 := e.resume(tr.res.ThreadID, in.InterruptID, decide("c1", agent.DecisionApprove), agent.Decision{ToolCallID: "c2", Type: agent.DecisionReject, Message: "not now"})
		tr2.must(t).checkEnvelope(t, tr.events[len(tr.events)-1].Sequence+1)
		if s := tr2.events[0].Payload.(agent.RunStarted); !s.Resumed || s.RunID != tr.res.RunID {
			t.Errorf("run_started %+v", s)
		}
		if r := tr2.result(t, "c1"); r.IsError {
			t.Errorf("c1 %+v", r)
		}
		if r := tr2.result(t, "c2"); !r.IsError || r.Origin != agent.OriginRejected || r.Content != "The user rejected this delete call. Reason: not now. Do not retry it unchanged." {
			t.Errorf("c2 %+v", r)
		}
		if got, ok := e.readFile("/old.txt"); !ok || got != "keep me" {
			t.Error("rejected delete ran")
		}
		if _, ok := e.readFile("/a.txt"); !ok {
			t.Error("approved write did not run")
		}
		if got := toolOrder(e.thread(tr.res.ThreadID)); !slices.Equal(got, []string{"c1", "c2"}) {
			t.Errorf("log order %v", got)
		}
		tr2.finished(t, agent.StatusCompleted)
		if td := e.thread(tr.res.ThreadID); td.Status() != agent.ThreadIdle || td.Interrupt != nil {
			t.Errorf("thread after resume: %s", td.Status())
		}
	}},
	{"decisions_recorded_in_the_log", func(t *testing.T) {
		// Each tool message of the log says how its result was produced.
		e := newEnv(t, gate(map[string]profile.InterruptRule{"echo": {}}))
		e.srv.Script("main", modeltest.Calls(call("c1", "echo", `{"text":"a"}`), call("c2", "echo", `{"text":"b"}`),
			call("c3", "echo", `{"text":"c"}`), call("c4", "no_such_tool", `{}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		in := tr.interrupted(t)
		e.resume(tr.res.ThreadID, in.InterruptID, decide("c1", agent.DecisionApprove), decide("c2", agent.DecisionReject),
			agent.Decision{ToolCallID: "c3", Type: agent.DecisionRespond, Message: "c by hand"}).must(t).finished(t, agent.StatusCompleted)
		got := map[string]agent.Origin{}
		for _, m := range e.thread(tr.res.ThreadID).Messages {
			if m.Role == model.RoleTool {
				got[m.ToolCallID] = m.Origin
			}
		}
		want := map[string]agent.Origin{"c1": agent.OriginExecuted, "c2": agent.OriginRejected, "c3": agent.OriginResponded, "c4": agent.OriginInvalidCall}
		if !maps.Equal(got, want) {
			t.Errorf("origins in the log %v, want %v", got, want)
		}
	}},
	{"37_completed_sibling_not_rerun", func(t *testing.T) {
		e := newEnv(t, withFiles(), gate(map[string]profile.InterruptRule{"write_file": {}}))
		e.srv.Script("main", modeltest.Calls(call("c1", "counter", `{}`), call("c2", "write_file", `{"file_path":"/a.txt","content":"x"}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		in := tr.interrupted(t)
		ri := tr.index(func(ev agent.Event) bool { r, ok := ev.Payload.(agent.ToolResultEvent); return ok && r.ID == "c1" })
		if ri < 0 || ri >= len(tr.events)-1 {
			t.Fatalf("stream 1 lacks tool_result c1 before interrupted: %v", tr.kinds(true))
		}
		tr2 := e.resume(tr.res.ThreadID, in.InterruptID, decide("c2", agent.DecisionApprove)).must(t)
		tr2.finished(t, agent.StatusCompleted)
		if e.kit.Count() != 1 {
			t.Errorf("counter = %d, want 1", e.kit.Count())
		}
		if _, again := tr2.results()["c1"]; again {
			t.Error("c1 re-emitted on resume")
		}
		if got := toolOrder(e.thread(tr.res.ThreadID)); !slices.Equal(got, []string{"c1", "c2"}) {
			t.Errorf("log order %v", got)
		}
		req := requestMessages(e.srv.Requests("main")[1])
		if !strings.HasPrefix(req[3], "tool(c1): 1") || !strings.HasPrefix(req[4], "tool(c2): Wrote 1 bytes") {
			t.Errorf("request after resume %q", req)
		}
	}},
	{"38_decision_validation", func(t *testing.T) {
		e := newEnv(t, gate(map[string]profile.InterruptRule{"echo": {}, "counter": {Allowed: []agent.DecisionType{agent.DecisionApprove, agent.DecisionReject}}}))
		e.srv.Script("main", modeltest.Calls(call("c1", "echo", `{"text":"hi"}`), call("c2", "counter", `{}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		in := tr.interrupted(t)
		cases := []struct {
			name   string
			ds     []agent.Decision
			field  string
			substr string
		}{
			{"one decision", []agent.Decision{decide("c1", agent.DecisionApprove)}, "decisions", "got 1 decisions for 2 pending requests; missing: c2"},
			{"unknown id", []agent.Decision{decide("c1", agent.DecisionApprove), decide("zz", agent.DecisionApprove)}, "decisions[1].tool_call_id", "no pending request for tool call zz"},
			{"duplicate", []agent.Decision{decide("c1", agent.DecisionApprove), decide("c1", agent.DecisionReject)}, "decisions[1].tool_call_id", "duplicate decision for c1"},
			{"edit not allowed", []agent.Decision{decide("c1", agent.DecisionApprove), {ToolCallID: "c2", Type: agent.DecisionEdit, EditedArgs: json.RawMessage(`{}`)}}, "decisions[1].type", "decision edit not allowed for c2; allowed: approve, reject"},
			{"edit args not an object", []agent.Decision{{ToolCallID: "c1", Type: agent.DecisionEdit, EditedArgs: json.RawMessage(`[1]`)}, decide("c2", agent.DecisionApprove)}, "decisions[0].edited_args", "edited_args for c1: must be a JSON object"},
			{"edit args violate schema", []agent.Decision{{ToolCallID: "c1", Type: agent.DecisionEdit, EditedArgs: json.RawMessage(`{"txt":1}`)}, decide("c2", agent.DecisionApprove)}, "decisions[0].edited_args", "edited_args for c1: text: required field is missing"},
			{"respond without message", []agent.Decision{decide("c1", agent.DecisionRespond), decide("c2", agent.DecisionApprove)}, "decisions[0].message", "respond for c1 needs message"},
			{"edited args without edit", []agent.Decision{{ToolCallID: "c1", Type: agent.DecisionApprove, EditedArgs: json.RawMessage(`{}`)}, decide("c2", agent.DecisionApprove)}, "decisions[0].edited_args", "edited_args is only valid with EDIT"},
		}
		for _, c := range cases {
			tr2 := e.resume(tr.res.ThreadID, in.InterruptID, c.ds...)
			var de *agent.DecisionError
			if !errors.As(tr2.err, &de) || !errors.Is(tr2.err, agent.ErrInvalidInput) {
				t.Errorf("%s: err = %v, want *DecisionError", c.name, tr2.err)
				continue
			}
			if !slices.ContainsFunc(de.Violations, func(v agent.FieldViolation) bool { return v.Field == c.field && v.Description == c.substr }) {
				t.Errorf("%s: violations %+v, want %s: %q", c.name, de.Violations, c.field, c.substr)
			}
			if len(tr2.events) != 0 {
				t.Errorf("%s: events emitted", c.name)
			}
			if td := e.thread(tr.res.ThreadID); td.Status() != agent.ThreadInterrupted || td.Interrupt.InterruptID != in.InterruptID {
				t.Errorf("%s: thread changed: %s", c.name, td.Status())
			}
		}
	}},
	{"39_run_on_interrupted_thread", func(t *testing.T) {
		e := newEnv(t, gate(map[string]profile.InterruptRule{"echo": {}}))
		e.srv.Script("main", modeltest.Calls(call("c1", "echo", `{"text":"hi"}`)))
		tr := e.run(input("go")).must(t)
		in := tr.interrupted(t)
		tr2 := e.run(agent.RunInput{ThreadID: tr.res.ThreadID, Input: []string{"hi"}})
		var pe *agent.PendingInterruptError
		if !errors.As(tr2.err, &pe) || !errors.Is(tr2.err, agent.ErrPendingInterrupt) || pe.InterruptID != in.InterruptID {
			t.Errorf("err = %v", tr2.err)
		}
		if len(tr2.events) != 0 {
			t.Error("events emitted")
		}
	}},
	{"40_resume_without_pending_interrupt", func(t *testing.T) {
		e := newEnv(t, gate(map[string]profile.InterruptRule{"echo": {}}))
		e.srv.Script("main", modeltest.Text("hi"), modeltest.Calls(call("c1", "echo", `{"text":"hi"}`)))
		tr := e.run(input("go")).must(t)
		if tr2 := e.resume(tr.res.ThreadID, "whatever", decide("c1", agent.DecisionApprove)); !errors.Is(tr2.err, agent.ErrNoPendingInterrupt) {
			t.Errorf("idle thread: err = %v", tr2.err)
		}
		tr = e.run(agent.RunInput{ThreadID: tr.res.ThreadID, Input: []string{"again"}}).must(t)
		in := tr.interrupted(t)
		tr2 := e.resume(tr.res.ThreadID, "stale", decide("c1", agent.DecisionApprove))
		var se *agent.StaleInterruptError
		if !errors.As(tr2.err, &se) || se.Current != in.InterruptID || tr2.err.Error() != "interrupt stale is not pending (current: "+in.InterruptID+")" {
			t.Errorf("stale id: err = %v", tr2.err)
		}
		if tr3 := e.resume("nope", "x"); !errors.Is(tr3.err, agent.ErrThreadNotFound) {
			t.Errorf("unknown thread: err = %v", tr3.err)
		}
	}},
	{"41_abandon_interrupt", func(t *testing.T) {
		e := newEnv(t, gate(map[string]profile.InterruptRule{"echo": {}}))
		e.srv.Script("main", modeltest.Calls(call("c1", "echo", `{"text":"hi"}`)), modeltest.Text("fresh"))
		tr := e.run(input("old task")).must(t)
		tr.interrupted(t)
		tr2 := e.run(agent.RunInput{ThreadID: tr.res.ThreadID, Input: []string{"new task"}, AbandonInterrupt: true}).must(t)
		tr2.finished(t, agent.StatusCompleted)
		got := requestMessages(e.srv.Requests("main")[1])
		want := []string{"user: old task", "assistant:  [c1 echo]", "tool(c1): Tool call echo (c1) did not complete: the run stopped before it returned a result.", "user: new task"}
		if !slices.Equal(got[1:], want) {
			t.Errorf("request = %q\nwant %q", got[1:], want)
		}
		td := e.thread(tr.res.ThreadID)
		if td.Interrupt != nil || td.Status() != agent.ThreadIdle {
			t.Errorf("interrupt not cleared")
		}
	}},
	{"42_crash_recovery", func(t *testing.T) {
		e := newEnv(t)
		ctx := context.Background()
		// A run that died after its MODEL checkpoint, with c1 dangling.
		if err := e.store.CreateThread(ctx, agent.Thread{ID: "t-crash"}); err != nil {
			t.Fatal(err)
		}
		a := agent.Message{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "c1", Name: "sleep", Args: `{"ms":1}`}}}}
		err := e.store.SaveCheckpoint(ctx, &agent.Checkpoint{ThreadID: "t-crash", Phase: agent.PhaseModel, Step: 1,
			Append:  []agent.Message{{Message: model.Message{Role: model.RoleUser, Content: "start"}}, a},
			Pending: &agent.PendingStep{AssistantIndex: 1, Calls: a.ToolCalls},
			Run:     agent.RunRecord{RunID: "r-old", Status: agent.StatusRunning}})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := e.store.FailRunningRuns(ctx, "agentd restarted"); n != 1 || err != nil {
			t.Fatalf("FailRunningRuns = %d, %v", n, err)
		}
		e.srv.Script("main", modeltest.Text("ok"))
		tr := e.run(agent.RunInput{ThreadID: "t-crash", Input: []string{"continue"}}).must(t)
		tr.finished(t, agent.StatusCompleted)
		got := requestMessages(e.srv.Requests("main")[0])[1:]
		want := []string{"user: start", "assistant:  [c1 sleep]", "tool(c1): Tool call sleep (c1) did not complete: the run stopped before it returned a result.", "user: continue"}
		if !slices.Equal(got, want) {
			t.Errorf("request = %q", got)
		}
		td := e.thread("t-crash")
		var patched *agent.Message
		for i := range td.Messages {
			if td.Messages[i].Source == agent.SourcePatch {
				patched = &td.Messages[i]
			}
		}
		if patched == nil || !patched.IsError || patched.ToolCallID != "c1" {
			t.Errorf("patch not persisted: %+v", td.Messages)
		}
	}},
	{"43_subagent_interrupt", func(t *testing.T) {
		e := newEnv(t, withSubagents(map[string]profile.Profile{"ops": {
			Description: "Operations.", InterruptOn: map[string]profile.InterruptRule{"echo": {}},
		}}))
		e.srv.Script("main", modeltest.Calls(task("t1", "ops", "deploy")), modeltest.Text("done"))
		e.srv.Script("main/ops", modeltest.Calls(call("s1", "counter", `{}`)), modeltest.Calls(call("e1", "echo", `{"text":"deploying"}`)), modeltest.Text("deployed"))
		tr := e.run(input("go")).must(t)
		tr.checkEnvelope(t, 1)
		in := tr.interrupted(t)
		if len(in.Requests) != 1 || in.Requests[0].AgentPath != "main/ops" || in.Requests[0].ParentToolCallID != "t1" || in.Requests[0].ToolCallID != "e1" {
			t.Fatalf("requests %+v", in.Requests)
		}
		if slices.Contains(tr.kinds(false), "subagent_finished") {
			t.Error("suspended subagent finished")
		}
		before := e.srv.Count("main/ops")
		tr2 := e.resume(tr.res.ThreadID, in.InterruptID, agent.Decision{ToolCallID: "e1", AgentPath: "main/ops", Type: agent.DecisionApprove}).must(t)
		tr2.checkEnvelope(t, tr.events[len(tr.events)-1].Sequence+1)
		if after := e.srv.Count("main/ops"); before != 2 || after != 3 {
			t.Errorf("sub requests %d before, %d after resume; want 2, 3", before, after)
		}
		if s, ok := tr2.events[1].Payload.(agent.SubagentStarted); !ok || !s.Resumed || tr2.events[1].ParentToolCallID != "t1" {
			t.Errorf("second event %+v, want subagent_started{resumed}", tr2.events[1])
		}
		if r := tr2.result(t, "t1"); r.Content != "deployed" {
			t.Errorf("t1 %+v", r)
		}
		n := 0
		for _, ev := range append(slices.Clone(tr.events), tr2.events...) {
			if s, ok := ev.Payload.(agent.ToolCallStarted); ok && s.ID == "t1" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d tool_call_started for t1", n)
		}
		if e.kit.Count() != 1 {
			t.Errorf("counter ran %d times", e.kit.Count())
		}
		tr2.finished(t, agent.StatusCompleted)
		golden(t, "43_subagent_interrupt", tr, tr2)
	}},
	{"44_parallel_task_with_interrupt", func(t *testing.T) {
		e := newEnv(t, withSubagents(map[string]profile.Profile{"ops": {
			Description: "Operations.", InterruptOn: map[string]profile.InterruptRule{"echo": {}},
		}}))
		e.srv.Script("main", modeltest.Calls(task("t1", "general-purpose", "a"), task("t2", "ops", "b")), modeltest.Text("done"))
		e.srv.Script("main/general-purpose", modeltest.Text("A"))
		e.srv.Script("main/ops", modeltest.Calls(call("e1", "echo", `{"text":"x"}`)), modeltest.Text("B"))
		tr := e.run(input("go")).must(t)
		in := tr.interrupted(t)
		if r := tr.result(t, "t1"); r.Content != "A" {
			t.Errorf("t1 %+v", r)
		}
		tr2 := e.resume(tr.res.ThreadID, in.InterruptID, decide("e1", agent.DecisionApprove)).must(t)
		tr2.finished(t, agent.StatusCompleted)
		if n := e.srv.Count("main/general-purpose"); n != 1 {
			t.Errorf("t1's subagent ran %d times", n)
		}
		if got := toolOrder(e.thread(tr.res.ThreadID)); !slices.Equal(got, []string{"t1", "t2"}) {
			t.Errorf("log order %v", got)
		}
	}},
	{"45_client_tool", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(call("c1", "get_location", `{}`)), modeltest.Text("in Paris"))
		tr := e.run(agent.RunInput{Input: []string{"where am I?"}, Spec: agent.RunSpec{ClientTools: []agent.ClientToolDef{locationTool}}}).must(t)
		in := tr.interrupted(t)
		if len(in.Requests) != 1 || in.Requests[0].Kind != agent.InterruptClientTool ||
			!slices.Equal(in.Requests[0].Allowed, []agent.DecisionType{agent.DecisionRespond, agent.DecisionReject}) {
			t.Fatalf("requests %+v", in.Requests)
		}
		if !slices.Contains(requestTools(e.srv.Requests("main")[0]), "get_location") {
			t.Error("client tool not offered")
		}
		tr2 := e.resume(tr.res.ThreadID, in.InterruptID, agent.Decision{ToolCallID: "c1", Type: agent.DecisionRespond, Message: "Paris"}).must(t)
		kinds := tr2.kinds(true)
		if want := []string{"run_started", "tool_call_started", "tool_result", "message", "run_finished"}; !slices.Equal(kinds, want) {
			t.Errorf("stream 2 %v, want %v", kinds, want)
		}
		if r := tr2.result(t, "c1"); r.Content != "Paris" || r.IsError || r.Origin != agent.OriginResponded {
			t.Errorf("c1 %+v", r)
		}
		if f := tr2.finished(t, agent.StatusCompleted); f.FinalText != "in Paris" {
			t.Errorf("final %q", f.FinalText)
		}
		golden(t, "45_client_tool", tr, tr2)
	}},
	{"46_client_tool_error_response", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(call("c1", "get_location", `{}`)), modeltest.Text("no GPS"))
		tr := e.run(agent.RunInput{Input: []string{"where?"}, Spec: agent.RunSpec{ClientTools: []agent.ClientToolDef{locationTool}}}).must(t)
		in := tr.interrupted(t)
		tr2 := e.resume(tr.res.ThreadID, in.InterruptID, agent.Decision{ToolCallID: "c1", Type: agent.DecisionRespond, Message: "GPS off", IsError: true}).must(t)
		if r := tr2.result(t, "c1"); !r.IsError || r.Content != "GPS off" {
			t.Errorf("c1 %+v", r)
		}
		// Client tools survive the interrupt: the run record keeps them.
		if !slices.Contains(requestTools(e.srv.Requests("main")[1]), "get_location") {
			t.Error("client tool lost after resume")
		}
	}},
	{"48_client_and_approval_in_one_turn", func(t *testing.T) {
		e := newEnv(t, gate(map[string]profile.InterruptRule{"echo": {}}))
		e.srv.Script("main", modeltest.Calls(call("c1", "get_location", `{}`), call("c2", "echo", `{"text":"x"}`)), modeltest.Text("ok"))
		tr := e.run(agent.RunInput{Input: []string{"go"}, Spec: agent.RunSpec{ClientTools: []agent.ClientToolDef{locationTool}}}).must(t)
		in := tr.interrupted(t)
		if len(in.Requests) != 2 || in.Requests[0].Kind != agent.InterruptClientTool || in.Requests[1].Kind != agent.InterruptApproval {
			t.Fatalf("requests %+v", in.Requests)
		}
		tr2 := e.resume(tr.res.ThreadID, in.InterruptID,
			agent.Decision{ToolCallID: "c1", Type: agent.DecisionRespond, Message: "Paris"}, decide("c2", agent.DecisionApprove)).must(t)
		tr2.finished(t, agent.StatusCompleted)
	}},
}
