package pbconv_test

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
	"github.com/plumbhq/plumb/pkg/pbconv"
)

func TestThreadStatusRoundTrip(t *testing.T) {
	for _, s := range []agent.ThreadStatus{agent.ThreadIdle, agent.ThreadRunning, agent.ThreadInterrupted} {
		pb := pbconv.ThreadStatusToPB(s)
		if pb == plumbv1.ThreadStatus_THREAD_STATUS_UNSPECIFIED || pbconv.ThreadStatusFromPB(pb) != s {
			t.Errorf("%s → %v → %s", s, pb, pbconv.ThreadStatusFromPB(pb))
		}
	}
	if got := pbconv.ThreadStatusFromPB(plumbv1.ThreadStatus_THREAD_STATUS_UNSPECIFIED); got != "" {
		t.Errorf("UNSPECIFIED → %q, want any", got)
	}
}

func TestThreadFullToPB(t *testing.T) {
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
			{Message: model.Message{Role: model.RoleTool, Content: "boom", ToolCallID: "c1", Name: "ls"}, IsError: true},
		},
		Todos:       []agent.Todo{{Content: "x", Status: agent.TodoInProgress}},
		Interrupt:   &agent.PendingInterrupt{InterruptID: "i1", Requests: []agent.InterruptRequest{{ToolCallID: "c2", Kind: agent.InterruptApproval, Allowed: agent.AllDecisions()}}},
		LastRun:     &agent.RunRecord{RunID: "r1", Status: agent.StatusInterrupted, StartedAt: now, Usage: model.Usage{Total: 7}},
		Usage:       model.Usage{Total: 9},
		Checkpoints: []agent.CheckpointInfo{{ID: 4, RunID: "r1", Phase: agent.PhaseInterrupt, Step: 1, MessageCount: 3, CreatedAt: now}},
		Files:       map[string]json.RawMessage{"/b.txt": doc, "/a.txt": json.RawMessage(`"not a file"`)},
	}
	th := pbconv.ThreadFullToPB(td, agent.ThreadInterrupted)
	if th.GetId() != "t1" || th.GetSandboxId() != "sbx-1" || th.GetStatus() != plumbv1.ThreadStatus_THREAD_STATUS_INTERRUPTED ||
		th.GetMessageCount() != 3 || th.GetUsage().GetTotalTokens() != 9 || th.GetLastRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_INTERRUPTED ||
		th.GetLastRun().GetFinishedAt() != nil || th.GetPendingInterrupt().GetInterruptId() != "i1" ||
		th.GetTodos()[0].GetStatus() != plumbv1.TodoStatus_TODO_STATUS_IN_PROGRESS {
		t.Errorf("thread %v", th)
	}
	m := th.GetMessages()
	if m[0].GetSource() != "input" || m[1].GetToolCalls()[0].GetName() != "ls" || !m[2].GetIsError() || m[2].GetIndex() != 2 || m[1].GetCreatedAt() != nil {
		t.Errorf("messages %v", m)
	}
	f := th.GetFiles()
	if len(f) != 2 || f[0].GetPath() != "/a.txt" || f[0].GetSize() != 0 || f[1].GetSize() != 5 || !f[1].GetModifiedAt().AsTime().Equal(now) {
		t.Errorf("files %v", f)
	}
	if c := th.GetCheckpoints(); len(c) != 1 || c[0].GetPhase() != plumbv1.CheckpointPhase_CHECKPOINT_PHASE_INTERRUPT || c[0].GetMessageCount() != 3 {
		t.Errorf("checkpoints %v", c)
	}
	if basic := pbconv.ThreadToPB(td, agent.ThreadIdle, 42); basic.GetMessageCount() != 42 || basic.GetMessages() != nil || basic.GetFiles() != nil {
		t.Errorf("basic %v", basic)
	}
}

func TestAgentInfoToPB(t *testing.T) {
	info := profile.Info{Name: "r", Kind: profile.Subagent, Tools: []string{"@read", "task"}, ToolNames: []string{"glob", "grep", "ls", "mcp__gh__*", "read_file", "task"},
		InterruptOn: map[string]profile.InterruptRule{"task": {Allowed: []agent.DecisionType{agent.DecisionReject}, Description: "Delegate?"}, "grep": {Off: true}}}
	pb := pbconv.AgentInfoToPB(info)
	if pb.GetKind() != plumbv1.AgentKind_AGENT_KIND_SUBAGENT || !slices.Equal(pb.GetTools(), info.ToolNames) {
		t.Errorf("agent %v", pb)
	}
	// An exemption (grep: false) is no gate.
	if r := pb.GetInterruptOn(); len(r) != 1 || r[0].GetDescription() != "Delegate?" || !slices.Equal(r[0].GetAllowedDecisions(), []plumbv1.DecisionType{plumbv1.DecisionType_DECISION_TYPE_REJECT}) {
		t.Errorf("interrupt_on %v", r)
	}
}
