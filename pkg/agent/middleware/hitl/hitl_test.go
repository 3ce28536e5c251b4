package hitl

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/tools"
	"github.com/plumbhq/plumb/pkg/model"
)

// gated calls tool t through m and returns the interrupt's description,
// or "" when the call ran.
func gated(t *testing.T, m *Middleware, tool agent.Tool) string {
	t.Helper()
	ran := false
	h := m.WrapTool(func(context.Context, *agent.ToolRequest) (agent.ToolResult, error) {
		ran = true
		return agent.ToolResult{}, nil
	})
	_, err := h(context.Background(), &agent.ToolRequest{Call: model.ToolCall{ID: "c", Name: tool.Name, Args: "{}"}, Tool: &tool})
	var in *agent.Interrupt
	switch {
	case errors.As(err, &in):
		if ran {
			t.Fatalf("%s: interrupted and ran", tool.Name)
		}
		return in.Description
	case err != nil:
		t.Fatalf("%s: %v", tool.Name, err)
	}
	if !ran {
		t.Fatalf("%s: neither ran nor interrupted", tool.Name)
	}
	return ""
}

// TestGatesCoverWhatCanDoAsMuch: a gate on a tool also gates every tool
// whose capabilities include all of the gated tool's (python and a stdio
// MCP server's tools under a gate on execute, python under a gate on
// delete), with the gate's settings; the built-in file tools and execute
// are decided by their own keys only; an exact entry, then the longest
// pattern, win over that, and `false` exempts a tool from both patterns
// and capability gates.
func TestGatesCoverWhatCanDoAsMuch(t *testing.T) {
	capsOf := func(key string) agent.Capability {
		if tools.IsPattern(key) {
			return 0
		}
		return tools.CapabilitiesOf(key, nil)
	}
	m := New(map[string]Rule{
		"execute":            {Description: "Shell command"},
		"delete":             {},
		"mcp__gh__*":         {Description: "GitHub"},
		"mcp__gh__get_issue": {Off: true},
		"mcp__box__safe":     {Off: true},
		"edit_file":          {Off: true},
	}, capsOf)
	stdioMCP := agent.Tool{Name: "mcp__box__run", Capabilities: agent.CapAll}
	cases := []struct {
		tool agent.Tool
		want string // "" = ungated
	}{
		{agent.Tool{Name: "execute"}, "Shell command"},
		{agent.Tool{Name: "python"}, "Shell command"},
		{stdioMCP, "Shell command"},
		{agent.Tool{Name: "mcp__box__safe", Capabilities: agent.CapAll}, ""},
		{agent.Tool{Name: "delete"}, "Approval required: delete"},
		{agent.Tool{Name: "write_file"}, ""},
		{agent.Tool{Name: "edit_file"}, ""},
		{agent.Tool{Name: "read_file"}, ""},
		{agent.Tool{Name: "web_search", Capabilities: agent.CapNetwork}, ""},
		{agent.Tool{Name: "mcp__gh__create_issue", Capabilities: agent.CapNetwork}, "GitHub"},
		{agent.Tool{Name: "mcp__gh__get_issue", Capabilities: agent.CapNetwork}, ""},
		{agent.Tool{Name: "write_todos"}, ""},
	}
	for _, c := range cases {
		if got := gated(t, m, c.tool); got != c.want {
			t.Errorf("%s: gate %q, want %q", c.tool.Name, got, c.want)
		}
	}
	// Without a capability resolver gates are by name only.
	if got := gated(t, New(map[string]Rule{"execute": {}}, nil), agent.Tool{Name: "python"}); got != "" {
		t.Errorf("python gated by name-only rules: %q", got)
	}
	// Of two covering gates the one guarding more applies.
	m = New(map[string]Rule{"write_file": {Description: "writes"}, "execute": {Description: "runs"}}, capsOf)
	if got := gated(t, m, agent.Tool{Name: "python"}); got != "runs" {
		t.Errorf("python under write_file and execute gates: %q, want the execute gate", got)
	}
	if got := gated(t, m, agent.Tool{Name: "delete"}); got != "" {
		t.Errorf("delete under a write_file gate: %q, want ungated (decided by its own key)", got)
	}
	m = New(map[string]Rule{"write_file": {Description: "writes"}}, capsOf)
	if got := gated(t, m, agent.Tool{Name: "python"}); got != "writes" {
		t.Errorf("python under a write_file gate: %q, want the write_file gate", got)
	}
	if got := gated(t, m, agent.Tool{Name: "execute"}); got != "" {
		t.Errorf("execute under a write_file gate: %q, want ungated (decided by its own key)", got)
	}
	if got := gated(t, m, agent.Tool{Name: "mcp__box__run", Capabilities: agent.CapAll}); !strings.Contains(got, "writes") {
		t.Errorf("a stdio MCP tool under a write_file gate: %q", got)
	}
}
