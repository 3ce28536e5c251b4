package hooks

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
)

func TestValidate(t *testing.T) {
	bad := []Hook{
		{Phase: "pre", Action: "block", Tools: []string{"x"}},
		{Name: "a", Phase: "pre", Action: "redact", Tools: []string{"x"}},
		{Name: "a", Phase: "pre", Action: "block"},
		{Name: "a", Phase: "pre", Action: "block", Tools: []string{"["}},
		{Name: "a", Phase: "pre", Action: "block", Tools: []string{"x"}, Match: &Match{Arg: "command", Regex: "x"}},
		{Name: "a", Phase: "pre", Action: "block", Tools: []string{"x"}, Match: &Match{Regex: "("}},
		{Name: "a", Phase: "post", Action: "redact", Tools: []string{"x"}},
	}
	for i, h := range bad {
		if err := Validate([]Hook{h}); err == nil {
			t.Errorf("case %d validated: %+v", i, h)
		}
	}
}

func TestWrapTool(t *testing.T) {
	m, err := New([]Hook{
		{Name: "no-root-rm", Phase: "pre", Tools: []string{"exec*"}, Match: &Match{Arg: "/command", Regex: `rm\s+-rf\s+/(\s|$)`}, Action: "block", Message: "refusing"},
		{Name: "nested", Phase: "pre", Tools: []string{"deep"}, Match: &Match{Arg: "/a/0/b~1c", Regex: "^x$"}, Action: "block"},
		{Name: "mask-keys", Phase: "post", Tools: []string{"*"}, Match: &Match{Regex: `sk-[A-Za-z0-9]{20,}`}, Action: "redact", Replacement: "[redacted]"},
	}, nil, WithPre(func(_ context.Context, c model.ToolCall) (bool, string, json.RawMessage) {
		if c.Name == "rewrite" {
			return false, "", json.RawMessage(`{"rewritten":true}`)
		}
		return c.Name == "forbidden", "no way", nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	h := m.WrapTool(func(_ context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
		ran++
		return agent.ToolResult{Content: "args " + req.Call.Args + " key sk-abcdefghijklmnopqrstuvwxyz"}, nil
	})
	cases := []struct {
		name, args, want string
		blocked          bool
	}{
		{"execute", `{"command":"rm -rf /"}`, "blocked by hook no-root-rm: refusing", true},
		{"execute", `{"command":"rm -rf /tmp/x"}`, `args {"command":"rm -rf /tmp/x"} key [redacted]`, false},
		{"deep", `{"a":[{"b/c":"x"}]}`, "blocked by hook nested", true},
		{"deep", `{"a":[{"b/c":"y"}]}`, `args {"a":[{"b/c":"y"}]} key [redacted]`, false},
		{"forbidden", `{}`, "blocked by hook go-hook-1: no way", true},
		{"rewrite", `{}`, `args {"rewritten":true} key [redacted]`, false},
	}
	for _, c := range cases {
		before := ran
		res, err := h(context.Background(), &agent.ToolRequest{Call: model.ToolCall{ID: "c", Name: c.name, Args: c.args}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Content != c.want {
			t.Errorf("%s %s: %q, want %q", c.name, c.args, res.Content, c.want)
		}
		if c.blocked != (res.Origin == agent.OriginBlocked && res.IsError && ran == before) {
			t.Errorf("%s %s: blocked=%v, result %+v", c.name, c.args, c.blocked, res)
		}
	}
	// A rejected call is not checked (it will not run).
	res, _ := h(context.Background(), &agent.ToolRequest{Call: model.ToolCall{Name: "execute", Args: `{"command":"rm -rf /"}`}, Decision: &agent.Decision{Type: agent.DecisionReject}})
	if res.Origin == agent.OriginBlocked {
		t.Error("rejected call was checked by pre hooks")
	}
}
