package agentconv_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/backend/state"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/pbconv/agentconv"
)

func TestThreadStatusRoundTrip(t *testing.T) {
	for _, s := range []agent.ThreadStatus{agent.ThreadIdle, agent.ThreadRunning, agent.ThreadInterrupted} {
		pb := agentconv.ThreadStatusToPB(s)
		if pb == plumbv1.ThreadStatus_THREAD_STATUS_UNSPECIFIED || agentconv.ThreadStatusFromPB(pb) != s {
			t.Errorf("%s → %v → %s", s, pb, agentconv.ThreadStatusFromPB(pb))
		}
	}
	if got := agentconv.ThreadStatusFromPB(plumbv1.ThreadStatus_THREAD_STATUS_UNSPECIFIED); got != "" {
		t.Errorf("UNSPECIFIED → %q, want any", got)
	}
}

func TestThreadListsToPB(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	doc, err := json.Marshal(state.File{Content: []byte("hello"), ModifiedAt: now.Format(time.RFC3339Nano)})
	if err != nil {
		t.Fatal(err)
	}
	td := &agent.ThreadData{
		Thread: agent.Thread{ID: "t1", CreatedAt: now, UpdatedAt: now, Metadata: map[string]string{"a": "b"}, SandboxID: "sbx-1"},
		Messages: []agent.Message{
			{Message: model.Message{Role: model.RoleUser, Content: "hi"}, Source: agent.SourceInput, CreatedAt: now},
			{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "c1", Name: "ls", Args: `{}`}}}},
			{Message: model.Message{Role: model.RoleTool, Content: "boom", ToolCallID: "c1", Name: "ls"}, IsError: true, Origin: agent.OriginRejected},
		},
		Todos:       []agent.Todo{{Content: "x", Status: agent.TodoInProgress}},
		Interrupt:   &agent.PendingInterrupt{InterruptID: "i1", Requests: []agent.InterruptRequest{{ToolCallID: "c2", Kind: agent.InterruptApproval, Allowed: agent.AllDecisions()}}},
		LastRun:     &agent.RunRecord{RunID: "r1", Status: agent.StatusInterrupted, StartedAt: now, Usage: model.Usage{Total: 7}},
		Usage:       model.Usage{Total: 9},
		Checkpoints: []agent.CheckpointInfo{{ID: 4, RunID: "r1", Phase: agent.PhaseInterrupt, Step: 1, MessageCount: 3, CreatedAt: now}},
		Files:       map[string]json.RawMessage{"/b.txt": doc, "/a.txt": json.RawMessage(`"not a file"`)},
	}
	all := agentconv.Limit{Count: 100, Bytes: 1 << 20}
	th := agentconv.ThreadToPB(td, agent.ThreadInterrupted, len(td.Messages))
	var next int
	var more, cmore bool
	th.Messages, next = agentconv.MessagesToPB(td.Messages, 0, all)
	th.Files, more = agentconv.StateFilesToPB(td.Files, "", all)
	th.Checkpoints, cmore = agentconv.CheckpointsToPB(td.Checkpoints, 0, all)
	if next != 3 || more || cmore {
		t.Errorf("whole lists left some out: next %d, files %v, checkpoints %v", next, more, cmore)
	}
	if th.GetId() != "t1" || th.GetSandboxId() != "sbx-1" || th.GetStatus() != plumbv1.ThreadStatus_THREAD_STATUS_INTERRUPTED ||
		th.GetMessageCount() != 3 || th.GetUsage().GetTotalTokens() != 9 || th.GetLastRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_INTERRUPTED ||
		th.GetLastRun().GetFinishedAt() != nil || th.GetPendingInterrupt().GetInterruptId() != "i1" ||
		th.GetTodos()[0].GetStatus() != plumbv1.TodoStatus_TODO_STATUS_IN_PROGRESS {
		t.Errorf("thread %v", th)
	}
	m := th.GetMessages()
	if m[0].GetSource() != "input" || m[1].GetToolCalls()[0].GetName() != "ls" || !m[2].GetIsError() || m[2].GetIndex() != 2 || m[1].GetCreatedAt() != nil ||
		m[2].GetOrigin() != plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_REJECTED || m[1].GetOrigin() != plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_UNSPECIFIED {
		t.Errorf("messages %v", m)
	}
	f := th.GetFiles()
	if len(f) != 2 || f[0].GetPath() != "/a.txt" || f[0].GetSize() != 0 || f[1].GetSize() != 5 || !f[1].GetModifiedAt().AsTime().Equal(now) {
		t.Errorf("files %v", f)
	}
	if c := th.GetCheckpoints(); len(c) != 1 || c[0].GetPhase() != plumbv1.CheckpointPhase_CHECKPOINT_PHASE_INTERRUPT || c[0].GetMessageCount() != 3 {
		t.Errorf("checkpoints %v", c)
	}
	if basic := agentconv.ThreadToPB(td, agent.ThreadIdle, 42); basic.GetMessageCount() != 42 || basic.GetMessages() != nil || basic.GetFiles() != nil {
		t.Errorf("basic %v", basic)
	}
}

// TestThreadListPages: a page stops at its count or its byte budget,
// holds at least one item whatever its size, and goes on where the last
// one stopped.
func TestThreadListPages(t *testing.T) {
	msgs := []agent.Message{
		{Message: model.Message{Role: model.RoleUser, Content: "a"}},
		{Message: model.Message{Role: model.RoleUser, Content: string(make([]byte, 1000))}},
		{Message: model.Message{Role: model.RoleUser, Content: "c"}},
	}
	page, next := agentconv.MessagesToPB(msgs, 0, agentconv.Limit{Count: 10, Bytes: 100})
	if len(page) != 1 || next != 1 {
		t.Fatalf("first page: %d messages, next %d; want 1, 1 (the second is over the budget)", len(page), next)
	}
	page, next = agentconv.MessagesToPB(msgs, next, agentconv.Limit{Count: 10, Bytes: 100})
	if len(page) != 1 || page[0].GetIndex() != 1 || next != 2 {
		t.Fatalf("second page: %v, next %d; want the large message alone, next 2", page, next)
	}
	page, next = agentconv.MessagesToPB(msgs, next, agentconv.Limit{Count: 1, Bytes: 100})
	if len(page) != 1 || page[0].GetIndex() != 2 || next != 3 {
		t.Fatalf("last page: %v, next %d; want message 2, next 3", page, next)
	}
	files := map[string]json.RawMessage{"/a": nil, "/b": nil, "/c": nil}
	fp, more := agentconv.StateFilesToPB(files, "/a", agentconv.Limit{Count: 1, Bytes: 100})
	if len(fp) != 1 || fp[0].GetPath() != "/b" || !more {
		t.Fatalf("files after /a: %v, more %v; want /b and more", fp, more)
	}
	cps := []agent.CheckpointInfo{{ID: 1}, {ID: 5}, {ID: 9}}
	cp, more := agentconv.CheckpointsToPB(cps, 5, agentconv.Limit{Count: 1, Bytes: 100})
	if len(cp) != 1 || cp[0].GetId() != 9 || more {
		t.Fatalf("checkpoints after 5: %v, more %v; want 9 and no more", cp, more)
	}
}

func TestAgentInfoToPB(t *testing.T) {
	info := profile.Info{Name: "r", Kind: profile.Subagent, Tools: []string{"@read", "task"}, ToolNames: []string{"glob", "grep", "ls", "mcp__gh__*", "read_file", "task"},
		InterruptOn: map[string]profile.InterruptRule{"task": {Allowed: []agent.DecisionType{agent.DecisionReject}, Description: "Delegate?"}, "grep": {Off: true}}}
	pb := agentconv.AgentInfoToPB(info)
	if pb.GetKind() != plumbv1.AgentKind_AGENT_KIND_SUBAGENT || !slices.Equal(pb.GetTools(), info.ToolNames) {
		t.Errorf("agent %v", pb)
	}
	// An exemption (grep: false) is no gate.
	if r := pb.GetInterruptOn(); len(r) != 1 || r[0].GetDescription() != "Delegate?" || !slices.Equal(r[0].GetAllowedDecisions(), []plumbv1.DecisionType{plumbv1.DecisionType_DECISION_TYPE_REJECT}) {
		t.Errorf("interrupt_on %v", r)
	}
}
