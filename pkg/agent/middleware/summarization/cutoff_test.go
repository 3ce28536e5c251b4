package summarization

import (
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
)

// view builds an effective view from a compact spec: S = summary message,
// U = user, A<n> = assistant with n calls, T = tool result.
func view(spec ...string) []agent.ViewMessage {
	var out []agent.ViewMessage
	idx := 0
	for _, s := range spec {
		v := agent.ViewMessage{Index: idx}
		switch s[0] {
		case 'S':
			v.Index = -1
			v.Role = model.RoleUser
			idx--
		case 'U':
			v.Role = model.RoleUser
		case 'A':
			v.Role = model.RoleAssistant
			for range int(s[1] - '0') {
				v.ToolCalls = append(v.ToolCalls, model.ToolCall{ID: "c", Name: "echo"})
			}
		case 'T':
			v.Role = model.RoleTool
		}
		idx++
		out = append(out, v)
	}
	return out
}

func TestCutoff(t *testing.T) {
	m := New(Config{})
	cases := []struct {
		name string
		v    []agent.ViewMessage
		lo   int
		keep int
		want int
	}{
		// Scenario 50: the naive cutoff lands on result 2 of a 3-call
		// batch; the kept tail starts with the assistant message.
		{"50_back_to_assistant", view("U", "A3", "T", "T", "T", "A1", "T"), 0, 4, 1},
		// Scenario 51: the only cut point lies inside the first tool block
		// after the summary; move forward past the block.
		{"51_forward_past_block", view("S", "A2", "T", "T", "A1", "T", "U"), 1, 4, 4},
		// Scenario 51: nothing left to keep after moving forward.
		{"51_nothing_to_keep", view("S", "A3", "T", "T", "T"), 1, 2, 5},
		{"plain", view("U", "A1", "T", "A1", "T", "U"), 0, 2, 3},
		{"keep everything", view("U", "A1", "T"), 0, 6, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := m.cutoff(c.v, c.lo, 0, c.keep); got != c.want {
				t.Errorf("cutoff = %d, want %d", got, c.want)
			}
		})
	}
}

func TestTrigger(t *testing.T) {
	cases := []struct {
		cfg  Config
		want int
		keep int
	}{
		{Config{}, 170000, 0},
		{Config{ContextWindow: 32768}, 27852, 3276},
		{Config{ContextWindow: 1047576, TriggerMaxTokens: 120000}, 120000, 30000},
		{Config{TriggerTokens: 3000}, 3000, 0},
	}
	for _, c := range cases {
		cfg := c.cfg.withDefaults()
		if got := cfg.Trigger(); got != c.want {
			t.Errorf("%+v: trigger %d, want %d", c.cfg, got, c.want)
		}
		if got := cfg.keepTokens(); got != c.keep {
			t.Errorf("%+v: keep %d, want %d", c.cfg, got, c.keep)
		}
	}
}
