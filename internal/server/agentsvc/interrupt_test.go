package agentsvc_test

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// interruptedThread runs scenario 36's setup: gated write_file c1 (all
// decisions) and gated delete c2 (approve, reject) in one turn.
func interruptedThread(t *testing.T) (*env, []*plumbv1.Event) {
	t.Helper()
	e := newEnv(t, gate(map[string]profile.InterruptRule{
		"write_file": {},
		"delete":     {Allowed: []agent.DecisionType{agent.DecisionApprove, agent.DecisionReject}},
	}))
	e.srv.Script("main", modeltest.Calls(call("c1", "write_file", `{"file_path":"/a.txt","content":"x"}`), call("c2", "delete", `{"file_path":"/old.txt"}`)))
	req := runReq("", "go")
	req.Files = map[string]string{"/old.txt": "keep me"}
	evs := e.mustRun(req)
	checkStream(t, evs, 1)
	in := last(t, evs).GetInterrupted()
	if in == nil || len(in.GetRequests()) != 2 {
		t.Fatalf("want interrupted with 2 requests, got %v", kinds(evs, false))
	}
	return e, evs
}

// Scenario 39: Run on an interrupted thread fails before run_started with
// FAILED_PRECONDITION, reason PENDING_INTERRUPT and the interrupt id.
func TestScenario39RunOnInterruptedThread(t *testing.T) {
	e, evs := interruptedThread(t)
	in := last(t, evs).GetInterrupted()
	got, err := e.run(runReq(evs[0].GetThreadId(), "hi"))
	wantStatus(t, err, codes.FailedPrecondition, agentsvc.ReasonPendingInterrupt)
	if len(got) != 0 {
		t.Errorf("events before the error: %v", kinds(got, false))
	}
	if md := errorInfo(err).GetMetadata(); md["interrupt_id"] != in.GetInterruptId() {
		t.Errorf("ErrorInfo metadata %v, want interrupt_id %s", md, in.GetInterruptId())
	}
	th := e.thread(evs[0].GetThreadId(), plumbv1.ThreadView_THREAD_VIEW_BASIC)
	if th.GetStatus() != plumbv1.ThreadStatus_THREAD_STATUS_INTERRUPTED || th.GetPendingInterrupt().GetInterruptId() != in.GetInterruptId() {
		t.Errorf("thread %v", th)
	}
}

// Scenarios 38 and 40: bad decisions are INVALID_ARGUMENT with field
// violations and change nothing; a stale id and a thread with nothing
// pending are FAILED_PRECONDITION. A valid Resume then continues the run
// with run_started{resumed} and the next sequence number; Attach cannot
// reach back into the first segment.
func TestScenario38ResumeValidation(t *testing.T) {
	e, evs := interruptedThread(t)
	thread := evs[0].GetThreadId()
	in := last(t, evs).GetInterrupted()
	id := in.GetInterruptId()
	approve := func(call string) *plumbv1.Decision {
		return &plumbv1.Decision{ToolCallId: call, Type: plumbv1.DecisionType_DECISION_TYPE_APPROVE}
	}
	tests := []struct {
		name      string
		decisions []*plumbv1.Decision
		field     string
	}{
		{"one decision for two requests", []*plumbv1.Decision{approve("c1")}, "decisions"},
		{"unknown id", []*plumbv1.Decision{approve("c1"), approve("c9")}, "decisions[1].tool_call_id"},
		{"duplicate", []*plumbv1.Decision{approve("c1"), approve("c1")}, "decisions[1].tool_call_id"},
		{"edit not allowed", []*plumbv1.Decision{approve("c1"), {ToolCallId: "c2", Type: plumbv1.DecisionType_DECISION_TYPE_EDIT, EditedArgsJson: `{"file_path":"/x"}`}}, "decisions[1].type"},
		{"edit args not an object", []*plumbv1.Decision{{ToolCallId: "c1", Type: plumbv1.DecisionType_DECISION_TYPE_EDIT, EditedArgsJson: `[1]`}, approve("c2")}, "decisions[0].edited_args"},
		{"unspecified type", []*plumbv1.Decision{{ToolCallId: "c1"}, approve("c2")}, "decisions[0].type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.resume(&plumbv1.ResumeRequest{ThreadId: thread, InterruptId: id, Decisions: tt.decisions})
			wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidDecisions)
			if len(got) != 0 {
				t.Errorf("events: %v", kinds(got, false))
			}
			if f := fields(err); !slices.Contains(f, tt.field) {
				t.Errorf("field violations %v, want %s", f, tt.field)
			}
			th := e.thread(thread, plumbv1.ThreadView_THREAD_VIEW_BASIC)
			if th.GetStatus() != plumbv1.ThreadStatus_THREAD_STATUS_INTERRUPTED || th.GetPendingInterrupt().GetInterruptId() != id {
				t.Errorf("thread changed: %v", th)
			}
		})
	}

	_, err := e.resume(&plumbv1.ResumeRequest{ThreadId: thread, InterruptId: "stale", Decisions: []*plumbv1.Decision{approve("c1"), approve("c2")}})
	wantStatus(t, err, codes.FailedPrecondition, agentsvc.ReasonStaleInterrupt)
	if got := errorInfo(err).GetMetadata()["interrupt_id"]; got != id {
		t.Errorf("stale: current interrupt %q, want %q", got, id)
	}
	_, err = e.resume(&plumbv1.ResumeRequest{ThreadId: thread, Decisions: []*plumbv1.Decision{approve("c1")}})
	wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidArgument)
	if f := fields(err); !slices.Equal(f, []string{"interrupt_id"}) {
		t.Errorf("missing interrupt_id: violations %v", f)
	}
	_, err = e.resume(&plumbv1.ResumeRequest{ThreadId: "nope", InterruptId: id, Decisions: []*plumbv1.Decision{approve("c1")}})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonThreadNotFound)

	e.srv.Script("main", modeltest.Text("ok"))
	resumed, err := e.resume(&plumbv1.ResumeRequest{ThreadId: thread, InterruptId: id,
		Decisions: []*plumbv1.Decision{approve("c1"), {ToolCallId: "c2", Type: plumbv1.DecisionType_DECISION_TYPE_REJECT, Message: "keep it"}}})
	if err != nil {
		t.Fatal(err)
	}
	next := last(t, evs).GetSequence() + 1
	checkStream(t, resumed, next)
	if rs := resumed[0].GetRunStarted(); !rs.GetResumed() || resumed[0].GetRunId() != evs[0].GetRunId() {
		t.Errorf("run_started %v", rs)
	}
	if f := last(t, resumed).GetRunFinished(); f.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Errorf("resume ended with %v", kinds(resumed, false))
	}
	for _, ev := range resumed {
		if r := ev.GetToolResult(); r != nil && r.GetId() == "c2" &&
			(!r.GetIsError() || r.GetOrigin() != plumbv1.ToolResultOrigin_TOOL_RESULT_ORIGIN_REJECTED || !strings.Contains(r.GetContent(), "keep it")) {
			t.Errorf("c2 result %v", r)
		}
	}
	th := e.thread(thread, plumbv1.ThreadView_THREAD_VIEW_FULL)
	var files []string
	for _, f := range th.GetFiles() {
		files = append(files, f.GetPath())
	}
	if !slices.Equal(files, []string{"/a.txt", "/old.txt"}) {
		t.Errorf("State files %v", files)
	}

	_, err = e.resume(&plumbv1.ResumeRequest{ThreadId: thread, InterruptId: id, Decisions: []*plumbv1.Decision{approve("c1"), approve("c2")}})
	wantStatus(t, err, codes.FailedPrecondition, agentsvc.ReasonNoPendingInterrupt)

	// Both segments are retained: 0 replays the whole run, a sequence
	// inside the first segment the rest of it.
	whole := seqs(append(slices.Clone(evs), resumed...))
	replay, err := recvAttach(e, thread, 0)
	if err != nil || !slices.Equal(seqs(replay), whole) {
		t.Errorf("attach 0: %v, sequences %v, want %v", err, seqs(replay), whole)
	}
	replay, err = recvAttach(e, thread, 1)
	if err != nil || !slices.Equal(seqs(replay), whole[1:]) {
		t.Errorf("attach 1: %v, sequences %v, want %v", err, seqs(replay), whole[1:])
	}
	replay, err = recvAttach(e, thread, next-1)
	if err != nil || !slices.Equal(seqs(replay), seqs(resumed)) {
		t.Errorf("attach %d: %v, sequences %v", next-1, err, seqs(replay))
	}
}

// Scenario 45 through gRPC: a client tool interrupts with kind
// CLIENT_TOOL and the client's RESPOND answers it.
func TestScenario45ClientTool(t *testing.T) {
	e := newEnv(t)
	e.srv.Script("main", modeltest.Calls(call("c1", "get_location", `{}`)), modeltest.Text("in Paris"))
	req := runReq("", "where am I?")
	req.ClientTools = []*plumbv1.ClientTool{{Name: "get_location", Description: "The user's location.", ParametersJson: `{"type":"object","properties":{}}`}}
	evs := e.mustRun(req)
	in := last(t, evs).GetInterrupted()
	if in == nil || len(in.GetRequests()) != 1 || in.GetRequests()[0].GetKind() != plumbv1.InterruptKind_INTERRUPT_KIND_CLIENT_TOOL {
		t.Fatalf("want a client-tool interrupt, got %v", kinds(evs, false))
	}
	if got := in.GetRequests()[0].GetAllowedDecisions(); !slices.Equal(got, []plumbv1.DecisionType{plumbv1.DecisionType_DECISION_TYPE_RESPOND, plumbv1.DecisionType_DECISION_TYPE_REJECT}) {
		t.Errorf("allowed %v", got)
	}
	resumed, err := e.resume(&plumbv1.ResumeRequest{ThreadId: evs[0].GetThreadId(), InterruptId: in.GetInterruptId(),
		Decisions: []*plumbv1.Decision{{ToolCallId: "c1", Type: plumbv1.DecisionType_DECISION_TYPE_RESPOND, Message: "Paris"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(resumed, true); !slices.Equal(got, []string{"run_started", "tool_call_started", "tool_result", "message", "run_finished"}) {
		t.Errorf("kinds %v", got)
	}
	if f := last(t, resumed).GetRunFinished(); f.GetFinalText() != "in Paris" {
		t.Errorf("final %v", f)
	}
}
