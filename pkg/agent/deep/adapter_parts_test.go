package deep_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// TestAdapterScenarioParts covers the agent-core side of scenarios whose
// full form needs the gRPC adapter (47, 73) and the ListAgents data.
func TestAdapterScenarioParts(t *testing.T) {
	t.Run("47_client_tool_clash", func(t *testing.T) {
		e := newEnv(t, withFiles())
		tr := e.run(agent.RunInput{Input: []string{"go"}, Spec: agent.RunSpec{ClientTools: []agent.ClientToolDef{{Name: "read_file"}}}})
		if !errors.Is(tr.err, agent.ErrInvalidInput) || len(tr.events) != 0 {
			t.Errorf("err = %v, %d events", tr.err, len(tr.events))
		}
	})
	t.Run("73_thread_busy", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"ms":10000}`)))
		ctx, cancel := context.WithCancel(t.Context())
		started := make(chan string, 1)
		done := make(chan *agent.RunResult, 1)
		go func() {
			res, _ := e.rt.Run(ctx, input("go"), func(ev agent.Event) {
				if _, ok := ev.Payload.(agent.ToolCallStarted); ok {
					started <- ev.ThreadID
				}
			})
			done <- res
		}()
		var thread string
		select {
		case thread = <-started:
		case <-time.After(5 * time.Second):
			t.Fatal("first run did not start its tool")
		}
		tr := e.run(agent.RunInput{ThreadID: thread, Input: []string{"again"}})
		if !errors.Is(tr.err, agent.ErrThreadBusy) {
			t.Errorf("second run: %v", tr.err)
		}
		if !e.rt.Runner().Active(thread) {
			t.Error("thread not active")
		}
		cancel()
		if res := <-done; res.Status != agent.StatusCancelled {
			t.Errorf("first run %s", res.Status)
		}
	})
	t.Run("list_agents", func(t *testing.T) {
		e := newEnv(t, withSubagents(map[string]profile.Profile{"researcher": researcher}))
		var names []string
		for _, a := range e.rt.ListAgents() {
			names = append(names, string(a.Kind)+":"+a.Name)
			if a.Name == "researcher" && (a.Model != "fast" || !slices.Equal(a.Subagents, []string{"explore"})) {
				t.Errorf("researcher %+v", a)
			}
			if a.Name == "main" && (a.Model != "smart" || len(a.Subagents) != 4) {
				t.Errorf("main %+v", a)
			}
		}
		want := []string{"PRIMARY:main", "PRIMARY:plan", "SUBAGENT:bash", "SUBAGENT:explore", "SUBAGENT:general-purpose", "SUBAGENT:researcher"}
		if !slices.Equal(names, want) {
			t.Errorf("agents %v", names)
		}
	})
	t.Run("plan_agent_is_read_only", func(t *testing.T) {
		e := newEnv(t, withFiles())
		e.srv.Script("plan", modeltest.Text("a plan"))
		tr := e.run(agent.RunInput{Input: []string{"plan it"}, Spec: agent.RunSpec{Agent: "plan"}}).must(t)
		tr.finished(t, agent.StatusCompleted)
		got := requestTools(e.srv.Requests("plan")[0])
		if want := []string{"glob", "grep", "ls", "read_file", "task", "write_todos"}; !slices.Equal(got, want) {
			t.Errorf("plan tools %v, want %v", got, want)
		}
		if tr.events[0].AgentPath != "plan" {
			t.Errorf("agent path %q", tr.events[0].AgentPath)
		}
	})
	t.Run("unknown_agent", func(t *testing.T) {
		e := newEnv(t)
		if tr := e.run(agent.RunInput{Input: []string{"x"}, Spec: agent.RunSpec{Agent: "nope"}}); !errors.Is(tr.err, agent.ErrInvalidInput) {
			t.Errorf("err = %v", tr.err)
		}
		if tr := e.run(agent.RunInput{Input: []string{"x"}, Spec: agent.RunSpec{Model: "nope"}}); !errors.Is(tr.err, agent.ErrInvalidInput) {
			t.Errorf("err = %v", tr.err)
		}
		if tr := e.run(agent.RunInput{}); !errors.Is(tr.err, agent.ErrInvalidInput) {
			t.Errorf("empty input: err = %v", tr.err)
		}
		if tr := e.run(agent.RunInput{ThreadID: "missing", Input: []string{"x"}}); !errors.Is(tr.err, agent.ErrThreadNotFound) {
			t.Errorf("unknown thread: err = %v", tr.err)
		}
	})
}
