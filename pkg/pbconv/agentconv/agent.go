package agentconv

import (
	"slices"
	"strings"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// enum looks up a proto enum value by the domain's string constant: the
// domain uses the proto value names without their prefix (any case).
func enum(values map[string]int32, prefix, name string) int32 {
	return values[prefix+strings.ToUpper(name)]
}

// enumName is the inverse of enum.
func enumName(names map[int32]string, prefix string, v int32) string {
	return strings.TrimPrefix(names[v], prefix)
}

// UsageToPB converts token usage.
func UsageToPB(u model.Usage) *plumbv1.TokenUsage {
	return &plumbv1.TokenUsage{
		PromptTokens: int64(u.Prompt), CompletionTokens: int64(u.Completion), TotalTokens: int64(u.Total),
		CachedTokens: int64(u.Cached), ReasoningTokens: int64(u.Reasoning),
	}
}

// TodosToPB converts a todo list.
func TodosToPB(todos []agent.Todo) []*plumbv1.Todo {
	out := make([]*plumbv1.Todo, len(todos))
	for i, t := range todos {
		out[i] = &plumbv1.Todo{Content: t.Content, Status: plumbv1.TodoStatus(enum(plumbv1.TodoStatus_value, "TODO_STATUS_", string(t.Status)))}
	}
	return out
}

// ToolCallsToPB converts tool calls.
func ToolCallsToPB(calls []model.ToolCall) []*plumbv1.ToolCall {
	out := make([]*plumbv1.ToolCall, len(calls))
	for i, c := range calls {
		out[i] = &plumbv1.ToolCall{Id: c.ID, Name: c.Name, ArgsJson: c.Args}
	}
	return out
}

// DecisionTypesToPB converts allowed decisions.
func DecisionTypesToPB(ds []agent.DecisionType) []plumbv1.DecisionType {
	out := make([]plumbv1.DecisionType, len(ds))
	for i, d := range ds {
		out[i] = plumbv1.DecisionType(enum(plumbv1.DecisionType_value, "DECISION_TYPE_", string(d)))
	}
	return out
}

// InterruptedToPB converts an interrupt.
func InterruptedToPB(in agent.Interrupted) *plumbv1.Interrupted {
	out := &plumbv1.Interrupted{InterruptId: in.InterruptID}
	for _, r := range in.Requests {
		out.Requests = append(out.Requests, &plumbv1.InterruptRequest{
			ToolCallId: r.ToolCallID, AgentPath: r.AgentPath, ParentToolCallId: r.ParentToolCallID,
			Kind:     plumbv1.InterruptKind(enum(plumbv1.InterruptKind_value, "INTERRUPT_KIND_", string(r.Kind))),
			ToolName: r.ToolName, ArgsJson: r.Args, Description: r.Description,
			AllowedDecisions: DecisionTypesToPB(r.Allowed), ArgsSchemaJson: string(r.ArgsSchema),
		})
	}
	return out
}

// RunStatusToPB converts a run status.
func RunStatusToPB(s agent.RunStatus) plumbv1.RunStatus {
	return plumbv1.RunStatus(enum(plumbv1.RunStatus_value, "RUN_STATUS_", string(s)))
}

// RunStatusFromPB converts a run status ("" for UNSPECIFIED or an
// unknown value).
func RunStatusFromPB(s plumbv1.RunStatus) agent.RunStatus {
	if s == plumbv1.RunStatus_RUN_STATUS_UNSPECIFIED {
		return ""
	}
	return agent.RunStatus(enumName(plumbv1.RunStatus_name, "RUN_STATUS_", int32(s)))
}

// EventToPB converts one event of the stream.
func EventToPB(e agent.Event) *plumbv1.Event {
	out := &plumbv1.Event{
		Sequence: e.Sequence, Timestamp: timestamppb.New(e.Time), RunId: e.RunID, ThreadId: e.ThreadID,
		AgentPath: e.AgentPath, ParentToolCallId: e.ParentToolCallID,
	}
	switch p := e.Payload.(type) {
	case agent.RunStarted:
		out.Payload = &plumbv1.Event_RunStarted{RunStarted: &plumbv1.RunStarted{ThreadId: p.ThreadID, RunId: p.RunID, Agent: p.Agent, Model: p.Model, Resumed: p.Resumed}}
	case agent.MessageDelta:
		out.Payload = &plumbv1.Event_MessageDelta{MessageDelta: &plumbv1.MessageDelta{Text: p.Text, Step: int32(p.Step), Attempt: int32(p.Attempt)}}
	case agent.ReasoningDelta:
		out.Payload = &plumbv1.Event_ReasoningDelta{ReasoningDelta: &plumbv1.ReasoningDelta{Text: p.Text, Step: int32(p.Step), Attempt: int32(p.Attempt)}}
	case agent.AssistantMessage:
		out.Payload = &plumbv1.Event_Message{Message: &plumbv1.AssistantMessage{Text: p.Text, Reasoning: p.Reasoning, ToolCalls: ToolCallsToPB(p.ToolCalls), Step: int32(p.Step), FinishReason: p.FinishReason}}
	case agent.ToolCallDelta:
		out.Payload = &plumbv1.Event_ToolCallDelta{ToolCallDelta: &plumbv1.ToolCallDelta{
			Index: int32(p.Index), Id: p.ID, Name: p.Name, Args: p.Args, Step: int32(p.Step), Attempt: int32(p.Attempt), Truncated: p.Truncated,
		}}
	case agent.Steered:
		out.Payload = &plumbv1.Event_Steered{Steered: &plumbv1.Steered{Input: slices.Clone(p.Input)}}
	case agent.ToolOutput:
		out.Payload = &plumbv1.Event_ToolOutput{ToolOutput: &plumbv1.ToolOutput{Id: p.ID, Name: p.Name, Text: p.Text, Truncated: p.Truncated}}
	case agent.ToolCallStarted:
		out.Payload = &plumbv1.Event_ToolCallStarted{ToolCallStarted: &plumbv1.ToolCallStarted{Id: p.ID, Name: p.Name, ArgsJson: p.Args}}
	case agent.ToolResultEvent:
		r := &plumbv1.ToolResult{
			Id: p.ID, Name: p.Name, Content: p.Content, IsError: p.IsError, OffloadedPath: p.OffloadedPath,
			Origin: plumbv1.ToolResultOrigin(enum(plumbv1.ToolResultOrigin_value, "TOOL_RESULT_ORIGIN_", string(p.Origin))), DurationMs: p.Duration.Milliseconds(),
		}
		if p.ExitCode != nil {
			c := int32(*p.ExitCode)
			r.ExitCode = &c
		}
		out.Payload = &plumbv1.Event_ToolResult{ToolResult: r}
	case agent.TodosUpdated:
		out.Payload = &plumbv1.Event_TodosUpdated{TodosUpdated: &plumbv1.TodosUpdated{Todos: TodosToPB(p.Todos)}}
	case agent.SubagentStarted:
		out.Payload = &plumbv1.Event_SubagentStarted{SubagentStarted: &plumbv1.SubagentStarted{Subagent: p.Subagent, Description: p.Description, Depth: int32(p.Depth), Resumed: p.Resumed}}
	case agent.SubagentFinished:
		out.Payload = &plumbv1.Event_SubagentFinished{SubagentFinished: &plumbv1.SubagentFinished{
			Status: plumbv1.SubagentStatus(enum(plumbv1.SubagentStatus_value, "SUBAGENT_STATUS_", string(p.Status))), Usage: UsageToPB(p.Usage)}}
	case agent.Interrupted:
		out.Payload = &plumbv1.Event_Interrupted{Interrupted: InterruptedToPB(p)}
	case agent.UsageReport:
		out.Payload = &plumbv1.Event_Usage{Usage: &plumbv1.UsageReport{
			Call: UsageToPB(p.Call), Estimated: p.Estimated, Model: p.Model, RunTotal: UsageToPB(p.RunTotal),
			Purpose: plumbv1.UsagePurpose(enum(plumbv1.UsagePurpose_value, "USAGE_PURPOSE_", string(p.Purpose))),
		}}
	case agent.Summarized:
		out.Payload = &plumbv1.Event_Summarized{Summarized: &plumbv1.Summarized{
			CutoffIndex: int64(p.CutoffIndex), MessagesSummarized: int64(p.MessagesSummarized), TokensBefore: int64(p.TokensBefore),
			TokensAfter: int64(p.TokensAfter), TranscriptPath: p.TranscriptPath, Fallback: p.Fallback, DurationMs: p.Duration.Milliseconds(),
		}}
	case agent.RunError:
		out.Payload = &plumbv1.Event_Error{Error: &plumbv1.RunError{Code: p.Code, Message: p.Message, Retryable: p.Retryable}}
	case agent.SandboxLost:
		out.Payload = &plumbv1.Event_SandboxLost{SandboxLost: &plumbv1.SandboxLost{Worker: p.Worker, SandboxId: p.SandboxID, Message: p.Message}}
	case agent.EgressRequested:
		out.Payload = &plumbv1.Event_EgressRequest{EgressRequest: &plumbv1.EgressRequested{Request: &plumbv1.EgressAsk{
			RequestId: p.RequestID, Host: p.Host, Port: uint32(p.Port), //nolint:gosec // 1-65535
			ToolCallId: p.ToolCallID, AgentPath: e.AgentPath, RunId: e.RunID, SandboxId: p.SandboxID, CreateTime: timestamppb.New(e.Time), Agent: p.Agent,
		}}}
	case agent.EgressDecided:
		out.Payload = &plumbv1.Event_EgressDecided{EgressDecided: &plumbv1.EgressDecided{
			RequestId: p.RequestID, Host: p.Host, Port: uint32(p.Port), //nolint:gosec // 1-65535
			Allowed: p.Allowed, DecidedBy: p.DecidedBy, Reason: p.Reason, ToolCallId: p.ToolCallID,
			Scope: plumbv1.EgressGrantScope(enum(plumbv1.EgressGrantScope_value, "EGRESS_GRANT_SCOPE_", p.Scope)),
		}}
	case agent.RunFinished:
		out.Payload = &plumbv1.Event_RunFinished{RunFinished: &plumbv1.RunFinished{Status: RunStatusToPB(p.Status), FinalText: p.FinalText, Usage: UsageToPB(p.Usage)}}
	}
	return out
}

// DecisionFromPB converts a Resume decision.
func DecisionFromPB(d *plumbv1.Decision) agent.Decision {
	out := agent.Decision{
		ToolCallID: d.GetToolCallId(), AgentPath: d.GetAgentPath(),
		Type:    agent.DecisionType(strings.ToLower(enumName(plumbv1.DecisionType_name, "DECISION_TYPE_", int32(d.GetType())))),
		Message: d.GetMessage(), IsError: d.GetIsError(),
	}
	if d.GetEditedArgsJson() != "" {
		out.EditedArgs = []byte(d.GetEditedArgsJson())
	}
	return out
}
