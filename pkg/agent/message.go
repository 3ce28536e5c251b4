package agent

import (
	"time"

	"github.com/plumbhq/plumb/pkg/model"
)

// Message sources recorded in Message.Source.
const (
	// SourceInput marks a user message from a RunRequest.
	SourceInput = "input"
	// SourceSteer marks a user message sent to the running run
	// (on_busy STEER) and added before one of its model calls.
	SourceSteer = "steer"
	// SourcePatch marks a synthetic tool message written by the
	// patch_tool_calls middleware for a call that never got a result.
	SourcePatch = "patch"
	// SourceSummarization marks the synthetic summary message of
	// State.Effective (it is never stored in the log).
	SourceSummarization = "summarization"
)

// Message is one entry of a thread's message log: a model.Message plus
// what the log keeps beside it.
type Message struct {
	model.Message
	// IsError marks a tool message that reports a failure.
	IsError bool `json:"is_error,omitempty"`
	// Origin says how a tool message's result was produced: the tool ran,
	// the call was invalid or blocked, a human rejected it, or a human or
	// the client answered it. "" on other messages, on results written by
	// patch_tool_calls (Source says so) and on messages stored before the
	// field existed.
	Origin Origin `json:"origin,omitempty"`
	// Source says where a message came from when it was not produced by
	// the normal flow: SourceInput, SourcePatch, or "".
	Source string `json:"source,omitempty"`
	// CreatedAt is when the message was appended.
	CreatedAt time.Time `json:"created_at"`
}

// TodoStatus is the state of one todo item.
type TodoStatus string

// Todo statuses (docs/agent-core.md §4.1).
const (
	TodoPending    TodoStatus = "pending"
	TodoInProgress TodoStatus = "in_progress"
	TodoCompleted  TodoStatus = "completed"
)

// Todo is one item of an agent context's todo list.
type Todo struct {
	// Content says what to do.
	Content string `json:"content"`
	// Status is pending, in_progress or completed.
	Status TodoStatus `json:"status"`
}

// Summary is the latest summarization event of an agent context
// (docs/agent-core.md §7 step 7). The log is never rewritten: Effective replaces
// Messages[:Cutoff] with one summary message.
type Summary struct {
	// Cutoff is the absolute log index of the first message kept.
	Cutoff int `json:"cutoff"`
	// Text is the summary itself.
	Text string `json:"text"`
	// TranscriptPath is where the summarized messages were offloaded; ""
	// when the offload failed.
	TranscriptPath string `json:"transcript_path,omitempty"`
	// TokensBefore and TokensAfter are the estimated context sizes around
	// the summarization.
	TokensBefore int `json:"tokens_before"`
	TokensAfter  int `json:"tokens_after"`
	// Fallback reports a mechanical summary (the summarizer failed).
	Fallback bool `json:"fallback,omitempty"`
	// Message is the text of the summary message the model sees in place
	// of the summarized prefix.
	Message string `json:"message"`
}

// LastText returns the text of the last assistant message with non-empty
// text, or "".
func LastText(msgs []Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if m := msgs[i]; m.Role == model.RoleAssistant && m.Content != "" {
			return m.Content
		}
	}
	return ""
}

func cloneMessages(msgs []Message) []Message {
	if msgs == nil {
		return nil
	}
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		out[i] = m
		if m.ToolCalls != nil {
			out[i].ToolCalls = append([]model.ToolCall(nil), m.ToolCalls...)
		}
		if m.Images != nil {
			out[i].Images = append([]model.Image(nil), m.Images...) // image bytes are never modified
		}
	}
	return out
}
