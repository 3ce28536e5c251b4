package agent_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// provider is a middleware whose tools appear at run start.
type provider struct {
	agent.BaseMiddleware
	err      error
	runs     atomic.Int32
	released atomic.Int32
}

func (*provider) Name() string { return "provider" }

func (p *provider) RunTools(_ context.Context, rc *agent.RunContext) ([]agent.Tool, func(), error) {
	p.runs.Add(1)
	release := func() { p.released.Add(1) }
	if p.err != nil {
		return nil, release, p.err
	}
	return []agent.Tool{
		{
			Name: "dyn_echo", Description: "echo from " + rc.RunID,
			Schema: []byte(`{"type":"object","required":["text"],"properties":{"text":{"type":"string"}}}`),
			Func: func(_ context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
				var a struct{ Text string }
				if err := req.DecodeArgs(&a); err != nil {
					return agent.ToolResult{}, err
				}
				return agent.ToolResult{Content: "dyn:" + a.Text}, nil
			},
		},
		{Name: "dyn_denied", Func: func(context.Context, *agent.ToolRequest) (agent.ToolResult, error) {
			return agent.ToolResult{Content: "should not run"}, nil
		}},
	}, release, nil
}

// TestToolProvider: tools a ToolProvider returns at run start are offered
// to the model, filtered by the allow-list, validated like any tool and
// callable; the provider's release runs once the run ends, and a
// provider error fails the run with INTERNAL.
func TestToolProvider(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{name: "tools"},
		{name: "error", err: errors.New("boom")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			p := &provider{err: tc.err}
			h.mw = func() []agent.Middleware { return []agent.Middleware{p} }
			runner := agent.NewRunner(agent.NewMemoryStore(), func(_ context.Context, _ agent.ConfigureRequest) (*agent.Config, error) {
				return &agent.Config{
					Agent: "main", Model: modelOf(t, h), Middleware: h.mw(),
					Allow: func(name string) bool { return name != "dyn_denied" },
				}, nil
			})
			h.srv.Script("main",
				modeltest.Calls(
					modeltest.Call{ID: "c1", Name: "dyn_echo", Args: `{"text":"hi"}`},
					modeltest.Call{ID: "c2", Name: "dyn_echo", Args: `{}`},
					modeltest.Call{ID: "c3", Name: "dyn_denied", Args: `{}`},
				),
				modeltest.Text("ok"))
			var rec recorder
			res, err := runner.Run(context.Background(), agent.RunInput{Input: []string{"go"}}, rec.sink)
			if err != nil {
				t.Fatal(err)
			}
			if p.runs.Load() != 1 || p.released.Load() != 1 {
				t.Errorf("RunTools called %d times, released %d times; want 1 and 1", p.runs.Load(), p.released.Load())
			}
			if tc.err != nil {
				if res.Status != agent.StatusFailed || res.Error == nil || res.Error.Code != agent.CodeInternal || !strings.Contains(res.Error.Message, "boom") {
					t.Errorf("result %+v, error %+v", res, res.Error)
				}
				return
			}
			results := map[string]agent.ToolResultEvent{}
			for _, e := range rec.all() {
				if r, ok := e.Payload.(agent.ToolResultEvent); ok {
					results[r.ID] = r
				}
			}
			if r := results["c1"]; r.IsError || r.Content != "dyn:hi" {
				t.Errorf("c1 = %+v", r)
			}
			if r := results["c2"]; !r.IsError || !strings.Contains(r.Content, "Invalid arguments for dyn_echo") {
				t.Errorf("c2 = %+v", r)
			}
			if r := results["c3"]; !r.IsError || !strings.Contains(r.Content, `Unknown tool "dyn_denied"`) {
				t.Errorf("c3 = %+v", r)
			}
			var names []string
			for _, tool := range h.srv.Requests("main")[0].Body.Tools {
				names = append(names, tool.Function.Name)
			}
			if !slices.Equal(names, []string{"dyn_echo"}) {
				t.Errorf("tools offered %v, want [dyn_echo]", names)
			}
			if res.Status != agent.StatusCompleted {
				t.Errorf("status %s", res.Status)
			}
		})
	}
}
