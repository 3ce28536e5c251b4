package backend

import "context"

// EgressCall describes the tool call an operation runs for, to a backend
// whose box can hold a connection for a human's decision (egress
// approval, docs/security.md): the box's asks are attributed to the call
// and reported as run events while it runs. The tool layer sets it.
type EgressCall struct {
	// ToolCallID and AgentPath name the call and its agent context;
	// RunID the run.
	ToolCallID, AgentPath, RunID string
	// Report emits an ask, or its end, as a run event of the call's
	// agent context. It may be called from any goroutine while the
	// operation runs.
	Report func(EgressEvent)
}

// EgressEvent is a connection of the box waiting for a decision
// (Closed false) or how it ended.
type EgressEvent struct {
	RequestID, Host string
	Port            int
	// Agent is the run's primary agent; SandboxID the box.
	Agent, SandboxID string
	Closed, Allowed  bool
	// Scope and DecidedBy are set for a human's decision; Reason is why
	// it ended.
	Scope, DecidedBy, Reason string
}

type egressCallKey struct{}

// WithEgressCall returns ctx carrying c.
func WithEgressCall(ctx context.Context, c EgressCall) context.Context {
	return context.WithValue(ctx, egressCallKey{}, &c)
}

// EgressCallOf returns the call ctx carries, or nil.
func EgressCallOf(ctx context.Context) *EgressCall {
	c, _ := ctx.Value(egressCallKey{}).(*EgressCall)
	return c
}
