package patchcalls

import (
	"context"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
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
		patches = append(patches, agent.Message{
			Message:   agent.DanglingCallResult(d.Call),
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
