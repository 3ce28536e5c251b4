package replicas

import (
	"slices"
	"syscall"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

// sendBusy sends a Run with strategy onBusy on thread through r and
// returns the queued record its stream's only event carries.
func (f *fleet) sendBusy(t *testing.T, r *replica, thread, scenario string, onBusy plumbv1.OnBusy) *plumbv1.RunRecord {
	t.Helper()
	rs, err := r.c.Run(f.ctx, &plumbv1.RunRequest{
		ThreadId: thread, Input: []*plumbv1.InputMessage{{Content: scenario}}, OnBusy: onBusy,
	})
	if err != nil {
		t.Fatalf("run %s (%v) on replica %s: %v", scenario, onBusy, r.name, err)
	}
	evs, err := follow("run "+scenario, 0, rs.Recv).end(t)
	if err != nil || len(evs) != 1 || evs[0].GetRunQueued() == nil {
		t.Fatalf("run %s (%v): the stream delivered %v and ended with %v; want one run_queued event", scenario, onBusy, evs, err)
	}
	return evs[0].GetRunQueued().GetRun()
}

// wantNoStep fails t if step k of scenario ran on the thread.
func (f *fleet) wantNoStep(t *testing.T, thread, scenario string, k int) {
	t.Helper()
	if lines := f.stepLog(t, thread); slices.Contains(lines, stepLine(scenario, k)) {
		t.Errorf("%s ran; want it never run (workspace log %q)", stepLine(scenario, k), lines)
	}
}

// wantEnded fails t unless rec ended with status and error code.
func wantEnded(t *testing.T, rec *plumbv1.RunRecord, st plumbv1.RunStatus, code string) {
	t.Helper()
	if rec.GetStatus() != st || rec.GetError().GetCode() != code {
		t.Errorf("run %s (%v) ended %v with error %v; want %v with code %q", rec.GetRunId(), rec.GetInput(), rec.GetStatus(), rec.GetError(), st, code)
	}
}

// TestInterruptSentToOtherReplica: while replica a runs a thread, a Run
// with on_busy INTERRUPT is sent to replica b. It is queued there, and
// the run on a, asked through the thread's lease, stops at its next step
// boundary: the step in flight (step 2) completes and is kept, step 3
// never runs, and the run ends CANCELLED with SUPERSEDED. The new run
// then runs on the thread.
func TestInterruptSentToOtherReplica(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 30 * time.Second, graceA: 10 * time.Second})
	const sc = "interrupted"
	gate := f.policy.gate(sc, "a", 1)
	ra := f.run(t, f.a, sc)
	gate.wait(t, "step 2's model call on replica a")
	thread := ra.thread(t)

	q := f.sendBusy(t, f.b, thread, "newer", plumbv1.OnBusy_ON_BUSY_INTERRUPT)
	logged(t, f.a, "run asked by a newer run on another replica to stop at its next checkpoint")
	gate.open()
	ra.finished(t, plumbv1.RunStatus_RUN_STATUS_CANCELLED)

	newer := f.waitRun(t, f.b, q.GetRunId())
	wantEnded(t, newer, plumbv1.RunStatus_RUN_STATUS_COMPLETED, "")
	list, err := f.b.c.ListRuns(f.ctx, &plumbv1.ListRunsRequest{ThreadId: thread})
	if err != nil || len(list.GetRuns()) != 2 {
		t.Fatalf("the thread's runs = %v, %v; want 2", list, err)
	}
	first := list.GetRuns()[1]
	wantEnded(t, first, plumbv1.RunStatus_RUN_STATUS_CANCELLED, "SUPERSEDED")
	if !newer.GetStartedAt().AsTime().After(first.GetFinishedAt().AsTime()) {
		t.Errorf("the newer run started before the interrupted one ended: %v, %v", first, newer)
	}
	f.wantSteps(t, thread, sc, 1, 2)
	f.wantNoStep(t, thread, sc, 3)
	f.wantSteps(t, thread, "newer", 1, 2, 3)
}

// TestInterruptHonouredByTakeover: a Run with on_busy INTERRUPT is sent
// to replica b while the run on replica a waits for its model; a is
// SIGKILLed. Replica b takes the run over and, as its lease carries the
// interrupt request, ends it at once CANCELLED with SUPERSEDED instead
// of continuing it; then the queued run runs.
func TestInterruptHonouredByTakeover(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 2 * time.Second, graceA: 10 * time.Second})
	const sc = "dead-interrupted"
	hung := f.policy.hang(sc, "a", 1)
	ra := f.run(t, f.a, sc)
	hung.wait(t, "step 2's model call on replica a")
	thread := ra.thread(t)

	q := f.sendBusy(t, f.b, thread, "after-takeover", plumbv1.OnBusy_ON_BUSY_INTERRUPT)
	if err := f.a.proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	f.a.proc.Wait(hangGuard)
	ra.end(t)

	newer := f.waitRun(t, f.b, q.GetRunId())
	wantEnded(t, newer, plumbv1.RunStatus_RUN_STATUS_COMPLETED, "")
	list, err := f.b.c.ListRuns(f.ctx, &plumbv1.ListRunsRequest{ThreadId: thread})
	if err != nil || len(list.GetRuns()) != 2 {
		t.Fatalf("the thread's runs = %v, %v; want 2", list, err)
	}
	wantEnded(t, list.GetRuns()[1], plumbv1.RunStatus_RUN_STATUS_CANCELLED, "SUPERSEDED")
	f.wantSteps(t, thread, sc, 1)
	f.wantNoStep(t, thread, sc, 2)
	f.wantSteps(t, thread, "after-takeover", 1, 2, 3)
}

// messages returns the contents of the thread's stored messages (and
// the tool call ids of their calls and results), read through r.
func (f *fleet) messages(t *testing.T, r *replica, thread string) []string {
	t.Helper()
	var out []string
	req := &plumbv1.ListMessagesRequest{ThreadId: thread, PageSize: 500}
	for {
		page, err := r.c.ListMessages(f.ctx, req)
		if err != nil {
			t.Fatalf("list the messages of %s on replica %s: %v", thread, r.name, err)
		}
		for _, m := range page.GetMessages() {
			out = append(out, m.GetContent())
			for _, c := range m.GetToolCalls() {
				out = append(out, "call "+c.GetId())
			}
		}
		if page.GetNextPageToken() == "" {
			return out
		}
		req.PageToken = page.GetNextPageToken()
	}
}

// TestRollbackSentToOtherReplica: while replica a runs a thread, a Run
// with on_busy ROLLBACK is sent to replica b. The run on a stops at its
// next step boundary and is discarded: it ends CANCELLED with
// ROLLED_BACK, the thread's messages hold none of its input or steps,
// and the new run runs on the thread as it was before. The commands the
// discarded steps ran in the sandbox are not undone (docs/runs.md).
func TestRollbackSentToOtherReplica(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 30 * time.Second, graceA: 10 * time.Second})
	const sc = "rolled-back"
	gate := f.policy.gate(sc, "a", 1)
	ra := f.run(t, f.a, sc)
	gate.wait(t, "step 2's model call on replica a")
	thread := ra.thread(t)

	q := f.sendBusy(t, f.b, thread, "instead", plumbv1.OnBusy_ON_BUSY_ROLLBACK)
	logged(t, f.a, "run asked by a newer run on another replica to stop at its next checkpoint")
	gate.open()
	ra.finished(t, plumbv1.RunStatus_RUN_STATUS_CANCELLED)

	newer := f.waitRun(t, f.b, q.GetRunId())
	wantEnded(t, newer, plumbv1.RunStatus_RUN_STATUS_COMPLETED, "")
	list, err := f.b.c.ListRuns(f.ctx, &plumbv1.ListRunsRequest{ThreadId: thread})
	if err != nil || len(list.GetRuns()) != 2 {
		t.Fatalf("the thread's runs = %v, %v; want 2", list, err)
	}
	wantEnded(t, list.GetRuns()[1], plumbv1.RunStatus_RUN_STATUS_CANCELLED, "ROLLED_BACK")
	msgs := f.messages(t, f.a, thread)
	// The new run's: its input, three steps (a call and its result
	// each) and its answer; nothing of the rolled-back run.
	if len(msgs) == 0 || msgs[0] != "instead" || msgs[len(msgs)-1] != "done instead" || slices.Contains(msgs, sc) ||
		countLines(msgs, "call call-1") != 1 || countLines(msgs, "call call-2") != 1 {
		t.Errorf("the thread's messages = %q; want the new run's only", msgs)
	}
	f.wantSteps(t, thread, sc, 1, 2) // the box is not rolled back
	f.wantNoStep(t, thread, sc, 3)
	f.wantSteps(t, thread, "instead", 1, 2, 3)
}

// TestCancelWithQueueOnOtherReplica: while replica a runs a thread, two
// runs are queued on it; Cancel sent to replica b cancels the running run
// on a and both queued runs, which end CANCELLED without starting.
func TestCancelWithQueueOnOtherReplica(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 30 * time.Second, graceA: 10 * time.Second})
	const sc = "cancelled-with-queue"
	hung := f.policy.hang(sc, "a", 1)
	ra := f.run(t, f.a, sc)
	hung.wait(t, "step 2's model call on replica a")
	thread := ra.thread(t)
	q1 := f.sendBusy(t, f.b, thread, "never-one", plumbv1.OnBusy_ON_BUSY_ENQUEUE)
	q2 := f.sendBusy(t, f.a, thread, "never-two", plumbv1.OnBusy_ON_BUSY_ENQUEUE)

	c, err := f.b.c.Cancel(f.ctx, &plumbv1.CancelRequest{ThreadId: thread})
	if err != nil || !c.GetWasRunning() || !slices.Equal(c.GetCancelledQueuedRunIds(), []string{q1.GetRunId(), q2.GetRunId()}) {
		t.Fatalf("Cancel on replica b = %v, %v; want the run and both queued runs cancelled", c, err)
	}
	ra.finished(t, plumbv1.RunStatus_RUN_STATUS_CANCELLED)
	for _, q := range []*plumbv1.RunRecord{q1, q2} {
		r := f.waitRun(t, f.a, q.GetRunId())
		wantEnded(t, r, plumbv1.RunStatus_RUN_STATUS_CANCELLED, "CANCELLED")
		if r.GetStartedAt() != nil {
			t.Errorf("queued run %s started: %v", q.GetRunId(), r)
		}
	}
	list, err := f.a.c.ListRuns(f.ctx, &plumbv1.ListRunsRequest{ThreadId: thread, Status: plumbv1.RunStatus_RUN_STATUS_QUEUED})
	if err != nil || len(list.GetRuns()) != 0 {
		t.Fatalf("the thread's queue after Cancel = %v, %v; want empty", list, err)
	}
	f.wantSteps(t, thread, sc, 1)
	f.wantNoStep(t, thread, "never-one", 1)
	f.wantNoStep(t, thread, "never-two", 1)
}

// TestSteerSentToOtherReplica: while replica a runs a thread, a Run with
// on_busy STEER is sent to replica b. b stores the steer and its stream
// follows the run on a (through the shared event log, from the run's
// first event). a delivers the steer before its next model call: the
// model sees it once (the fleet's model then works on the steer's
// scenario instead: its steps run once each, the first scenario's last
// step never runs), b's stream carries one steered event, and the run
// completes with the steer's answer.
func TestSteerSentToOtherReplica(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 30 * time.Second, graceA: 10 * time.Second})
	const sc, steer = "steered", "steer-instead"
	gate := f.policy.gate(sc, "a", 1)
	ra := f.run(t, f.a, sc)
	gate.wait(t, "step 2's model call on replica a")
	thread := ra.thread(t)

	rs, err := f.b.c.Run(f.ctx, &plumbv1.RunRequest{ThreadId: thread, Input: []*plumbv1.InputMessage{{Content: steer}}, OnBusy: plumbv1.OnBusy_ON_BUSY_STEER})
	if err != nil {
		t.Fatal(err)
	}
	rb := follow("steer on b", 0, rs.Recv)
	logged(t, f.b, "steer stored for the thread's running run")
	gate.open()
	ra.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
	evs := rb.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
	var steered int
	for _, e := range evs {
		if st := e.GetSteered(); st != nil {
			steered++
			if !slices.Equal(st.GetInput(), []string{steer}) {
				t.Errorf("steered event %v", st)
			}
		}
	}
	if steered != 1 || evs[0].GetRunId() != ra.events[0].GetRunId() {
		t.Errorf("b's stream carried %d steered events for run %s; want one, of a's run %s", steered, evs[0].GetRunId(), ra.events[0].GetRunId())
	}
	checkSequences(t, ra, rb)
	if n := countLines(f.messages(t, f.b, thread), steer); n != 1 {
		t.Errorf("the steer is %d times in the thread's messages; want once", n)
	}
	list, err := f.b.c.ListRuns(f.ctx, &plumbv1.ListRunsRequest{ThreadId: thread})
	if err != nil || len(list.GetRuns()) != 1 || list.GetRuns()[0].GetFinalText() != "done "+steer {
		t.Fatalf("the thread's runs = %v, %v; want one, answering the steer", list, err)
	}
	f.wantSteps(t, thread, sc, 1, 2)
	f.wantNoStep(t, thread, sc, 3)
	f.wantSteps(t, thread, steer, 1, 2, 3)
}

// TestSteerDeliveredByTakeover: a steer is stored (through replica b)
// while the run on replica a waits for its model; a is SIGKILLed before
// it could deliver it. Replica b takes the run over and delivers the
// steer once, before the continued run's first model call.
func TestSteerDeliveredByTakeover(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 2 * time.Second, graceA: 10 * time.Second})
	const sc, steer = "steered-dead", "steer-after-takeover"
	hung := f.policy.hang(sc, "a", 1)
	ra := f.run(t, f.a, sc)
	hung.wait(t, "step 2's model call on replica a")
	thread := ra.thread(t)

	rs, err := f.b.c.Run(f.ctx, &plumbv1.RunRequest{ThreadId: thread, Input: []*plumbv1.InputMessage{{Content: steer}}, OnBusy: plumbv1.OnBusy_ON_BUSY_STEER})
	if err != nil {
		t.Fatal(err)
	}
	rb := follow("steer on b", 0, rs.Recv)
	logged(t, f.b, "steer stored for the thread's running run")
	if err := f.a.proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	f.a.proc.Wait(hangGuard)
	ra.end(t)
	rb.end(t) // the shared log's follow may be cut when the run moves; the record tells the end
	runID := ra.events[0].GetRunId()
	rec := f.waitRun(t, f.b, runID)
	if rec.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || rec.GetFinalText() != "done "+steer {
		t.Fatalf("the run after the takeover = %v; want COMPLETED answering the steer", rec)
	}
	if n := countLines(f.messages(t, f.b, thread), steer); n != 1 {
		t.Errorf("the steer is %d times in the thread's messages; want once", n)
	}
	f.wantSteps(t, thread, sc, 1)
	f.wantNoStep(t, thread, sc, 2)
	f.wantSteps(t, thread, steer, 1, 2, 3)
}
