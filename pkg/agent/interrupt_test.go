package agent_test

import (
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
)

func TestDecidedResultReject(t *testing.T) {
	cases := []struct {
		name, message, want string
	}{
		{"no reason", "", "The user rejected this delete call. Do not retry it unchanged."},
		{"reason without a full stop", "wrong file", "The user rejected this delete call. Reason: wrong file. Do not retry it unchanged."},
		{"reason with a full stop", "Wrong file.", "The user rejected this delete call. Reason: Wrong file. Do not retry it unchanged."},
		{"reason ending in a question mark", "why delete it?", "The user rejected this delete call. Reason: why delete it? Do not retry it unchanged."},
		{"reason ending in an ellipsis", "not yet…", "The user rejected this delete call. Reason: not yet… Do not retry it unchanged."},
		{"reason with surrounding space", "  wrong file \n", "The user rejected this delete call. Reason: wrong file. Do not retry it unchanged."},
		{"blank reason", " \n", "The user rejected this delete call. Do not retry it unchanged."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, ok := agent.DecidedResult("delete", agent.Decision{ToolCallID: "c1", Type: agent.DecisionReject, Message: c.message})
			if !ok || !res.IsError || res.Origin != agent.OriginRejected {
				t.Fatalf("result %+v, ok %v", res, ok)
			}
			if res.Content != c.want {
				t.Errorf("content %q, want %q", res.Content, c.want)
			}
		})
	}
}
