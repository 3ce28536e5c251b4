package webhook

import (
	"encoding/json"
	"time"
)

// EventType is what happened to a run, as a receiver sees it.
type EventType string

// Event types. A run sends at most one of succeeded, failed and cancelled
// (its end), and one interrupted per interrupt it pauses on.
const (
	// RunSucceeded: run_finished{COMPLETED}.
	RunSucceeded EventType = "run.succeeded"
	// RunFailed: an error ended the run, or it hit its deadline or its
	// iteration limit (status says which).
	RunFailed EventType = "run.failed"
	// RunInterrupted: the run waits for decisions (Resume); Interrupt
	// holds its requests.
	RunInterrupted EventType = "run.interrupted"
	// RunCancelled: Cancel (or DeleteThread with force) stopped the run.
	RunCancelled EventType = "run.cancelled"
)

// EventTypes are all event types, in the order docs/webhooks.md lists
// them.
var EventTypes = []EventType{RunSucceeded, RunFailed, RunInterrupted, RunCancelled}

// ValidEventType reports whether e is one of EventTypes.
func ValidEventType(e EventType) bool {
	for _, x := range EventTypes {
		if x == e {
			return true
		}
	}
	return false
}

// Payload is the JSON body of a delivery. Every attempt of one delivery
// sends the same bytes (the body is built once, when the delivery is
// recorded).
type Payload struct {
	// ID is the delivery id, also in the Plumb-Delivery header: the same
	// on every retry, so a receiver drops duplicates by it.
	ID string `json:"id"`
	// Type is the event.
	Type EventType `json:"type"`
	// CreatedAt is when the event was recorded.
	CreatedAt time.Time `json:"created_at"`
	// ThreadID and RunID name the run.
	ThreadID string `json:"thread_id"`
	RunID    string `json:"run_id"`
	// Agent is the run's agent profile.
	Agent string `json:"agent,omitempty"`
	// Status is the run's status: COMPLETED, FAILED, CANCELLED,
	// DEADLINE_EXCEEDED, MAX_ITERATIONS or INTERRUPTED.
	Status string `json:"status"`
	// Error describes a failed run.
	Error *Error `json:"error,omitempty"`
	// Usage is the run's token usage so far, when known.
	Usage *Usage `json:"usage,omitempty"`
	// Interrupt holds the requests a run.interrupted waits on.
	Interrupt *Interrupt `json:"interrupt,omitempty"`
	// StartedAt is when the run started; FinishedAt when it ended or
	// paused.
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// Error is a failed run's error.
type Error struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// Usage is token usage.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CachedTokens     int `json:"cached_tokens,omitempty"`
	ReasoningTokens  int `json:"reasoning_tokens,omitempty"`
}

// Interrupt is what a paused run waits for: Resume names ID and answers
// every request.
type Interrupt struct {
	ID       string             `json:"id"`
	Requests []InterruptRequest `json:"requests"`
}

// InterruptRequest is one tool call waiting for a decision.
type InterruptRequest struct {
	ToolCallID       string `json:"tool_call_id"`
	AgentPath        string `json:"agent_path,omitempty"`
	ParentToolCallID string `json:"parent_tool_call_id,omitempty"`
	// Kind is APPROVAL (a gate) or CLIENT_TOOL (the client runs it).
	Kind     string `json:"kind"`
	ToolName string `json:"tool_name"`
	// Args are the call's JSON arguments (an object).
	Args        json.RawMessage `json:"args"`
	Description string          `json:"description,omitempty"`
	// AllowedDecisions are approve, edit, reject and respond.
	AllowedDecisions []string `json:"allowed_decisions"`
}

// Encode is the body sent for p.
func (p *Payload) Encode() ([]byte, error) { return json.Marshal(p) }
