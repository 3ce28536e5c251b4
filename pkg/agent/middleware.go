package agent

import (
	"context"

	"github.com/plumbhq/plumb/pkg/model"
)

// Middleware is the extension contract of docs/agent-core.md §3.1. Instances are
// built per agent context (a root run or one subagent invocation) and must
// not keep run state in fields shared across runs: durable state goes in
// State (SetPrivate), per-run state may live in the instance.
//
// Order: Before* hooks run outer→inner (stack order), AfterAgent
// inner→outer; for Wrap* the first middleware of the stack is the
// outermost wrapper. An error from a Before* or AfterAgent hook ends the
// run with error{INTERNAL}, or with its own code for a CodedError.
type Middleware interface {
	// Name is unique within a stack; used in config and logs.
	Name() string
	// Tools are injected into the agent context; a name clash across the
	// stack is a configuration error.
	Tools() []Tool
	// BeforeAgent runs once per Run and per Resume, after the input was
	// appended. Changes to st are persisted.
	BeforeAgent(ctx context.Context, rc *RunContext, st *State) error
	// BeforeModel runs before each model call. Changes to st persist.
	BeforeModel(ctx context.Context, rc *RunContext, st *State) error
	// WrapModel wraps the model endpoint; edits to the request affect this
	// call only.
	WrapModel(next ModelHandler) ModelHandler
	// WrapTool wraps the tool endpoint, once per call.
	WrapTool(next ToolHandler) ToolHandler
	// AfterAgent runs when the run completes (not on interrupt, error,
	// cancellation or a limit).
	AfterAgent(ctx context.Context, rc *RunContext, st *State) error
}

// ToolProvider is implemented by a Middleware whose tools are only known
// once a run starts (the tools an MCP server lists). The executor calls
// RunTools once per agent context and run segment, after run_started and
// before BeforeAgent; the tools join the ones of Tools() under the same
// rules (allow-list, name clashes, schema validation of calls) for that
// segment and the system prompt is composed with them. release, when not
// nil, is called when the context's segment ends, however it ends
// (completion, interrupt, failure, cancellation), even when err is set.
// An error ends the run like a failed BeforeAgent; a provider whose
// source is unavailable should rather return tools that report it.
type ToolProvider interface {
	RunTools(ctx context.Context, rc *RunContext) (tools []Tool, release func(), err error)
}

// UnknownToolExplainer is implemented by a ToolProvider that can say why
// a call names a tool it did not provide this segment (its source could
// not be listed at run start, as for a call approved before an MCP server
// went down): the call's error result is that explanation instead of
// "Unknown tool".
type UnknownToolExplainer interface {
	ExplainUnknownTool(name string) (why string, ok bool)
}

// ModelHandler performs one model call.
type ModelHandler func(ctx context.Context, req *ModelRequest) (model.Response, error)

// ToolHandler performs one tool call.
type ToolHandler func(ctx context.Context, req *ToolRequest) (ToolResult, error)

// ModelRequest is one model call as it travels the WrapModel chain.
type ModelRequest struct {
	// System is the composed system prompt.
	System string
	// Messages is the effective view of the log, without the system
	// prompt; wrappers may edit this copy.
	Messages []model.Message
	// Tools are the tool definitions offered, sorted by name.
	Tools []model.ToolDef
	// Model overrides the ChatModel's configured model name when non-empty.
	Model string
	// MaxTokens caps the output; 0 uses the model default.
	MaxTokens int
	// Temperature overrides the model default when non-nil.
	Temperature *float32
	// State is the agent context's state.
	State *State
	// Run is the agent context's run context.
	Run *RunContext
	// Retry is set on the one retry that follows a RetryModelCall.
	Retry bool
}

// RetryModelCall is the error a WrapModel handler returns when it changed
// State so that the failed call may succeed with a request rebuilt from it
// (a forced summarization after a context overflow). The executor then
// rebuilds the request from State and sends it through the whole WrapModel
// chain once more, with Retry set, so that every middleware shapes it
// again. Err is the failure that caused the retry; it ends the step when
// the call was already a retry.
type RetryModelCall struct {
	// Err is the failed call's error.
	Err error
}

// Error implements error.
func (e *RetryModelCall) Error() string { return "retry the model call: " + e.Err.Error() }

// Unwrap returns Err.
func (e *RetryModelCall) Unwrap() error { return e.Err }

// BaseMiddleware implements every hook as a no-op and every wrapper as a
// pass-through. Embed it and override what you need.
type BaseMiddleware struct{}

// Tools returns nil.
func (BaseMiddleware) Tools() []Tool { return nil }

// BeforeAgent does nothing.
func (BaseMiddleware) BeforeAgent(context.Context, *RunContext, *State) error { return nil }

// BeforeModel does nothing.
func (BaseMiddleware) BeforeModel(context.Context, *RunContext, *State) error { return nil }

// WrapModel returns next.
func (BaseMiddleware) WrapModel(next ModelHandler) ModelHandler { return next }

// WrapTool returns next.
func (BaseMiddleware) WrapTool(next ToolHandler) ToolHandler { return next }

// AfterAgent does nothing.
func (BaseMiddleware) AfterAgent(context.Context, *RunContext, *State) error { return nil }

func wrapModel(stack []Middleware, end ModelHandler) ModelHandler {
	h := end
	for i := len(stack) - 1; i >= 0; i-- {
		h = stack[i].WrapModel(h)
	}
	return h
}

func wrapTool(stack []Middleware, end ToolHandler) ToolHandler {
	h := end
	for i := len(stack) - 1; i >= 0; i-- {
		h = stack[i].WrapTool(h)
	}
	return h
}
