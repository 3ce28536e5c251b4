package agent

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/model"
)

// InterruptKind says why a call waits for a decision (docs/agent-core.md §6.1).
type InterruptKind string

// Interrupt kinds.
const (
	// InterruptApproval gates a call listed in interrupt_on.
	InterruptApproval InterruptKind = "APPROVAL"
	// InterruptClientTool hands a call to the client that declared the
	// tool.
	InterruptClientTool InterruptKind = "CLIENT_TOOL"
)

// DecisionType is a human's (or client's) answer to an interrupt request.
type DecisionType string

// Decision types (docs/agent-core.md §6.4). The lower-case spellings are the
// configuration names (interrupt_on allowed lists).
const (
	DecisionApprove DecisionType = "approve"
	DecisionEdit    DecisionType = "edit"
	DecisionReject  DecisionType = "reject"
	DecisionRespond DecisionType = "respond"
)

// AllDecisions lists every decision type in canonical order.
func AllDecisions() []DecisionType {
	return []DecisionType{DecisionApprove, DecisionEdit, DecisionReject, DecisionRespond}
}

// Interrupt is the typed error a tool handler returns to pause its call
// until Resume. The executor fills in the request's call fields (id, name,
// args, schema, agent path); the handler sets Kind, Description and
// Allowed.
//
// A task tool whose subagent suspended returns an Interrupt with Nested
// set instead: the subagent's saved context, which holds its own requests.
type Interrupt struct {
	// Kind is APPROVAL or CLIENT_TOOL.
	Kind InterruptKind
	// Description is the text for the human.
	Description string
	// Allowed lists the accepted decisions.
	Allowed []DecisionType
	// Nested is a suspended subagent (task tools only).
	Nested *SubagentSnapshot
}

// Error implements error.
func (i *Interrupt) Error() string {
	if i.Nested != nil {
		return "subagent " + i.Nested.Subagent + " interrupted"
	}
	return "interrupted for " + string(i.Kind)
}

// InterruptRequest is one call waiting for a decision (docs/agent-core.md §6.2).
type InterruptRequest struct {
	// ToolCallID is the call's id.
	ToolCallID string `json:"tool_call_id"`
	// AgentPath is the agent context of the call.
	AgentPath string `json:"agent_path"`
	// ParentToolCallID is the task call of that subagent; "" at the root.
	ParentToolCallID string `json:"parent_tool_call_id,omitempty"`
	// Kind says why it waits.
	Kind InterruptKind `json:"kind"`
	// ToolName is the tool called.
	ToolName string `json:"tool_name"`
	// Args is the call's JSON arguments.
	Args string `json:"args"`
	// Description is the text for the human.
	Description string `json:"description"`
	// Allowed lists the accepted decisions.
	Allowed []DecisionType `json:"allowed_decisions"`
	// ArgsSchema is the tool's JSON Schema (for EDIT).
	ArgsSchema json.RawMessage `json:"args_schema,omitempty"`
}

// Decision answers one interrupt request (docs/agent-core.md §6.4).
type Decision struct {
	// ToolCallID names the call.
	ToolCallID string `json:"tool_call_id"`
	// AgentPath disambiguates a call id pending in several contexts.
	AgentPath string `json:"agent_path,omitempty"`
	// Type is the decision.
	Type DecisionType `json:"type"`
	// EditedArgs replaces the call's arguments (EDIT only).
	EditedArgs json.RawMessage `json:"edited_args,omitempty"`
	// Message is the reason of a REJECT or the result of a RESPOND.
	Message string `json:"message,omitempty"`
	// IsError marks a RESPOND result as an error (client tools).
	IsError bool `json:"is_error,omitempty"`
}

// DecidedResult is the result of a REJECT or RESPOND decision for a call
// of tool name: the texts of docs/agent-core.md §6.4. ok is false for the other
// decision types, which run the call instead.
func DecidedResult(name string, d Decision) (ToolResult, bool) {
	switch d.Type {
	case DecisionReject:
		text := fmt.Sprintf("The user rejected this %s call.", name)
		if reason := strings.TrimSpace(d.Message); reason != "" {
			text += " Reason: " + reason
			// The reason is a sentence of its own: end it before the next.
			if r, _ := utf8.DecodeLastRuneInString(reason); !strings.ContainsRune(".!?…。！？", r) {
				text += "."
			}
		}
		text += " Do not retry it unchanged."
		return ToolResult{Content: text, IsError: true, Origin: OriginRejected}, true
	case DecisionRespond:
		return ToolResult{Content: d.Message, IsError: d.IsError, Origin: OriginResponded}, true
	}
	return ToolResult{}, false
}

// PendingStep is the open step of an agent context (docs/agent-core.md §2.1): the
// calls of the last assistant message and, while interrupted, the results
// that completed, the requests that wait, and the suspended subagents.
type PendingStep struct {
	// AssistantIndex is the log index of the assistant message.
	AssistantIndex int `json:"assistant_index"`
	// Calls are the message's calls, in call order.
	Calls []model.ToolCall `json:"calls"`
	// FinishReason is the model's finish reason for the message.
	FinishReason string `json:"finish_reason,omitempty"`
	// Results holds completed results by call id.
	Results map[string]ToolResult `json:"results,omitempty"`
	// Requests are this context's own waiting calls, in call order.
	Requests []InterruptRequest `json:"requests,omitempty"`
	// Nested holds suspended subagents by task call id.
	Nested map[string]*SubagentSnapshot `json:"nested,omitempty"`
	// Reminders are the batch's queued reminder blocks, applied to the
	// last call's result when it is decided.
	Reminders []Reminder `json:"reminders,omitempty"`
	// Started lists calls whose tool_call_started was already emitted.
	Started []string `json:"started,omitempty"`
}

func (p *PendingStep) clone() *PendingStep {
	if p == nil {
		return nil
	}
	c := *p
	c.Calls = slices.Clone(p.Calls)
	c.Results = maps.Clone(p.Results)
	c.Requests = slices.Clone(p.Requests)
	c.Reminders = slices.Clone(p.Reminders)
	c.Started = slices.Clone(p.Started)
	if p.Nested != nil {
		c.Nested = make(map[string]*SubagentSnapshot, len(p.Nested))
		for k, v := range p.Nested {
			c.Nested[k] = v.clone()
		}
	}
	return &c
}

// AllRequests returns the step's requests and those of its suspended
// subagents: own requests first, in call order, then each suspended task
// call's requests in call order, recursively.
func (p *PendingStep) AllRequests() []InterruptRequest {
	if p == nil {
		return nil
	}
	out := slices.Clone(p.Requests)
	for _, c := range p.Calls {
		if n := p.Nested[c.ID]; n != nil {
			out = append(out, n.State.Pending.AllRequests()...)
		}
	}
	return out
}

// SubagentSnapshot is a suspended subagent invocation, saved under its
// parent's pending step (docs/agent-core.md §6.3).
type SubagentSnapshot struct {
	// Subagent is the profile name.
	Subagent string `json:"subagent"`
	// Description is the task it was given.
	Description string `json:"description"`
	// AgentPath is its path; TaskCallID is the parent's task call id.
	AgentPath  string `json:"agent_path"`
	TaskCallID string `json:"task_call_id"`
	// Depth is its nesting depth (1 for a subagent of the root).
	Depth int `json:"depth"`
	// Step is the number of model calls it made.
	Step int `json:"step"`
	// Elapsed is its active wall time so far (time spent interrupted is
	// not counted against its timeout).
	Elapsed time.Duration `json:"elapsed"`
	// Usage is its token usage so far.
	Usage model.Usage `json:"usage"`
	// State is its whole context; State.Pending holds its requests.
	State Snapshot `json:"state"`
}

func (s *SubagentSnapshot) clone() *SubagentSnapshot {
	if s == nil {
		return nil
	}
	c := *s
	st := RestoreState(s.State).Snapshot()
	c.State = st
	return &c
}
