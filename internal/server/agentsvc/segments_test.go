package agentsvc_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// gatedCounter gates the counter tool behind an approval.
var gatedCounter = gate(map[string]profile.InterruptRule{"counter": {}})

// runToInterrupt runs a new thread on e until the model's counter call
// waits for approval; it returns the Run stream's events.
func runToInterrupt(t *testing.T, e *env) []*plumbv1.Event {
	t.Helper()
	e.srv.Script("main", modeltest.Calls(call("c1", "counter", `{}`)))
	evs := e.mustRun(runReq("", "count"))
	checkStream(t, evs, 1)
	if last(t, evs).GetInterrupted() == nil {
		t.Fatalf("run ended with %v, want interrupted", kinds(evs, false))
	}
	return evs
}

// resumeToEnd approves the pending call on e and returns the Resume
// stream's events (e's model answers "done").
func resumeToEnd(t *testing.T, e *env, runEvs []*plumbv1.Event) []*plumbv1.Event {
	t.Helper()
	e.srv.Script("main", modeltest.Text("done"))
	in := last(t, runEvs)
	evs, err := e.resume(&plumbv1.ResumeRequest{ThreadId: in.GetThreadId(), InterruptId: in.GetInterrupted().GetInterruptId(),
		Decisions: []*plumbv1.Decision{{ToolCallId: "c1", Type: plumbv1.DecisionType_DECISION_TYPE_APPROVE}}})
	if err != nil {
		t.Fatalf("resume: %v (kinds %v)", err, kinds(evs, true))
	}
	checkStream(t, evs, runEvs[len(runEvs)-1].GetSequence()+1)
	if last(t, evs).GetRunFinished().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("resume ended with %v, want run_finished COMPLETED", kinds(evs, false))
	}
	return evs
}

// wantWholeRun attaches to thread on e after after and checks that the
// stream is exactly want: every event once, in order, as first sent.
func wantWholeRun(t *testing.T, name string, e *env, thread string, after uint64, want []*plumbv1.Event) {
	t.Helper()
	got, err := recvAttach(e, thread, after)
	if err != nil {
		t.Fatalf("%s: attach after %d: %v (got %v)", name, after, err, seqs(got))
	}
	if len(got) != len(want) {
		t.Fatalf("%s: attach after %d sent sequences %v (%v), want %v (%v)", name, after, seqs(got), kinds(got, true), seqs(want), kinds(want, true))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("%s: attach after %d: event %d is %v, want %v", name, after, i, got[i], want[i])
		}
	}
}

// TestAttachReplaysTheWholeRunAfterResume: a run interrupted for an
// approval and resumed is replayed by Attach from its start (after 0)
// through both segments, the interrupted event included, each event
// once, in order; from a sequence inside the first segment, the rest.
func TestAttachReplaysTheWholeRunAfterResume(t *testing.T) {
	e := newEnv(t, gatedCounter)
	runEvs := runToInterrupt(t, e)
	all := append(runEvs, resumeToEnd(t, e, runEvs)...)
	thread := all[0].GetThreadId()
	wantWholeRun(t, "one replica", e, thread, 0, all)
	wantWholeRun(t, "one replica", e, thread, 2, all[2:])
}

// TestAttachReplaysTheWholeRunOnAnyReplica: three replicas on one
// PostgreSQL. The run is interrupted on A and resumed on B; Attach after 0
// on A (which ran only the first segment), B (only the second) and C
// (neither) replays the whole run from the shared event log, each event
// once, in order.
func TestAttachReplaysTheWholeRunOnAnyReplica(t *testing.T) {
	f := newPGFleet(t)
	a, _ := f.replica("replica-a", gatedCounter)
	b, _ := f.replica("replica-b", gatedCounter)
	c, _ := f.replica("replica-c", gatedCounter)

	runEvs := runToInterrupt(t, a)
	all := append(runEvs, resumeToEnd(t, b, runEvs)...)
	thread := all[0].GetThreadId()
	for name, e := range map[string]*env{"replica A": a, "replica B": b, "replica C": c} {
		wantWholeRun(t, name, e, thread, 0, all)
	}
	wantWholeRun(t, "replica C", c, thread, 2, all[2:])
	if a.kit.Count()+b.kit.Count() != 1 {
		t.Fatalf("counter ran %d times on A and %d on B; want once", a.kit.Count(), b.kit.Count())
	}
}
