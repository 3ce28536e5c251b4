package patchcalls

import (
	"context"
	"testing"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
)

func TestBeforeAgent(t *testing.T) {
	msg := func(role model.Role, calls ...model.ToolCall) agent.Message {
		return agent.Message{Message: model.Message{Role: role, ToolCalls: calls}}
	}
	tool := func(id string) agent.Message {
		return agent.Message{Message: model.Message{Role: model.RoleTool, ToolCallID: id, Content: "r"}}
	}
	st := agent.RestoreState(agent.Snapshot{
		Messages: []agent.Message{
			msg(model.RoleUser),
			msg(model.RoleAssistant, model.ToolCall{ID: "a", Name: "x"}, model.ToolCall{ID: "b", Name: "y"}, model.ToolCall{ID: "c", Name: "z"}),
			tool("b"),
			msg(model.RoleUser),
			msg(model.RoleAssistant, model.ToolCall{ID: "p", Name: "gated"}),
		},
		// The call being resumed is not dangling.
		Pending: &agent.PendingStep{AssistantIndex: 4, Calls: []model.ToolCall{{ID: "p", Name: "gated"}}},
	})
	rc := &agent.RunContext{Clock: clock{}, Logger: zap.NewNop()}
	if err := New().BeforeAgent(context.Background(), rc, st); err != nil {
		t.Fatal(err)
	}
	msgs := st.Messages()
	if len(msgs) != 7 || msgs[5].ToolCallID != "a" || msgs[6].ToolCallID != "c" || msgs[5].Source != agent.SourcePatch || !msgs[5].IsError || msgs[5].Name != "x" {
		t.Fatalf("log %+v", msgs[5:])
	}
	// The view puts the patches in call order right after their message.
	var ids []string
	for _, v := range st.Effective()[:5] {
		ids = append(ids, v.ToolCallID)
	}
	if want := []string{"", "", "a", "b", "c"}; ids[2] != want[2] || ids[3] != want[3] || ids[4] != want[4] {
		t.Errorf("view ids %q", ids)
	}
}
