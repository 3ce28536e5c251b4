package deep_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/pbconv"
)

// The conformance client: it maps the scenarios' domain inputs to
// AgentService requests and decodes what comes back (events, status
// errors) into the domain, the way a Go client of plumb.v1 would, so that
// the scenarios check exactly what crossed the wire.

// runRequest encodes a Run.
func runRequest(in agent.RunInput) *plumbv1.RunRequest {
	req := &plumbv1.RunRequest{
		ThreadId: in.ThreadID, Metadata: in.Metadata, Agent: in.Spec.Agent, Model: in.Spec.Model,
		MaxIterations: int32(in.Spec.MaxIterations), AbandonInterrupt: in.AbandonInterrupt,
	}
	for _, text := range in.Input {
		req.Input = append(req.Input, &plumbv1.InputMessage{Content: text})
	}
	for _, ct := range in.Spec.ClientTools {
		req.ClientTools = append(req.ClientTools, &plumbv1.ClientTool{Name: ct.Name, Description: ct.Description, ParametersJson: string(ct.Parameters)})
	}
	if len(in.Files) > 0 {
		req.Files = make(map[string]string, len(in.Files))
		for p, c := range in.Files {
			req.Files[p] = string(c)
		}
	}
	if in.Spec.Timeout > 0 {
		req.Timeout = durationpb.New(in.Spec.Timeout)
	}
	return req
}

// resumeRequest encodes a Resume.
func resumeRequest(in agent.ResumeInput) *plumbv1.ResumeRequest {
	req := &plumbv1.ResumeRequest{ThreadId: in.ThreadID, InterruptId: in.InterruptID}
	for _, d := range in.Decisions {
		req.Decisions = append(req.Decisions, &plumbv1.Decision{
			ToolCallId: d.ToolCallID, AgentPath: d.AgentPath, EditedArgsJson: string(d.EditedArgs), Message: d.Message, IsError: d.IsError,
			Type: plumbv1.DecisionType(plumbv1.DecisionType_value["DECISION_TYPE_"+strings.ToUpper(string(d.Type))]),
		})
	}
	return req
}

// rpcError is a status error decoded into the agent error it stands for:
// errors.Is/As see the domain error, Error is the status message.
type rpcError struct {
	st     *status.Status
	domain error
}

func (e *rpcError) Error() string { return e.st.Message() }
func (e *rpcError) Unwrap() error { return e.domain }

// domainError decodes a status error by its ErrorInfo reason, checking
// that it came with the code docs/agent-core.md §10.1 gives it. Anything else is
// returned as is, so that a scenario expecting a domain error fails.
func domainError(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	var md map[string]string
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			md = info.GetMetadata()
		}
	}
	want := map[string]struct {
		code   codes.Code
		domain error
	}{
		server.ReasonInvalidArgument:    {codes.InvalidArgument, agent.ErrInvalidInput},
		server.ReasonInvalidDecisions:   {codes.InvalidArgument, &agent.DecisionError{Violations: pbconv.FieldViolations(err)}},
		server.ReasonPendingInterrupt:   {codes.FailedPrecondition, &agent.PendingInterruptError{ThreadID: md["thread_id"], InterruptID: md["interrupt_id"]}},
		server.ReasonStaleInterrupt:     {codes.FailedPrecondition, &agent.StaleInterruptError{Current: md["interrupt_id"]}},
		server.ReasonNoPendingInterrupt: {codes.FailedPrecondition, agent.ErrNoPendingInterrupt},
		server.ReasonThreadBusy:         {codes.Aborted, agent.ErrThreadBusy},
		server.ReasonThreadNotFound:     {codes.NotFound, agent.ErrThreadNotFound},
	}
	w, known := want[pbconv.Reason(err)]
	if !known || st.Code() != w.code {
		return err
	}
	return &rpcError{st: st, domain: w.domain}
}

// eventFromPB decodes one wire event.
func eventFromPB(e *plumbv1.Event) (agent.Event, error) {
	out := agent.Event{
		Sequence: e.GetSequence(), RunID: e.GetRunId(), ThreadID: e.GetThreadId(),
		AgentPath: e.GetAgentPath(), ParentToolCallID: e.GetParentToolCallId(),
	}
	if e.GetTimestamp() != nil {
		out.Time = e.GetTimestamp().AsTime()
	}
	switch p := e.GetPayload().(type) {
	case *plumbv1.Event_RunStarted:
		x := p.RunStarted
		out.Payload = agent.RunStarted{ThreadID: x.GetThreadId(), RunID: x.GetRunId(), Agent: x.GetAgent(), Model: x.GetModel(), Resumed: x.GetResumed()}
	case *plumbv1.Event_MessageDelta:
		x := p.MessageDelta
		out.Payload = agent.MessageDelta{Text: x.GetText(), Step: int(x.GetStep()), Attempt: int(x.GetAttempt())}
	case *plumbv1.Event_ToolCallDelta:
		x := p.ToolCallDelta
		out.Payload = agent.ToolCallDelta{Index: int(x.GetIndex()), ID: x.GetId(), Name: x.GetName(), Args: x.GetArgs(),
			Step: int(x.GetStep()), Attempt: int(x.GetAttempt()), Truncated: x.GetTruncated()}
	case *plumbv1.Event_ToolOutput:
		x := p.ToolOutput
		out.Payload = agent.ToolOutput{ID: x.GetId(), Name: x.GetName(), Text: x.GetText(), Truncated: x.GetTruncated()}
	case *plumbv1.Event_ReasoningDelta:
		x := p.ReasoningDelta
		out.Payload = agent.ReasoningDelta{Text: x.GetText(), Step: int(x.GetStep()), Attempt: int(x.GetAttempt())}
	case *plumbv1.Event_Message:
		x := p.Message
		m := agent.AssistantMessage{Text: x.GetText(), Reasoning: x.GetReasoning(), Step: int(x.GetStep()), FinishReason: x.GetFinishReason()}
		for _, c := range x.GetToolCalls() {
			m.ToolCalls = append(m.ToolCalls, model.ToolCall{ID: c.GetId(), Name: c.GetName(), Args: c.GetArgsJson()})
		}
		out.Payload = m
	case *plumbv1.Event_ToolCallStarted:
		x := p.ToolCallStarted
		out.Payload = agent.ToolCallStarted{ID: x.GetId(), Name: x.GetName(), Args: x.GetArgsJson()}
	case *plumbv1.Event_ToolResult:
		x := p.ToolResult
		r := agent.ToolResultEvent{
			ID: x.GetId(), Name: x.GetName(), Content: x.GetContent(), IsError: x.GetIsError(), OffloadedPath: x.GetOffloadedPath(),
			Origin:   agent.Origin(enumName(x.GetOrigin().String(), "TOOL_RESULT_ORIGIN_")),
			Duration: time.Duration(x.GetDurationMs()) * time.Millisecond,
		}
		if x.ExitCode != nil {
			c := int(x.GetExitCode())
			r.ExitCode = &c
		}
		out.Payload = r
	case *plumbv1.Event_TodosUpdated:
		var todos []agent.Todo
		for _, td := range p.TodosUpdated.GetTodos() {
			todos = append(todos, agent.Todo{Content: td.GetContent(), Status: agent.TodoStatus(strings.ToLower(enumName(td.GetStatus().String(), "TODO_STATUS_")))})
		}
		out.Payload = agent.TodosUpdated{Todos: todos}
	case *plumbv1.Event_SubagentStarted:
		x := p.SubagentStarted
		out.Payload = agent.SubagentStarted{Subagent: x.GetSubagent(), Description: x.GetDescription(), Depth: int(x.GetDepth()), Resumed: x.GetResumed()}
	case *plumbv1.Event_SubagentFinished:
		x := p.SubagentFinished
		out.Payload = agent.SubagentFinished{Status: agent.SubagentStatus(enumName(x.GetStatus().String(), "SUBAGENT_STATUS_")), Usage: usageFromPB(x.GetUsage())}
	case *plumbv1.Event_Interrupted:
		x := p.Interrupted
		in := agent.Interrupted{InterruptID: x.GetInterruptId()}
		for _, r := range x.GetRequests() {
			req := agent.InterruptRequest{
				ToolCallID: r.GetToolCallId(), AgentPath: r.GetAgentPath(), ParentToolCallID: r.GetParentToolCallId(),
				Kind:     agent.InterruptKind(enumName(r.GetKind().String(), "INTERRUPT_KIND_")),
				ToolName: r.GetToolName(), Args: r.GetArgsJson(), Description: r.GetDescription(),
			}
			for _, d := range r.GetAllowedDecisions() {
				req.Allowed = append(req.Allowed, agent.DecisionType(strings.ToLower(enumName(d.String(), "DECISION_TYPE_"))))
			}
			if s := r.GetArgsSchemaJson(); s != "" {
				req.ArgsSchema = json.RawMessage(s)
			}
			in.Requests = append(in.Requests, req)
		}
		out.Payload = in
	case *plumbv1.Event_Usage:
		x := p.Usage
		out.Payload = agent.UsageReport{
			Call: usageFromPB(x.GetCall()), Estimated: x.GetEstimated(), Model: x.GetModel(), RunTotal: usageFromPB(x.GetRunTotal()),
			Purpose: agent.UsagePurpose(enumName(x.GetPurpose().String(), "USAGE_PURPOSE_")),
		}
	case *plumbv1.Event_Summarized:
		x := p.Summarized
		out.Payload = agent.Summarized{
			CutoffIndex: int(x.GetCutoffIndex()), MessagesSummarized: int(x.GetMessagesSummarized()),
			TokensBefore: int(x.GetTokensBefore()), TokensAfter: int(x.GetTokensAfter()), TranscriptPath: x.GetTranscriptPath(),
			Fallback: x.GetFallback(), Duration: time.Duration(x.GetDurationMs()) * time.Millisecond,
		}
	case *plumbv1.Event_Error:
		x := p.Error
		out.Payload = agent.RunError{Code: x.GetCode(), Message: x.GetMessage(), Retryable: x.GetRetryable()}
	case *plumbv1.Event_RunFinished:
		x := p.RunFinished
		out.Payload = agent.RunFinished{Status: agent.RunStatus(enumName(x.GetStatus().String(), "RUN_STATUS_")), FinalText: x.GetFinalText(), Usage: usageFromPB(x.GetUsage())}
	default:
		return out, fmt.Errorf("unknown payload %T", p)
	}
	return out, nil
}

// enumName strips an enum value name's prefix: the domain spells its
// constants as the proto names without it.
func enumName(name, prefix string) string { return strings.TrimPrefix(name, prefix) }

func usageFromPB(u *plumbv1.TokenUsage) model.Usage {
	return model.Usage{
		Prompt: int(u.GetPromptTokens()), Completion: int(u.GetCompletionTokens()), Total: int(u.GetTotalTokens()),
		Cached: int(u.GetCachedTokens()), Reasoning: int(u.GetReasoningTokens()),
	}
}
