package agentconv

import (
	"encoding/json"
	"maps"
	"slices"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/backend/state"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ThreadStatusToPB converts a thread status.
func ThreadStatusToPB(s agent.ThreadStatus) plumbv1.ThreadStatus {
	return plumbv1.ThreadStatus(enum(plumbv1.ThreadStatus_value, "THREAD_STATUS_", string(s)))
}

// ThreadStatusFromPB converts a ListThreads status filter; UNSPECIFIED is
// "" (any status).
func ThreadStatusFromPB(s plumbv1.ThreadStatus) agent.ThreadStatus {
	if s == plumbv1.ThreadStatus_THREAD_STATUS_UNSPECIFIED {
		return ""
	}
	return agent.ThreadStatus(enumName(plumbv1.ThreadStatus_name, "THREAD_STATUS_", int32(s)))
}

// timestamp converts a time; the zero time is unset.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// RunRecordToPB converts a run record (nil = none).
func RunRecordToPB(r *agent.RunRecord) *plumbv1.RunRecord {
	if r == nil {
		return nil
	}
	out := &plumbv1.RunRecord{
		RunId: r.RunID, Status: RunStatusToPB(r.Status), Usage: UsageToPB(r.Usage), FinalText: r.FinalText,
		StartedAt: timestamp(r.StartedAt), FinishedAt: timestamp(r.FinishedAt), Agent: r.Spec.Agent,
		Input: slices.Clone(r.Input), CreatedAt: timestamp(r.CreatedAt), Holder: r.Holder, Steps: int32(r.Steps),
	}
	if e := r.Error; e != nil {
		out.Error = &plumbv1.RunError{Code: e.Code, Message: e.Message, Retryable: e.Retryable}
	}
	return out
}

// ThreadToPB converts a thread in the BASIC view: everything but the
// message log, the State files and the checkpoints. status is the status
// to report (the caller knows about runs the store does not record yet)
// and messageCount the log's length.
func ThreadToPB(td *agent.ThreadData, status agent.ThreadStatus, messageCount int) *plumbv1.Thread {
	out := &plumbv1.Thread{
		Id: td.Thread.ID, CreatedAt: timestamp(td.Thread.CreatedAt), UpdatedAt: timestamp(td.Thread.UpdatedAt),
		Metadata: maps.Clone(td.Thread.Metadata), Status: ThreadStatusToPB(status), MessageCount: int64(messageCount),
		Todos: TodosToPB(td.Todos), LastRun: RunRecordToPB(td.LastRun), Usage: UsageToPB(td.Usage), SandboxId: td.Thread.SandboxID,
	}
	if p := td.Interrupt; p != nil {
		out.PendingInterrupt = InterruptedToPB(agent.Interrupted{InterruptID: p.InterruptID, Requests: p.Requests})
	}
	return out
}

// Limit bounds one page of a thread list: at most Count items and Bytes of
// their encoded size. The first item of a page is always included, so a
// page holds at least one item whatever its size.
type Limit struct {
	Count, Bytes int
}

// fits reports whether an item of size n may join a page of count items
// and size bytes.
func (l Limit) fits(count, bytes, n int) bool {
	return count == 0 || (count < l.Count && bytes+n <= l.Bytes)
}

// MessagesToPB converts the log's messages from index first on, as many
// as lim allows; next is the index of the first message left out
// (len(msgs) when the page reaches the end of the log). Indexes are log
// positions.
func MessagesToPB(msgs []agent.Message, first int, lim Limit) (out []*plumbv1.ThreadMessage, next int) {
	first = min(first, len(msgs))
	out, n := MessagesToPBAt(msgs[first:], first, lim)
	return out, first + n
}

// MessagesToPBAt converts msgs, a part of a log that starts at index base,
// as many as lim allows; n is how many it converted.
func MessagesToPBAt(msgs []agent.Message, base int, lim Limit) (out []*plumbv1.ThreadMessage, n int) {
	bytes := 0
	for i, msg := range msgs {
		m := MessageToPB(msg, base+i)
		size := proto.Size(m)
		if !lim.fits(len(out), bytes, size) {
			return out, i
		}
		out, bytes = append(out, m), bytes+size
	}
	return out, len(msgs)
}

// MessageToPB converts the message at log position index.
func MessageToPB(m agent.Message, index int) *plumbv1.ThreadMessage {
	out := &plumbv1.ThreadMessage{
		Index: int64(index), Role: string(m.Role), Content: m.Content, Reasoning: m.ReasoningContent,
		ToolCallId: m.ToolCallID, Name: m.Name, IsError: m.IsError, Source: m.Source, CreatedAt: timestamp(m.CreatedAt),
		Origin: plumbv1.ToolResultOrigin(enum(plumbv1.ToolResultOrigin_value, "TOOL_RESULT_ORIGIN_", string(m.Origin))),
	}
	if len(m.ToolCalls) > 0 {
		out.ToolCalls = ToolCallsToPB(m.ToolCalls)
	}
	return out
}

// StateFilesToPB lists a thread's stored State-backend files whose path
// sorts after after ("" = from the first), by path, as many as lim
// allows; more reports that files were left out. A document that does not
// decode is listed with its path only.
func StateFilesToPB(files map[string]json.RawMessage, after string, lim Limit) (out []*plumbv1.StateFile, more bool) {
	bytes := 0
	for _, p := range slices.Sorted(maps.Keys(files)) {
		if after != "" && p <= after {
			continue
		}
		sf := &plumbv1.StateFile{Path: p}
		var f state.File
		if err := json.Unmarshal(files[p], &f); err == nil {
			sf.Size = int64(len(f.Content))
			sf.ModifiedAt = pbconv.Timestamp(f.ModifiedAt)
		}
		n := proto.Size(sf)
		if !lim.fits(len(out), bytes, n) {
			return out, true
		}
		out, bytes = append(out, sf), bytes+n
	}
	return out, false
}

// CheckpointsToPB converts retained checkpoints (oldest first) with an id
// above after, as many as lim allows; more reports that checkpoints were
// left out.
func CheckpointsToPB(cps []agent.CheckpointInfo, after int64, lim Limit) (out []*plumbv1.Checkpoint, more bool) {
	bytes := 0
	for _, c := range cps {
		if c.ID <= after {
			continue
		}
		pb := &plumbv1.Checkpoint{
			Id: c.ID, RunId: c.RunID, Step: int32(c.Step), MessageCount: int64(c.MessageCount), CreatedAt: timestamp(c.CreatedAt),
			Phase: plumbv1.CheckpointPhase(enum(plumbv1.CheckpointPhase_value, "CHECKPOINT_PHASE_", string(c.Phase))),
		}
		n := proto.Size(pb)
		if !lim.fits(len(out), bytes, n) {
			return out, true
		}
		out, bytes = append(out, pb), bytes+n
	}
	return out, false
}

// AgentInfoToPB converts one ListAgents entry. Its tools are the
// profile's expanded names (profile.Info.ToolNames); client tools are per
// run and not listed.
func AgentInfoToPB(info profile.Info) *plumbv1.AgentInfo {
	out := &plumbv1.AgentInfo{
		Name: info.Name, Description: info.Description, Model: info.Model, Subagents: slices.Clone(info.Subagents),
		Kind:  plumbv1.AgentKind(enum(plumbv1.AgentKind_value, "AGENT_KIND_", string(info.Kind))),
		Tools: slices.Clone(info.ToolNames),
	}
	for _, tool := range slices.Sorted(maps.Keys(info.InterruptOn)) {
		r := info.InterruptOn[tool]
		if r.Off {
			continue // an exemption (`tool: false`) gates nothing
		}
		allowed := r.Allowed
		if len(allowed) == 0 {
			allowed = agent.AllDecisions()
		}
		desc := r.Description
		if desc == "" {
			desc = "Approval required: " + tool
		}
		out.InterruptOn = append(out.InterruptOn, &plumbv1.InterruptRule{Tool: tool, AllowedDecisions: DecisionTypesToPB(allowed), Description: desc})
	}
	return out
}
