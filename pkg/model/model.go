package model

import (
	"context"
	"encoding/json"
)

// Role is the author of a Message.
type Role string

// The four roles of a chat transcript.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Finish reasons reported by providers that callers commonly test for.
// Response.FinishReason may hold any other provider-specific value.
const (
	FinishStop          = "stop"
	FinishToolCalls     = "tool_calls"
	FinishLength        = "length"
	FinishContentFilter = "content_filter"
)

// Message is one entry of a conversation, in the shape plumb persists.
type Message struct {
	// Role says who wrote the message.
	Role Role
	// Content is the visible text. For a tool message it is the tool result
	// exactly as the model sees it.
	Content string
	// ReasoningContent is the provider's reasoning text (for example
	// DeepSeek's reasoning_content) of an assistant message. It is kept for
	// the transcript; adapters need not send it back to the provider.
	ReasoningContent string
	// ToolCalls are the calls an assistant message requests.
	ToolCalls []ToolCall
	// ToolCallID links a tool message to the call it answers.
	ToolCallID string
	// Name is an optional author name (or, on tool messages, the tool name).
	Name string
	// Images are image inputs of a user or tool message (a read_file of an
	// image for a vision-capable model). Adapters send them as the
	// provider's image parts; Content still says what they are.
	Images []Image `json:",omitempty"`
}

// Image is one image input.
type Image struct {
	// MIMEType is the image's type: image/png, image/jpeg, image/gif or
	// image/webp.
	MIMEType string `json:"mime_type"`
	// Data is the image file's bytes.
	Data []byte `json:"data"`
}

// ToolCall is one call requested by the model.
type ToolCall struct {
	// ID is unique within its assistant message; adapters synthesize one when
	// the provider sends none.
	ID string
	// Name is the tool's name as the model spelled it (it may not exist).
	Name string
	// Args is the raw JSON argument text as the model produced it; it may be
	// invalid JSON (for example when output was cut off by the token limit).
	Args string
}

// ToolDef describes a tool offered to the model.
type ToolDef struct {
	// Name is the function name the model calls.
	Name string
	// Description tells the model what the tool does.
	Description string
	// Parameters is the JSON Schema of the arguments object. Empty means a
	// tool without parameters.
	Parameters json.RawMessage
}

// Metadata identifies the run and agent a request belongs to. Adapters
// forward it as HTTP headers so that gateways and test servers can route and
// correlate requests; it never reaches the prompt.
type Metadata struct {
	// RunID is the run's id.
	RunID string
	// AgentPath is the agent's path, e.g. "main" or "main/researcher".
	AgentPath string
	// ParentToolCallID is the task call that started a subagent; empty at
	// the root.
	ParentToolCallID string
}

// Request is one model call.
type Request struct {
	// Model overrides the configured model name when non-empty.
	Model string
	// Messages is the full conversation to send, system prompt first.
	Messages []Message
	// Tools are the tools the model may call.
	Tools []ToolDef
	// Temperature overrides the configured temperature when non-nil.
	Temperature *float32
	// MaxTokens caps the output tokens; 0 uses the configured default.
	MaxTokens int
	// ParallelToolCalls overrides the configured setting when non-nil.
	ParallelToolCalls *bool
	// Metadata is forwarded as headers, never as content.
	Metadata Metadata
}

// Usage counts the tokens of one successful model call.
type Usage struct {
	// Prompt is the number of input tokens.
	Prompt int
	// Completion is the number of output tokens (reasoning included).
	Completion int
	// Total is Prompt + Completion as reported by the provider.
	Total int
	// Cached is the part of Prompt served from the provider's prompt cache.
	Cached int
	// Reasoning is the part of Completion spent on reasoning.
	Reasoning int
	// Estimated is true when the provider reported no usage and the numbers
	// were estimated from character counts.
	Estimated bool
}

// Add returns the element-wise sum of u and v; the result is estimated if
// either part is.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		Prompt:     u.Prompt + v.Prompt,
		Completion: u.Completion + v.Completion,
		Total:      u.Total + v.Total,
		Cached:     u.Cached + v.Cached,
		Reasoning:  u.Reasoning + v.Reasoning,
		Estimated:  u.Estimated || v.Estimated,
	}
}

// Response is the result of one successful model call.
type Response struct {
	// Message is the assembled assistant message. It is a tool step if and
	// only if len(Message.ToolCalls) > 0, whatever FinishReason says.
	Message Message
	// FinishReason is the provider's finish_reason verbatim (e.g. "stop",
	// "tool_calls", "length"). When the provider sent none, it is
	// FinishToolCalls for a message with tool calls and FinishStop otherwise.
	FinishReason string
	// Usage is counted once per successful call; failed attempts count
	// nothing.
	Usage Usage
	// Attempts is the number of HTTP attempts made, including the first.
	Attempts int
}

// Delta is a piece of streamed output, delivered as it arrives.
type Delta struct {
	// Text is a fragment of the visible message text.
	Text string
	// Reasoning is a fragment of the reasoning text.
	Reasoning string
	// ToolCalls are fragments of tool calls, in the order they arrived.
	ToolCalls []ToolCallDelta
	// Attempt starts at 1 and increases each time the call is retried after
	// output had already been streamed; a higher Attempt tells the consumer
	// to discard the deltas of lower ones.
	Attempt int
}

// ToolCallDelta is a fragment of one tool call being streamed. The
// Response's message is authoritative: a call the provider sent without
// an id gets one only there, and a fragment-less call is dropped.
type ToolCallDelta struct {
	// Index is the call's position among the calls of the message, in the
	// order they were opened.
	Index int
	// ID is the provider's call id, set on the fragment that brought it.
	ID string
	// Name is the tool name, set on the fragment that brought it.
	Name string
	// Args is a fragment of the arguments text.
	Args string
}

// ChatModel is what the executor needs from a model: one streamed call.
//
// Generate sends req and returns the assembled assistant message. onDelta,
// if non-nil, is called synchronously from Generate's goroutine for every
// text, reasoning or tool-call fragment, in order. Transient failures are retried
// inside Generate; the error it returns is a *Error (use errors.As), or an
// error wrapping ctx.Err() when ctx ended first. On error the Response
// carries only Attempts.
type ChatModel interface {
	Generate(ctx context.Context, req Request, onDelta func(Delta)) (Response, error)
}
