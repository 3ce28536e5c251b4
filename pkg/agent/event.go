package agent

import (
	"time"

	"github.com/plumbhq/plumb/pkg/model"
)

// Event is one item of a run's event stream (docs/agent-core.md §8). Sequence is
// 1-based and contiguous per run, continuing across Resume segments.
type Event struct {
	// Sequence numbers the run's events.
	Sequence uint64
	// Time is when the event was produced.
	Time time.Time
	// RunID and ThreadID identify the run.
	RunID, ThreadID string
	// AgentPath is the producing agent context ("main", "main/explore").
	AgentPath string
	// ParentToolCallID is the task call of that subagent; "" at the root.
	ParentToolCallID string
	// Payload is what happened.
	Payload Payload
}

// Sink receives a run's events in sequence order. It is called with the
// run's event lock held, so it must not call back into the run; a slow
// sink slows the run down.
type Sink func(Event)

// Payload is one of the event payload types of this package.
type Payload interface {
	// Kind is the payload's snake_case name in docs/agent-core.md §8.
	Kind() string
	isPayload()
}

// RunStatus is how a run ended, or that it is still going.
type RunStatus string

// Run statuses. The first four end a stream with run_finished; the others
// appear in run records only.
const (
	StatusCompleted        RunStatus = "COMPLETED"
	StatusMaxIterations    RunStatus = "MAX_ITERATIONS"
	StatusCancelled        RunStatus = "CANCELLED"
	StatusDeadlineExceeded RunStatus = "DEADLINE_EXCEEDED"
	StatusRunning          RunStatus = "RUNNING"
	StatusInterrupted      RunStatus = "INTERRUPTED"
	StatusFailed           RunStatus = "FAILED"
	// StatusQueued is a run waiting for its thread's current run to end
	// (RunRequest.on_busy ENQUEUE); run records only.
	StatusQueued RunStatus = "QUEUED"
)

// SubagentStatus is how a subagent invocation ended.
type SubagentStatus string

// Subagent statuses (docs/agent-core.md §5.3).
const (
	SubagentCompleted        SubagentStatus = "COMPLETED"
	SubagentStepLimit        SubagentStatus = "STEP_LIMIT"
	SubagentDeadlineExceeded SubagentStatus = "DEADLINE_EXCEEDED"
	SubagentFailed           SubagentStatus = "FAILED"
	SubagentCancelled        SubagentStatus = "CANCELLED"
)

// UsagePurpose says what a model call was for.
type UsagePurpose string

// Usage purposes.
const (
	PurposeAgent   UsagePurpose = "AGENT"
	PurposeSummary UsagePurpose = "SUMMARY"
)

// Error codes of error events that are not model codes (docs/agent-core.md §10.2).
const (
	CodeStorage  = "STORAGE"
	CodeInternal = "INTERNAL"
	// CodeLeaseLost ends a run's stream on a replica that lost the
	// thread's lease: another replica took the thread over and goes on
	// with the run (Attach follows it there).
	CodeLeaseLost = "LEASE_LOST"
	// CodeSuperseded is the error of a CANCELLED run record that a newer
	// run interrupted (RunInput.Stop; OnBusy interrupt, docs/runs.md).
	CodeSuperseded = "SUPERSEDED"
	// CodeRolledBack is the error of a CANCELLED run record that a newer
	// run rolled back (RunInput.Rollback; OnBusy rollback, docs/runs.md):
	// the thread went back to where it was before the run.
	CodeRolledBack = "ROLLED_BACK"
	// CodeCancelled is the error of a QUEUED run record that was
	// cancelled before it started (Cancel, CancelRun).
	CodeCancelled = "CANCELLED"
)

// Steered reports user input sent to the running run (on_busy STEER)
// that the run added to its conversation before its next model call.
type Steered struct {
	Input []string
}

// RunStarted opens every stream.
type RunStarted struct {
	ThreadID, RunID string
	// Agent is the profile name; Model the model key.
	Agent, Model string
	// Resumed is true for a Resume stream.
	Resumed bool
}

// MessageDelta is a fragment of assistant text.
type MessageDelta struct {
	Text string
	// Step is the model call number within the agent context (1-based).
	Step int
	// Attempt increases when a retry restarts the streamed output.
	Attempt int
}

// ReasoningDelta is a fragment of reasoning text.
type ReasoningDelta struct {
	Text          string
	Step, Attempt int
}

// ToolCallDelta is a fragment of the arguments of a tool call the model is
// producing, coalesced from the provider's chunks (see streamArgs). The
// AssistantMessage that follows is authoritative.
type ToolCallDelta struct {
	// Index is the call's position among the calls of the message.
	Index int
	// ID and Name are set on the first event that knows them.
	ID, Name string
	// Args is the next fragment of the arguments text.
	Args string
	// Step and Attempt are those of MessageDelta.
	Step, Attempt int
	// Truncated marks the last event of a call whose arguments passed
	// StreamArgsCap; the rest is only in the AssistantMessage.
	Truncated bool
}

// ToolOutput is output of a running tool call, coalesced (see
// OutputStream).
type ToolOutput struct {
	// ID and Name identify the call.
	ID, Name string
	// Text is the next piece of output, cut at character boundaries.
	Text string
	// Truncated marks the last event of a call whose output passed
	// StreamOutputCap; the rest is only in the tool result.
	Truncated bool
}

// AssistantMessage is a complete model answer, persisted before it is
// emitted.
type AssistantMessage struct {
	Text, Reasoning string
	ToolCalls       []model.ToolCall
	Step            int
	FinishReason    string
}

// ToolCallStarted reports a call being dispatched, with its effective
// arguments.
type ToolCallStarted struct {
	ID, Name, Args string
}

// ToolResultEvent is a call's outcome, content exactly as the model sees it.
type ToolResultEvent struct {
	ID, Name      string
	Content       string
	IsError       bool
	ExitCode      *int
	OffloadedPath string
	Origin        Origin
	Duration      time.Duration
}

// TodosUpdated carries the whole new todo list.
type TodosUpdated struct {
	Todos []Todo
}

// SubagentStarted reports a task call's subagent starting (or resuming).
type SubagentStarted struct {
	Subagent, Description string
	Depth                 int
	Resumed               bool
}

// SubagentFinished reports a subagent ending, with its usage.
type SubagentFinished struct {
	Status SubagentStatus
	Usage  model.Usage
}

// Interrupted pauses the run until Resume. It is terminal for a stream.
type Interrupted struct {
	InterruptID string
	// Requests are in call order, parents before nested ones.
	Requests []InterruptRequest
}

// UsageReport is the usage of one model call and the run totals so far.
type UsageReport struct {
	Call      model.Usage
	Estimated bool
	Purpose   UsagePurpose
	// Model is the provider's model name.
	Model    string
	RunTotal model.Usage
}

// Summarized reports a context compaction.
type Summarized struct {
	CutoffIndex               int
	MessagesSummarized        int
	TokensBefore, TokensAfter int
	TranscriptPath            string
	Fallback                  bool
	Duration                  time.Duration
}

// SandboxLost reports that a tool call failed because the sandbox worker
// holding the thread's sandbox could not be reached (or is not part of the
// fleet). It follows that call's tool_result; the run goes on.
type SandboxLost struct {
	Worker, SandboxID, Message string
}

// EgressRequested reports a connection of the thread's sandbox that waits
// for a human's decision while ToolCallID runs (docs/security.md, "Egress
// approved by a human"). The call keeps running until it is decided or
// times out.
type EgressRequested struct {
	RequestID, Host string
	Port            int
	// ToolCallID is the call that was running; Agent the run's primary
	// agent; SandboxID the box.
	ToolCallID, Agent, SandboxID string
}

// EgressDecided reports how a waiting connection ended: decided (Scope
// and DecidedBy set for a human's decision) or not (timed out, the call
// ended).
type EgressDecided struct {
	RequestID, Host string
	Port            int
	Allowed         bool
	// Scope is "RUN", "THREAD" or "AGENT" for approvals.
	Scope, DecidedBy, Reason string
	ToolCallID               string
}

// RunError ends a failed run. Code is a model.ErrorCode value, CodeStorage
// or CodeInternal.
type RunError struct {
	Code      string
	Message   string
	Retryable bool
}

// RunFinished ends a run.
type RunFinished struct {
	Status    RunStatus
	FinalText string
	Usage     model.Usage
}

// Kind returns "run_started".
func (RunStarted) Kind() string { return "run_started" }

// Kind returns "steered".
func (Steered) Kind() string { return "steered" }

// Kind returns "message_delta".
func (MessageDelta) Kind() string { return "message_delta" }

// Kind returns "reasoning_delta".
func (ReasoningDelta) Kind() string { return "reasoning_delta" }

// Kind returns "message".
func (AssistantMessage) Kind() string { return "message" }

// Kind returns "tool_call_delta".
func (ToolCallDelta) Kind() string { return "tool_call_delta" }

// Kind returns "tool_output".
func (ToolOutput) Kind() string { return "tool_output" }

// Kind returns "tool_call_started".
func (ToolCallStarted) Kind() string { return "tool_call_started" }

// Kind returns "tool_result".
func (ToolResultEvent) Kind() string { return "tool_result" }

// Kind returns "todos_updated".
func (TodosUpdated) Kind() string { return "todos_updated" }

// Kind returns "subagent_started".
func (SubagentStarted) Kind() string { return "subagent_started" }

// Kind returns "subagent_finished".
func (SubagentFinished) Kind() string { return "subagent_finished" }

// Kind returns "interrupted".
func (Interrupted) Kind() string { return "interrupted" }

// Kind returns "usage".
func (UsageReport) Kind() string { return "usage" }

// Kind returns "summarized".
func (Summarized) Kind() string { return "summarized" }

// Kind returns "error".
func (RunError) Kind() string { return "error" }

// Kind returns "sandbox_lost".
func (SandboxLost) Kind() string { return "sandbox_lost" }

// Kind returns "egress_request".
func (EgressRequested) Kind() string { return "egress_request" }

// Kind returns "egress_decided".
func (EgressDecided) Kind() string { return "egress_decided" }

// Kind returns "run_finished".
func (RunFinished) Kind() string { return "run_finished" }

func (RunStarted) isPayload()       {}
func (Steered) isPayload()          {}
func (MessageDelta) isPayload()     {}
func (ReasoningDelta) isPayload()   {}
func (AssistantMessage) isPayload() {}
func (ToolCallDelta) isPayload()    {}
func (ToolOutput) isPayload()       {}
func (ToolCallStarted) isPayload()  {}
func (ToolResultEvent) isPayload()  {}
func (TodosUpdated) isPayload()     {}
func (SubagentStarted) isPayload()  {}
func (SubagentFinished) isPayload() {}
func (Interrupted) isPayload()      {}
func (UsageReport) isPayload()      {}
func (Summarized) isPayload()       {}
func (RunError) isPayload()         {}
func (RunFinished) isPayload()      {}
func (SandboxLost) isPayload()      {}
func (EgressRequested) isPayload()  {}
func (EgressDecided) isPayload()    {}

// IsTerminal reports whether p ends a stream.
func IsTerminal(p Payload) bool {
	switch p.(type) {
	case RunFinished, Interrupted, RunError:
		return true
	}
	return false
}
