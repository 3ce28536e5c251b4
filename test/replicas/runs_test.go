package replicas

import (
	"slices"
	"syscall"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// waitRun calls WaitRun on r until the run is no longer QUEUED or RUNNING
// (each call waits up to a minute) and returns its record.
func (f *fleet) waitRun(t *testing.T, r *replica, runID string) *plumbv1.RunRecord {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		resp, err := r.c.WaitRun(f.ctx, &plumbv1.WaitRunRequest{RunId: runID, Timeout: durationpb.New(time.Minute)})
		if err != nil {
			t.Fatalf("wait for run %s on replica %s: %v", runID, r.name, err)
		}
		if !resp.GetTimedOut() {
			return resp.GetRun()
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is still %v", runID, resp.GetRun().GetStatus())
		}
	}
}

// enqueue sends a Run with on_busy ENQUEUE on thread through r and
// returns the queued record its stream's only event carries.
func (f *fleet) enqueue(t *testing.T, r *replica, thread, scenario string) *plumbv1.RunRecord {
	t.Helper()
	rs, err := r.c.Run(f.ctx, &plumbv1.RunRequest{
		ThreadId: thread, Input: []*plumbv1.InputMessage{{Content: scenario}}, OnBusy: plumbv1.OnBusy_ON_BUSY_ENQUEUE,
	})
	if err != nil {
		t.Fatalf("enqueue %s on replica %s: %v", scenario, r.name, err)
	}
	evs, err := follow("enqueue "+scenario, 0, rs.Recv).end(t)
	if err != nil || len(evs) != 1 || evs[0].GetRunQueued() == nil {
		t.Fatalf("enqueue %s: the stream delivered %v and ended with %v; want one run_queued event", scenario, evs, err)
	}
	q := evs[0].GetRunQueued().GetRun()
	if q.GetStatus() != plumbv1.RunStatus_RUN_STATUS_QUEUED || q.GetThreadId() != thread || !slices.Equal(q.GetInput(), []string{scenario}) {
		t.Fatalf("enqueue %s: queued record %v", scenario, q)
	}
	return q
}

// TestDetachedRunWaitedElsewhere: a detached run started on replica a,
// whose client goes away at once, is a resource on replica b: GetRun
// finds it right after run_started, WaitRun
// with a short timeout returns it RUNNING (timed_out, not an error),
// GetRun and ListRuns show it, and once it can go on WaitRun returns its
// final record: input, COMPLETED, usage, times and the replica that ran
// it. Another tenant's token is not needed: a run id that does not exist
// is NOT_FOUND.
func TestDetachedRunWaitedElsewhere(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 30 * time.Second, graceA: 10 * time.Second})
	const sc = "detached"
	gate := f.policy.gate(sc, "a", 1)
	rs, err := f.a.c.Run(f.ctx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: sc}}, Detach: true})
	if err != nil {
		t.Fatal(err)
	}
	first, err := rs.Recv()
	if err != nil || first.GetEvent().GetRunStarted() == nil {
		t.Fatalf("first event %v, %v", first, err)
	}
	runID, thread := first.GetEvent().GetRunId(), first.GetEvent().GetThreadId()
	// At once, on the other replica: the record is committed before
	// run_started is sent.
	if got, err := f.b.c.GetRun(f.ctx, &plumbv1.GetRunRequest{RunId: runID}); err != nil || got.GetRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_RUNNING {
		t.Fatalf("GetRun on replica b right after run_started on a = %v, %v; want the run RUNNING", got, err)
	}
	gate.wait(t, "step 2's model call on replica a")

	resp, err := f.b.c.WaitRun(f.ctx, &plumbv1.WaitRunRequest{RunId: runID, Timeout: durationpb.New(time.Second)})
	if err != nil || !resp.GetTimedOut() || resp.GetRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_RUNNING {
		t.Fatalf("a short WaitRun on replica b = %v, %v; want the RUNNING record, timed out", resp, err)
	}
	got, err := f.b.c.GetRun(f.ctx, &plumbv1.GetRunRequest{RunId: runID, ThreadId: thread})
	if err != nil || got.GetRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_RUNNING {
		t.Fatalf("GetRun on replica b = %v, %v", got, err)
	}
	list, err := f.b.c.ListRuns(f.ctx, &plumbv1.ListRunsRequest{Status: plumbv1.RunStatus_RUN_STATUS_RUNNING})
	if err != nil || !slices.ContainsFunc(list.GetRuns(), func(r *plumbv1.RunRecord) bool { return r.GetRunId() == runID }) {
		t.Fatalf("ListRuns(RUNNING) on replica b = %v, %v; want run %s", list, err, runID)
	}
	if _, err := f.b.c.GetRun(f.ctx, &plumbv1.GetRunRequest{RunId: "01NOSUCHRUN"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetRun of a missing run: %v, want NOT_FOUND", err)
	}
	if _, err := f.b.c.GetRun(f.ctx, &plumbv1.GetRunRequest{RunId: runID, ThreadId: "01OTHERTHREAD"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetRun naming another thread: %v, want NOT_FOUND", err)
	}

	rs.CloseSend() // the client goes away; the run is detached
	gate.open()
	rec := f.waitRun(t, f.b, runID)
	if rec.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || rec.GetThreadId() != thread || !slices.Equal(rec.GetInput(), []string{sc}) ||
		rec.GetHolder() == "" || rec.GetUsage().GetTotalTokens() == 0 || rec.GetFinalText() != "done "+sc ||
		rec.GetCreatedAt() == nil || rec.GetStartedAt() == nil || rec.GetFinishedAt() == nil || rec.GetSteps() != steps+1 {
		t.Fatalf("the final record on replica b = %v", rec)
	}
	f.wantSteps(t, thread, sc, 1, 2, 3)
}

// TestEnqueueAcrossKilledReplica: while a run is busy on replica a, two
// runs are queued on its thread through replica b (on_busy ENQUEUE): each
// Run stream carries one run_queued event, and ListRuns shows the queue.
// Replica a is SIGKILLed mid-run; replica b takes the run over, completes
// it, then starts the queued runs in order, each once: each one's steps
// ran once, each started after the one before it ended.
func TestEnqueueAcrossKilledReplica(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 2 * time.Second, graceA: 10 * time.Second})
	const sc = "busy"
	hung := f.policy.hang(sc, "a", 1)
	ra := f.run(t, f.a, sc)
	hung.wait(t, "step 2's model call on replica a")
	thread := ra.thread(t)

	q1 := f.enqueue(t, f.b, thread, "queued-one")
	q2 := f.enqueue(t, f.a, thread, "queued-two")
	list, err := f.b.c.ListRuns(f.ctx, &plumbv1.ListRunsRequest{ThreadId: thread, Status: plumbv1.RunStatus_RUN_STATUS_QUEUED})
	if err != nil || len(list.GetRuns()) != 2 || list.GetRuns()[0].GetRunId() != q2.GetRunId() || list.GetRuns()[1].GetRunId() != q1.GetRunId() {
		t.Fatalf("the thread's queue = %v, %v; want %s then %s (newest first)", list, err, q2.GetRunId(), q1.GetRunId())
	}
	// A Run that rejects on a busy thread is ABORTED, queue or not.
	rs, err := f.b.c.Run(f.ctx, &plumbv1.RunRequest{ThreadId: thread, Input: []*plumbv1.InputMessage{{Content: "rejected"}}, OnBusy: plumbv1.OnBusy_ON_BUSY_REJECT})
	if err == nil {
		_, err = follow("rejected run", 0, rs.Recv).end(t)
	}
	if status.Code(err) != codes.Aborted {
		t.Fatalf("a rejecting Run on the busy thread: %v, want ABORTED", err)
	}

	if err := f.a.proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	f.a.proc.Wait(hangGuard)
	ra.end(t)

	r2 := f.waitRun(t, f.b, q2.GetRunId())
	first, err := f.b.c.ListRuns(f.ctx, &plumbv1.ListRunsRequest{ThreadId: thread})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(first.GetRuns()); n != 3 {
		t.Fatalf("the thread has %d runs; want 3: %v", n, first.GetRuns())
	}
	busy, r1 := first.GetRuns()[2], f.waitRun(t, f.b, q1.GetRunId())
	for _, r := range []*plumbv1.RunRecord{busy, r1, r2} {
		if r.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
			t.Errorf("run %s (%v) ended %v; want COMPLETED", r.GetRunId(), r.GetInput(), r.GetStatus())
		}
	}
	if !r1.GetStartedAt().AsTime().After(busy.GetFinishedAt().AsTime()) || !r2.GetStartedAt().AsTime().After(r1.GetFinishedAt().AsTime()) {
		t.Errorf("the runs overlapped or ran out of order: %v, %v, %v", busy, r1, r2)
	}
	f.wantSteps(t, thread, sc, 1, 2, 3)
	f.wantSteps(t, thread, "queued-one", 1, 2, 3)
	f.wantSteps(t, thread, "queued-two", 1, 2, 3)
}
