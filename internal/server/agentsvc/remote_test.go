package agentsvc_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/store/postgres"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
)

// pgFleet is a PostgreSQL database that replicas share.
type pgFleet struct {
	t   *testing.T
	dsn string
}

func newPGFleet(t *testing.T) *pgFleet { return &pgFleet{t: t, dsn: pgtest.New(t)} }

// replica starts a replica named name with a connection pool of its own,
// as an agentd process has, short leases and a fast event interval; view
// is its store, which crashes on demand.
func (f *pgFleet) replica(name string, opts ...option) (e *env, view *crashable) {
	f.t.Helper()
	st, err := postgres.Open(context.Background(), f.dsn, postgres.Options{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { st.Close() })
	fast := withService(func(c *agentsvc.Config) {
		c.LeaseTTL, c.EventInterval = 2*time.Second, 20*time.Millisecond
	})
	view = &crashable{sharedStore: st}
	return newEnv(f.t, append([]option{withShared(view, name), fast}, opts...)...), view
}

// pgReplicas starts two replicas, A and B, on one real PostgreSQL
// database. optsA adjust replica A; viewA is its store.
func pgReplicas(t *testing.T, optsA ...option) (a, b *env, viewA *crashable) {
	t.Helper()
	f := newPGFleet(t)
	a, viewA = f.replica("replica-a", optsA...)
	b, _ = f.replica("replica-b")
	return a, b, viewA
}

// hang is a model turn that never answers (until its request ends).
var hang = modeltest.Turn{FirstByteDelay: time.Hour, Text: []string{"never"}}

// startOnA starts a run on a new thread on replica A and returns its
// stream and run_started, once the run's model call is under way (its
// first checkpoint is committed).
func startOnA(t *testing.T, a *env, detach bool) (plumbv1.AgentService_RunClient, *plumbv1.Event) {
	t.Helper()
	req := runReq("", "go")
	req.Detach = detach
	s, err := a.c.Run(a.ctx(), req)
	if err != nil {
		t.Fatal(err)
	}
	started := recvUntil(t, s, "run_started")[0]
	waitFor(t, "the model call on replica A", func() bool { return len(a.srv.Requests("main")) == 1 })
	return s, started
}

// TestCancelOnNonOwnerReplica: Cancel sent to the replica that does not
// run the thread reaches the run on the other one (through the shared
// store): the owner's stream ends run_finished{CANCELLED}, and Cancel
// answers once the run has ended, with its id and was_running. Then
// nothing runs anywhere, and Cancel says so.
func TestCancelOnNonOwnerReplica(t *testing.T) {
	a, b, _ := pgReplicas(t)
	a.srv.Script("main", hang)
	s, started := startOnA(t, a, false)
	thread := started.GetThreadId()

	res, err := b.c.Cancel(b.ctx(), &plumbv1.CancelRequest{ThreadId: thread})
	if err != nil {
		t.Fatal(err)
	}
	if !res.GetWasRunning() || res.GetRunId() != started.GetRunId() {
		t.Fatalf("Cancel on replica B answered %v; want was_running and run %s", res, started.GetRunId())
	}
	evs, err := recvAll(s)
	if err != nil {
		t.Fatalf("replica A's stream: %v (kinds %v)", err, kinds(evs, true))
	}
	if st := last(t, evs).GetRunFinished().GetStatus(); st != plumbv1.RunStatus_RUN_STATUS_CANCELLED {
		t.Fatalf("replica A's stream ended with %v, want run_finished CANCELLED", kinds(evs, true))
	}
	td, err := b.store.LoadThread(context.Background(), thread)
	if err != nil || td.LastRun.Status != agent.StatusCancelled {
		t.Fatalf("stored run: %+v, %v; want CANCELLED", td.LastRun, err)
	}
	if res, err := b.c.Cancel(b.ctx(), &plumbv1.CancelRequest{ThreadId: thread}); err != nil || res.GetWasRunning() {
		t.Fatalf("second Cancel: %v, %v; want was_running false", res, err)
	}
}

// TestDeleteThreadOnNonOwnerReplica: DeleteThread without force on the
// replica that does not run the thread is FAILED_PRECONDITION
// (THREAD_RUNNING, as on one replica) and touches nothing: GetThread there
// says RUNNING, and the run goes on to complete on its replica.
func TestDeleteThreadOnNonOwnerReplica(t *testing.T) {
	a, b, _ := pgReplicas(t)
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	a.srv.Script("main", modeltest.Turn{Dynamic: func(modeltest.Request) modeltest.Turn {
		<-gate
		return modeltest.Text("done")
	}})
	s, started := startOnA(t, a, false)
	thread := started.GetThreadId()

	_, err := b.c.DeleteThread(b.ctx(), &plumbv1.DeleteThreadRequest{ThreadId: thread})
	wantStatus(t, err, codes.FailedPrecondition, agentsvc.ReasonThreadRunning)
	if ids := b.deletedIDs(); len(ids) != 0 {
		t.Fatalf("replica B cleaned up %v", ids)
	}
	if st := b.thread(thread, plumbv1.ThreadView_THREAD_VIEW_BASIC).GetStatus(); st != plumbv1.ThreadStatus_THREAD_STATUS_RUNNING {
		t.Fatalf("GetThread on replica B: %v, want RUNNING", st)
	}
	release()
	evs, err := recvAll(s)
	if err != nil {
		t.Fatalf("replica A's stream: %v (kinds %v)", err, kinds(evs, true))
	}
	if f := last(t, evs).GetRunFinished(); f.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || f.GetFinalText() != "done" {
		t.Fatalf("replica A's run ended with %v, want COMPLETED", kinds(evs, true))
	}
	if st := b.thread(thread, plumbv1.ThreadView_THREAD_VIEW_BASIC).GetStatus(); st != plumbv1.ThreadStatus_THREAD_STATUS_IDLE {
		t.Fatalf("GetThread on replica B after the run: %v, want IDLE", st)
	}
}

// TestForceDeleteThreadOnNonOwnerReplica: DeleteThread with force on the
// replica that does not run the thread cancels the run on its replica
// first (it ends CANCELLED, not with a storage error), then deletes the
// thread and its sandbox.
func TestForceDeleteThreadOnNonOwnerReplica(t *testing.T) {
	a, b, _ := pgReplicas(t)
	a.srv.Script("main", hang)
	s, started := startOnA(t, a, false)
	thread := started.GetThreadId()

	if _, err := b.c.DeleteThread(b.ctx(), &plumbv1.DeleteThreadRequest{ThreadId: thread, Force: true}); err != nil {
		t.Fatal(err)
	}
	evs, err := recvAll(s)
	if err != nil {
		t.Fatalf("replica A's stream: %v (kinds %v)", err, kinds(evs, true))
	}
	if st := last(t, evs).GetRunFinished().GetStatus(); st != plumbv1.RunStatus_RUN_STATUS_CANCELLED {
		t.Fatalf("replica A's stream ended with %v (%v), want run_finished CANCELLED", kinds(evs, true), last(t, evs))
	}
	if ids := b.deletedIDs(); len(ids) != 1 || ids[0] != thread {
		t.Fatalf("replica B cleaned up %v, want [%s]", ids, thread)
	}
	_, err = a.c.GetThread(a.ctx(), &plumbv1.GetThreadRequest{ThreadId: thread})
	wantStatus(t, err, codes.NotFound, "")
}

// TestThreadStatusOnNonOwnerReplica: while replica A runs a resumed run
// (its approved tool call executing, the store still holding the
// interrupt until the step commits), GetThread and ListThreads on replica
// B say RUNNING, as on A. Cancel on B then ends it there.
func TestThreadStatusOnNonOwnerReplica(t *testing.T) {
	a, b, _ := pgReplicas(t, gate(map[string]profile.InterruptRule{"sleep": {}}))
	a.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"ms":3600000}`)))
	evs := a.mustRun(runReq("", "go"))
	in := last(t, evs).GetInterrupted()
	if in == nil {
		t.Fatalf("want interrupted, got %v", kinds(evs, true))
	}
	thread := evs[0].GetThreadId()
	s, err := a.c.Resume(a.ctx(), &plumbv1.ResumeRequest{ThreadId: thread, InterruptId: in.GetInterruptId(), Decisions: []*plumbv1.Decision{
		{ToolCallId: "c1", Type: plumbv1.DecisionType_DECISION_TYPE_APPROVE},
	}})
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, s, "run_started")

	for name, e := range map[string]*env{"A": a, "B": b} {
		if st := e.thread(thread, plumbv1.ThreadView_THREAD_VIEW_BASIC).GetStatus(); st != plumbv1.ThreadStatus_THREAD_STATUS_RUNNING {
			t.Errorf("GetThread on replica %s: %v, want RUNNING", name, st)
		}
		list, err := e.c.ListThreads(e.ctx(), &plumbv1.ListThreadsRequest{})
		if err != nil || len(list.GetThreads()) != 1 || list.GetThreads()[0].GetStatus() != plumbv1.ThreadStatus_THREAD_STATUS_RUNNING {
			t.Errorf("ListThreads on replica %s: %v, %v; want the thread RUNNING", name, list, err)
		}
	}
	if res, err := b.c.Cancel(b.ctx(), &plumbv1.CancelRequest{ThreadId: thread}); err != nil || !res.GetWasRunning() {
		t.Fatalf("Cancel on replica B: %v, %v", res, err)
	}
	evs, err = recvAll(s)
	if err != nil || last(t, evs).GetRunFinished().GetStatus() != plumbv1.RunStatus_RUN_STATUS_CANCELLED {
		t.Fatalf("the resumed run ended with %v, %v; want run_finished CANCELLED", kinds(evs, true), err)
	}
	if st := b.thread(thread, plumbv1.ThreadView_THREAD_VIEW_BASIC).GetStatus(); st == plumbv1.ThreadStatus_THREAD_STATUS_RUNNING {
		t.Fatalf("GetThread on replica B after the cancel: %v", st)
	}
}

// TestCancelOfOrphanedRunAtTakeover: replica A dies mid-run; Cancel on
// replica B records the request, and B's takeover ends the run CANCELLED
// instead of continuing it (its model is never called). Cancel answers
// once it has ended; Attach on B shows the run to run_finished
// CANCELLED.
func TestCancelOfOrphanedRunAtTakeover(t *testing.T) {
	a, b, viewA := pgReplicas(t, withService(func(c *agentsvc.Config) { c.TakeoverInterval = -1 }))
	a.srv.Script("main", hang)
	b.srv.Script("main", modeltest.Text("continued"))
	_, started := startOnA(t, a, true)
	thread := started.GetThreadId()
	viewA.crashed.Store(true)

	res, err := b.c.Cancel(b.ctx(), &plumbv1.CancelRequest{ThreadId: thread})
	if err != nil {
		t.Fatal(err)
	}
	if !res.GetWasRunning() || res.GetRunId() != started.GetRunId() {
		t.Fatalf("Cancel on replica B answered %v; want was_running and run %s", res, started.GetRunId())
	}
	td, err := b.store.LoadThread(context.Background(), thread)
	if err != nil || td.LastRun.Status != agent.StatusCancelled {
		t.Fatalf("stored run: %+v, %v; want CANCELLED", td.LastRun, err)
	}
	if n := len(b.srv.Requests("main")); n != 0 {
		t.Fatalf("replica B called the model %d times: the cancelled run was continued", n)
	}
	evs := attachAll(t, b, thread, "B")
	if st := last(t, evs).GetRunFinished().GetStatus(); st != plumbv1.RunStatus_RUN_STATUS_CANCELLED {
		t.Fatalf("attach on replica B saw %v, want the run to end run_finished CANCELLED", kinds(evs, true))
	}
}

// TestFailedDeleteLeavesOrphanedRunToTakeover: replica A dies mid-run;
// DeleteThread on replica B takes the thread's expired lease for the
// deletion, and its cleanup fails. The thread is kept, and so is its
// run's chance: the deletion's lease is left to expire rather than
// released, so a replica's takeover still continues the run to its end.
func TestFailedDeleteLeavesOrphanedRunToTakeover(t *testing.T) {
	f := newPGFleet(t)
	noTakeover := withService(func(c *agentsvc.Config) { c.TakeoverInterval = -1 })
	a, viewA := f.replica("replica-a", noTakeover)
	b, _ := f.replica("replica-b", noTakeover, withService(func(c *agentsvc.Config) {
		c.OnDeleteThread = func(context.Context, *agent.ThreadData) error { return errors.New("sandbox worker unreachable") }
	}))
	a.srv.Script("main", hang)
	_, started := startOnA(t, a, true)
	thread := started.GetThreadId()
	viewA.crashed.Store(true)
	waitFor(t, "replica A's lease to expire", func() bool {
		ls, err := viewA.sharedStore.ThreadLeases(context.Background(), []string{thread})
		return err == nil && len(ls) == 1 && !ls[0].Live(time.Now())
	})

	if _, err := b.c.DeleteThread(b.ctx(), &plumbv1.DeleteThreadRequest{ThreadId: thread}); err == nil {
		t.Fatal("DeleteThread succeeded although its cleanup failed")
	}
	c, _ := f.replica("replica-c")
	c.srv.Script("main", modeltest.Text("continued on c"))
	evs := attachAll(t, c, thread, "C")
	if f := last(t, evs).GetRunFinished(); f.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || f.GetFinalText() != "continued on c" {
		t.Fatalf("attach on replica C saw %v; want the run taken over to COMPLETED", kinds(evs, true))
	}
}

// TestTakeoverWithoutRunSlotRetries: replica A dies mid-run while replica
// B's one run slot is taken. B's takeover cannot start the run then; it
// must leave the thread's lease to expire again (not release it, which
// would leave the run RUNNING with nobody to take it over, and have the
// next replica that starts mark it FAILED), so that once the slot is free
// a takeover continues the run to its end.
func TestTakeoverWithoutRunSlotRetries(t *testing.T) {
	f := newPGFleet(t)
	a, viewA := f.replica("replica-a", withService(func(c *agentsvc.Config) { c.TakeoverInterval = -1 }))
	b, _ := f.replica("replica-b", withService(func(c *agentsvc.Config) { c.MaxConcurrentRuns = 1 }))
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	b.srv.Script("main",
		modeltest.Turn{Dynamic: func(modeltest.Request) modeltest.Turn {
			<-gate
			return modeltest.Text("slot holder done")
		}},
		modeltest.Text("continued on b"),
	)
	holder, err := b.c.Run(b.ctx(), runReq("", "hold the slot"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "replica B's run to hold its slot", func() bool { return len(b.srv.Requests("main")) == 1 })

	a.srv.Script("main", hang)
	_, started := startOnA(t, a, true)
	thread := started.GetThreadId()
	viewA.crashed.Store(true)
	waitFor(t, "replica B's takeover attempt", func() bool {
		ls, err := viewA.sharedStore.ThreadLeases(context.Background(), []string{thread})
		return err == nil && len(ls) == 1 && ls[0].Holder == "replica-b"
	})
	release()
	if evs, err := recvAll(holder); err != nil || last(t, evs).GetRunFinished().GetFinalText() != "slot holder done" {
		t.Fatalf("replica B's slot holder: %v, %v", kinds(evs, true), err)
	}
	evs := attachAll(t, b, thread, "B")
	if f := last(t, evs).GetRunFinished(); f.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || f.GetFinalText() != "continued on b" {
		t.Fatalf("attach on replica B saw %v; want the run taken over to COMPLETED", kinds(evs, true))
	}
}

// attachAll attaches to thread on replica e (named name in failures) and
// returns the events up to the stream's end.
func attachAll(t *testing.T, e *env, thread, name string) []*plumbv1.Event {
	t.Helper()
	att, err := e.c.Attach(e.ctx(), &plumbv1.AttachRequest{ThreadId: thread})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := recvAll(att)
	if err != nil {
		t.Fatalf("attach on replica %s: %v (kinds %v)", name, err, kinds(evs, true))
	}
	return evs
}

// TestRunFoundAtOnceOnOtherReplica: a client that got a detached run's id
// from run_started on replica A finds the run at once on replica B —
// GetRun answers RUNNING with its input, without any wait or retry — and
// WaitRun there follows it to its end: the run's record is committed
// before run_started is sent (pkg/agent's Runner.Run), not polled for.
func TestRunFoundAtOnceOnOtherReplica(t *testing.T) {
	dsn := pgtest.New(t)
	replica := func(name string) *env {
		st, err := postgres.Open(context.Background(), dsn, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return newEnv(t, withShared(st, name)) // the store itself: its run records too, as agentd has them
	}
	a, b := replica("replica-a"), replica("replica-b")
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	const runs = 3
	var turns []modeltest.Turn
	for range runs {
		turns = append(turns, modeltest.Turn{Dynamic: func(modeltest.Request) modeltest.Turn {
			<-gate
			return modeltest.Text("done")
		}})
	}
	a.srv.Script("main", turns...)
	var ids []string
	for i := range runs {
		input := fmt.Sprintf("go %d", i)
		req := runReq("", input)
		req.Detach = true
		ctx, cancel := context.WithCancel(a.ctx())
		s, err := a.c.Run(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		runID := recvUntil(t, s, "run_started")[0].GetRunId()
		cancel() // the client leaves; the detached run goes on
		got, err := b.c.GetRun(b.ctx(), &plumbv1.GetRunRequest{RunId: runID})
		if r := got.GetRun(); err != nil || r.GetStatus() != plumbv1.RunStatus_RUN_STATUS_RUNNING || !slices.Equal(r.GetInput(), []string{input}) {
			t.Fatalf("run %d: GetRun on replica B right after run_started on A = %v, %v; want it RUNNING with its input", i, got, err)
		}
		ids = append(ids, runID)
	}
	release()
	for _, id := range ids {
		w, err := b.c.WaitRun(b.ctx(), &plumbv1.WaitRunRequest{RunId: id, Timeout: durationpb.New(25 * time.Second)})
		if err != nil || w.GetTimedOut() || w.GetRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || w.GetRun().GetFinalText() != "done" {
			t.Fatalf("WaitRun %s on replica B = %v, %v; want COMPLETED", id, w, err)
		}
	}
}
