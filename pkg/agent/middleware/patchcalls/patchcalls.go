package patchcalls

import (
	"context"
	"encoding/json"
	"fmt"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
)

// Name is the middleware's name.
const Name = "patch_tool_calls"

// Middleware is patch_tool_calls.
type Middleware struct {
	agent.BaseMiddleware
}

// New returns the middleware.
func New() *Middleware { return &Middleware{} }

// Name implements agent.Middleware.
func (*Middleware) Name() string { return Name }

// Text is the synthetic result for call c.
func Text(c model.ToolCall) string {
	name := c.Name
	if name == "" {
		name = "unknown"
	}
	var v map[string]any
	if c.Args != "" && json.Unmarshal([]byte(c.Args), &v) != nil {
		return fmt.Sprintf("Tool call %s (%s) was never executed: its arguments were not valid JSON.", name, c.ID)
	}
	return fmt.Sprintf("Tool call %s (%s) did not complete: the run stopped before it returned a result.", name, c.ID)
}

// BeforeAgent appends a result for every dangling call.
func (*Middleware) BeforeAgent(_ context.Context, rc *agent.RunContext, st *agent.State) error {
	pendingAt := -1
	if p := st.Pending(); p != nil {
		pendingAt = p.AssistantIndex
	}
	var patches []agent.Message
	for _, d := range agent.DanglingCalls(st.Messages()) {
		if d.MessageIndex == pendingAt {
			continue
		}
		name := d.Call.Name
		if name == "" {
			name = "unknown"
		}
		patches = append(patches, agent.Message{
			Message:   model.Message{Role: model.RoleTool, Content: Text(d.Call), ToolCallID: d.Call.ID, Name: name},
			IsError:   true,
			Source:    agent.SourcePatch,
			CreatedAt: rc.Now(),
		})
	}
	if len(patches) > 0 {
		rc.Logger.Info("patched dangling tool calls", zap.Int("calls", len(patches)))
		st.Append(patches...)
	}
	return nil
}
