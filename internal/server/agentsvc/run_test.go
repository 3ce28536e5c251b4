package agentsvc_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/pbconv"
)

// Scenario 1 through gRPC: the events in order, contiguous sequences, the
// stream closed with OK, the log [user, assistant].
func TestScenario1HelloThroughGRPC(t *testing.T) {
	e := newEnv(t)
	e.srv.Script("main", modeltest.Text("Hello"))
	evs := e.mustRun(runReq("", "hi"))
	checkStream(t, evs, 1)
	want := []string{"run_started", "message_delta", "message_delta", "message_delta", "message", "usage", "run_finished"}
	if got := kinds(evs, false); !slices.Equal(got, want) {
		t.Fatalf("kinds %v, want %v", got, want)
	}
	if !slices.Equal(seqs(evs), []uint64{1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("sequences %v", seqs(evs))
	}
	rf := last(t, evs).GetRunFinished()
	if rf.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || rf.GetFinalText() != "Hello" {
		t.Errorf("run_finished %v", rf)
	}
	rs := evs[0].GetRunStarted()
	if rs.GetThreadId() == "" || rs.GetRunId() != evs[0].GetRunId() || rs.GetAgent() != "main" || rs.GetModel() != "smart" || rs.GetResumed() {
		t.Errorf("run_started %v", rs)
	}
	th := e.thread(rs.GetThreadId(), plumbv1.ThreadView_THREAD_VIEW_FULL)
	var roles []string
	for _, m := range th.GetMessages() {
		roles = append(roles, m.GetRole())
	}
	if !slices.Equal(roles, []string{"user", "assistant"}) || th.GetMessageCount() != 2 {
		t.Errorf("log roles %v, message_count %d", roles, th.GetMessageCount())
	}
	if th.GetStatus() != plumbv1.ThreadStatus_THREAD_STATUS_IDLE || th.GetLastRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED ||
		th.GetLastRun().GetRunId() != rs.GetRunId() {
		t.Errorf("thread %v", th)
	}
	// The thread is free as soon as the terminal event arrived.
	e.srv.Script("main", modeltest.Text("Again"))
	evs = e.mustRun(runReq(rs.GetThreadId(), "more"))
	if f := last(t, evs).GetRunFinished(); f.GetFinalText() != "Again" {
		t.Errorf("second run %v", kinds(evs, true))
	}
}

// Scenario 71: a detached run goes on after its client disconnected;
// Attach replays the same events from sequence 1 and follows it to
// run_finished.
func TestScenario71DetachAndAttach(t *testing.T) {
	e := newEnv(t)
	e.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"ms":300}`)), modeltest.Text("done"))
	ctx, cancel := context.WithCancel(e.ctx())
	req := runReq("", "go")
	req.Detach = true
	s, err := e.c.Run(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	first := recvUntil(t, s, "run_started")
	cancel() // the client disconnects
	thread, runID := first[0].GetThreadId(), first[0].GetRunId()

	as, err := e.c.Attach(e.ctx(), &plumbv1.AttachRequest{ThreadId: thread})
	if err != nil {
		t.Fatal(err)
	}
	replay, err := recvAll(as)
	if err != nil {
		t.Fatal(err)
	}
	checkStream(t, replay, 1)
	if replay[0].GetRunId() != runID || !replay[0].GetTimestamp().AsTime().Equal(first[0].GetTimestamp().AsTime()) {
		t.Errorf("replayed run_started differs: %v vs %v", replay[0], first[0])
	}
	if f := last(t, replay).GetRunFinished(); f.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || f.GetFinalText() != "done" {
		t.Errorf("replay ends with %v", last(t, replay))
	}
	if got := kinds(replay, true); !slices.Equal(got, []string{"run_started", "message", "tool_call_started", "tool_result", "message", "run_finished"}) {
		t.Errorf("replay kinds %v", got)
	}

	// A retained run replays from any point, and a second Attach gets the
	// same sequence numbers.
	after := replay[3].GetSequence()
	as, err = e.c.Attach(e.ctx(), &plumbv1.AttachRequest{ThreadId: thread, AfterSequence: after})
	if err != nil {
		t.Fatal(err)
	}
	tail, err := recvAll(as)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seqs(tail), seqs(replay[4:])) {
		t.Errorf("attach after %d: sequences %v, want %v", after, seqs(tail), seqs(replay[4:]))
	}
	if th := e.thread(thread, plumbv1.ThreadView_THREAD_VIEW_BASIC); th.GetLastRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Errorf("run record %v", th.GetLastRun())
	}
}

// Scenario 73: a second Run on an active thread is ABORTED; Cancel stops
// the first, whose stream (and an attached one) ends with
// run_finished{CANCELLED}.
func TestScenario73BusyThenCancel(t *testing.T) {
	e := newEnv(t)
	e.srv.Script("main", modeltest.Text("warm-up"))
	thread := last(t, e.mustRun(runReq("", "hi"))).GetThreadId()

	e.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"ms":10000}`)))
	s, err := e.c.Run(e.ctx(), runReq(thread, "sleep"))
	if err != nil {
		t.Fatal(err)
	}
	head := recvUntil(t, s, "tool_call_started")
	runID := head[0].GetRunId()

	_, err = e.run(runReq(thread, "me too"))
	wantStatus(t, err, codes.Aborted, agentsvc.ReasonThreadBusy)
	if th := e.thread(thread, plumbv1.ThreadView_THREAD_VIEW_BASIC); th.GetStatus() != plumbv1.ThreadStatus_THREAD_STATUS_RUNNING {
		t.Errorf("status while running: %v", th.GetStatus())
	}

	as, err := e.c.Attach(e.ctx(), &plumbv1.AttachRequest{ThreadId: thread, AfterSequence: head[len(head)-1].GetSequence()})
	if err != nil {
		t.Fatal(err)
	}
	attached := make(chan []*plumbv1.Event, 1)
	go func() {
		evs, _ := recvAll(as)
		attached <- evs
	}()

	start := time.Now()
	res, err := e.c.Cancel(e.ctx(), &plumbv1.CancelRequest{ThreadId: thread})
	if err != nil {
		t.Fatal(err)
	}
	if !res.GetWasRunning() || res.GetRunId() != runID {
		t.Errorf("cancel %v, want run %s", res, runID)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v", d)
	}
	rest, err := recvAll(s)
	if err != nil {
		t.Fatal(err)
	}
	evs := append(head, rest...)
	checkStream(t, evs, 1)
	if f := last(t, evs).GetRunFinished(); f.GetStatus() != plumbv1.RunStatus_RUN_STATUS_CANCELLED {
		t.Errorf("first stream ends with %v", last(t, evs))
	}
	a := <-attached
	if len(a) == 0 || last(t, a).GetRunFinished().GetStatus() != plumbv1.RunStatus_RUN_STATUS_CANCELLED {
		t.Errorf("attached stream %v", kinds(a, false))
	}
	// Nothing left to cancel.
	res, err = e.c.Cancel(e.ctx(), &plumbv1.CancelRequest{ThreadId: thread})
	if err != nil || res.GetWasRunning() || res.GetRunId() != "" {
		t.Errorf("second cancel %v, %v", res, err)
	}
	_, err = e.c.Cancel(e.ctx(), &plumbv1.CancelRequest{ThreadId: "nope"})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonThreadNotFound)
}

// Scenario 70: the client cancels its stream (no detach) mid-tool: the
// tool sees the cancellation, no further model request is made, the run
// is recorded CANCELLED and the next Run patches the dangling call.
func TestScenario70ClientCancelsMidTool(t *testing.T) {
	e := newEnv(t)
	e.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"ms":10000}`)))
	ctx, cancel := context.WithCancel(e.ctx())
	defer cancel()
	s, err := e.c.Run(ctx, runReq("", "sleep"))
	if err != nil {
		t.Fatal(err)
	}
	head := recvUntil(t, s, "tool_call_started")
	thread := head[0].GetThreadId()
	start := time.Now()
	time.AfterFunc(200*time.Millisecond, cancel)
	if _, err := recvAll(s); status.Code(err) != codes.Canceled {
		t.Errorf("stream after cancel: %v", err)
	}
	eventually(t, "run record CANCELLED", func() bool {
		return e.thread(thread, plumbv1.ThreadView_THREAD_VIEW_BASIC).GetLastRun().GetStatus() == plumbv1.RunStatus_RUN_STATUS_CANCELLED
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the run took %v to stop; the tool did not see the cancellation", d)
	}
	if n := e.srv.Count("main"); n != 1 {
		t.Errorf("%d model requests, want 1", n)
	}

	e.srv.Script("main", modeltest.Text("ok"))
	e.mustRun(runReq(thread, "continue"))
	reqs := e.srv.Requests("main")
	msgs := reqs[len(reqs)-1].Body.Messages
	var patched bool
	for _, m := range msgs {
		if m.Role == "tool" && m.ToolCallID == "c1" && strings.Contains(m.Content, "did not complete") {
			patched = true
		}
	}
	if !patched {
		t.Errorf("c1 not patched in %+v", msgs)
	}
}

// RESOURCE_EXHAUSTED when every run slot is taken; the slot is free again
// once the run ended.
func TestRunSlotsExhausted(t *testing.T) {
	e := newEnv(t, withService(func(c *agentsvc.Config) { c.MaxConcurrentRuns = 1 }))
	e.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"ms":10000}`)))
	s, err := e.c.Run(e.ctx(), runReq("", "sleep"))
	if err != nil {
		t.Fatal(err)
	}
	head := recvUntil(t, s, "tool_call_started")

	_, err = e.run(runReq("", "another thread"))
	wantStatus(t, err, codes.ResourceExhausted, agentsvc.ReasonNoRunSlot)

	if _, err := e.c.Cancel(e.ctx(), &plumbv1.CancelRequest{ThreadId: head[0].GetThreadId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := recvAll(s); err != nil {
		t.Fatal(err)
	}
	e.srv.Script("main", modeltest.Text("ok"))
	e.mustRun(runReq("", "now there is room"))
}

// Attach errors: an unknown thread, a thread that never ran, and a
// sequence the log of a resumed segment does not hold.
func TestAttachErrors(t *testing.T) {
	e := newEnv(t)
	_, err := recvAttach(e, "nope", 0)
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonThreadNotFound)

	th, err := e.c.CreateThread(e.ctx(), &plumbv1.CreateThreadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = recvAttach(e, th.GetThread().GetId(), 0)
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonRunNotFound)

	_, err = recvAttach(e, "", 0)
	wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidArgument)
}

func recvAttach(e *env, thread string, after uint64) ([]*plumbv1.Event, error) {
	s, err := e.c.Attach(e.ctx(), &plumbv1.AttachRequest{ThreadId: thread, AfterSequence: after})
	if err != nil {
		return nil, err
	}
	return recvAll(s)
}

// Shutdown refuses new runs with UNAVAILABLE and, once its context ends,
// cancels the runs still going.
func TestShutdownCancelsRemainingRuns(t *testing.T) {
	e := newEnv(t)
	// A "late" run that slips in before the shutdown begins answers from
	// the text turns.
	e.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"ms":10000}`)),
		modeltest.Text("late"), modeltest.Text("late"), modeltest.Text("late"), modeltest.Text("late"))
	s, err := e.c.Run(e.ctx(), runReq("", "sleep"))
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, s, "tool_call_started")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.svc.Shutdown(ctx) }()
	eventually(t, "runs refused", func() bool {
		_, err := e.run(runReq("", "late"))
		return err != nil && pbconv.Reason(err) == agentsvc.ReasonShuttingDown
	})
	_, err = e.run(runReq("", "late"))
	wantStatus(t, err, codes.Unavailable, agentsvc.ReasonShuttingDown)
	select {
	case err := <-done:
		t.Fatalf("shutdown returned %v while a run was active", err)
	default:
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("shutdown: %v", err)
	}
	evs, err := recvAll(s)
	if err != nil {
		t.Fatal(err)
	}
	if f := last(t, evs).GetRunFinished(); f.GetStatus() != plumbv1.RunStatus_RUN_STATUS_CANCELLED {
		t.Errorf("run ended with %v", kinds(evs, false))
	}
}
