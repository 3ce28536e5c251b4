package agent_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

func TestDanglingCallResult(t *testing.T) {
	cases := []struct {
		c          model.ToolCall
		name, want string
	}{
		{model.ToolCall{ID: "c1", Name: "ls", Args: `{}`}, "ls", "Tool call ls (c1) did not complete: the run stopped before it returned a result."},
		{model.ToolCall{ID: "c2", Name: "", Args: ``}, "unknown", "Tool call unknown (c2) did not complete: the run stopped before it returned a result."},
		{model.ToolCall{ID: "c3", Name: "read_file", Args: `{"file_path":"/a`}, "read_file", "Tool call read_file (c3) was never executed: its arguments were not valid JSON."},
	}
	for _, c := range cases {
		got := agent.DanglingCallResult(c.c)
		if got.Role != model.RoleTool || got.ToolCallID != c.c.ID || got.Name != c.name || got.Content != c.want {
			t.Errorf("%+v: %+v", c.c, got)
		}
	}
}

// render shows messages as "role:id" (tool messages) or "role" with the
// ids of the calls, "tool:id=text" for synthetic results.
func render(msgs []model.Message) string {
	var out []string
	for _, m := range msgs {
		s := string(m.Role)
		for _, c := range m.ToolCalls {
			s += " " + c.ID
		}
		if m.Role == model.RoleTool {
			s += ":" + m.ToolCallID
			if strings.HasPrefix(m.Content, "Tool call ") {
				s += "=patched"
			}
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

func TestPairToolCalls(t *testing.T) {
	user := model.Message{Role: model.RoleUser, Content: "u"}
	asst := func(ids ...string) model.Message {
		m := model.Message{Role: model.RoleAssistant}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, model.ToolCall{ID: id, Name: "echo", Args: `{}`})
		}
		return m
	}
	tool := func(id string) model.Message {
		return model.Message{Role: model.RoleTool, ToolCallID: id, Content: "r"}
	}
	cases := []struct {
		name                string
		in                  []model.Message
		want                string
		unanswered, orphans int
	}{
		{"paired", []model.Message{user, asst("a", "b"), tool("a"), tool("b"), asst()},
			"user, assistant a b, tool:a, tool:b, assistant", 0, 0},
		{"unanswered call", []model.Message{user, asst("a", "b"), tool("b"), user},
			"user, assistant a b, tool:a=patched, tool:b, user", 1, 0},
		{"orphan result", []model.Message{tool("x"), user, asst("a"), tool("a"), tool("ghost")},
			"user, assistant a, tool:a", 0, 2},
		{"result after a later message", []model.Message{user, asst("a", "b"), tool("b"), user, tool("a")},
			"user, assistant a b, tool:a, tool:b, user", 0, 0},
		{"result before its call", []model.Message{user, tool("a"), asst("a")},
			"user, assistant a, tool:a=patched", 1, 1},
		{"reused id", []model.Message{asst("a"), tool("a"), asst("a"), user},
			"assistant a, tool:a, assistant a, tool:a=patched, user", 1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, unanswered, orphans := agent.PairToolCalls(c.in)
			if got := render(out); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
			if unanswered != c.unanswered || orphans != c.orphans {
				t.Errorf("unanswered %d, orphans %d; want %d, %d", unanswered, orphans, c.unanswered, c.orphans)
			}
		})
	}
}

// requestEditor rewrites the messages of every model request after the
// first: a middleware that breaks the pairing.
type requestEditor struct {
	agent.BaseMiddleware
	edit func([]model.Message) []model.Message
}

func (requestEditor) Name() string { return "editor" }

func (m requestEditor) WrapModel(next agent.ModelHandler) agent.ModelHandler {
	return func(ctx context.Context, req *agent.ModelRequest) (model.Response, error) {
		if len(req.Messages) == 1 {
			return next(ctx, req)
		}
		r := *req
		r.Messages = m.edit(slices.Clone(req.Messages))
		return next(ctx, &r)
	}
}

// TestModelBoundaryPairsToolCalls: whatever the middleware sends down the
// chain, the request on the wire pairs every call with one result.
func TestModelBoundaryPairsToolCalls(t *testing.T) {
	cases := []struct {
		name string
		edit func([]model.Message) []model.Message
		want string
	}{
		{"dropped result", func(ms []model.Message) []model.Message { return ms[:len(ms)-1] },
			"user, assistant c1 c2, tool:c1, tool:c2=patched"},
		{"orphan result", func(ms []model.Message) []model.Message {
			return append(ms, model.Message{Role: model.RoleTool, ToolCallID: "ghost", Content: "boo"})
		}, "user, assistant c1 c2, tool:c1, tool:c2"},
		{"result moved after a user message", func(ms []model.Message) []model.Message {
			return append(append(ms[:2:2], ms[3], model.Message{Role: model.RoleUser, Content: "more"}), ms[2])
		}, "user, assistant c1 c2, tool:c1, tool:c2, user"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.mw = func() []agent.Middleware { return []agent.Middleware{requestEditor{edit: c.edit}} }
			h.srv.Script("main", modeltest.Calls(
				modeltest.Call{ID: "c1", Name: "echo", Args: `{"text":"1"}`},
				modeltest.Call{ID: "c2", Name: "echo", Args: `{"text":"2"}`}),
				modeltest.Text("ok"))
			var rec recorder
			if _, err := h.runner.Run(context.Background(), agent.RunInput{Input: []string{"go"}}, rec.sink); err != nil {
				t.Fatal(err)
			}
			reqs := h.srv.Requests("main")
			if len(reqs) != 2 {
				t.Fatalf("%d requests", len(reqs))
			}
			var got []model.Message
			for _, m := range reqs[1].Body.Messages {
				var calls []model.ToolCall
				for _, c := range m.ToolCalls {
					calls = append(calls, model.ToolCall{ID: c.ID})
				}
				got = append(got, model.Message{Role: model.Role(m.Role), ToolCallID: m.ToolCallID, Content: m.Content, ToolCalls: calls})
			}
			if s := render(got); s != c.want {
				t.Errorf("request 2: %s\nwant       %s", s, c.want)
			}
		})
	}
}
