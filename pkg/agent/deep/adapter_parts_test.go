package deep_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// TestAdapterScenarioParts covers scenarios 47 and 73, which hinge on the
// gRPC adapter's own checks, and ListAgents.
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
		e.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"ms":60000}`)))
		s, err := e.c.Run(e.ctx(), runRequest(input("go")))
		if err != nil {
			t.Fatal(err)
		}
		var thread string
		for thread == "" {
			m, err := s.Recv()
			if err != nil {
				t.Fatalf("first run ended before its tool started: %v", err)
			}
			if m.GetEvent().GetToolCallStarted() != nil {
				thread = m.GetEvent().GetThreadId()
			}
		}
		tr := e.run(agent.RunInput{ThreadID: thread, Input: []string{"again"}})
		if !errors.Is(tr.err, agent.ErrThreadBusy) || len(tr.events) != 0 {
			t.Errorf("second run: %v, %d events", tr.err, len(tr.events))
		}
		if th, err := e.c.GetThread(e.ctx(), &plumbv1.GetThreadRequest{ThreadId: thread}); err != nil || th.GetThread().GetStatus() != plumbv1.ThreadStatus_THREAD_STATUS_RUNNING {
			t.Errorf("thread not running: %v, %v", th, err)
		}
		if _, err := e.c.Cancel(e.ctx(), &plumbv1.CancelRequest{ThreadId: thread}); err != nil {
			t.Fatal(err)
		}
		rest := receive(t, s, nil)
		if rest.err != nil {
			t.Fatal(rest.err)
		}
		rest.finished(t, agent.StatusCancelled)
	})
	t.Run("list_agents", func(t *testing.T) {
		e := newEnv(t, withSubagents(map[string]profile.Profile{"researcher": researcher}))
		res, err := e.c.ListAgents(e.ctx(), &plumbv1.ListAgentsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, a := range res.GetAgents() {
			names = append(names, strings.TrimPrefix(a.GetKind().String(), "AGENT_KIND_")+":"+a.GetName())
			if a.GetName() == "researcher" && (a.GetModel() != "fast" || !slices.Equal(a.GetSubagents(), []string{"explore"})) {
				t.Errorf("researcher %v", a)
			}
			if a.GetName() == "main" && (a.GetModel() != "smart" || len(a.GetSubagents()) != 4) {
				t.Errorf("main %v", a)
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
