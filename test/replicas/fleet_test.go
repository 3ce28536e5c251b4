package replicas

import (
	"syscall"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRollingUpdate: SIGTERM stops the replica that runs a thread while a
// model call is in flight, as a rolling update does. Its client's stream
// ends UNAVAILABLE (REPLICA_STOPPING) naming the last sequence it
// delivered; the lease is handed off, so the other replica continues the
// run at once (the lease TTL is far longer than the test waits: its
// expiry cannot explain the takeover); a re-Attach there after that
// sequence delivers the rest once, through run_finished{COMPLETED}; and
// every step ran once.
func TestRollingUpdate(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 10 * time.Minute, graceA: 30 * time.Second})
	const sc = "rolling"
	gate := f.policy.gate(sc, "a", 1)
	// Replica a may finish the step in flight, never the run.
	f.policy.hang(sc, "a", 3)

	ra := f.run(t, f.a, sc)
	gate.wait(t, "step 2's model call on replica a")
	thread := ra.thread(t)
	if err := f.a.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	logged(t, f.a, "shutting down")
	gate.open() // the step in flight goes on while the replica stops

	after := ra.stoppedWith(t, codes.Unavailable, "REPLICA_STOPPING")
	rb := f.attach(t, f.b, thread, after)
	rb.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
	checkSequences(t, ra, rb)
	f.wantSteps(t, thread, sc, 1, 2, 3)
}

// TestKilledReplica: SIGKILL ends the replica that runs a thread while a
// model call is in flight (step 1 committed). The other replica takes the
// run over once the lease expires: an Attach opened there before the kill
// and a re-Attach after the last sequence the killed replica delivered
// both follow it to run_finished{COMPLETED}, and every step ran once (the
// call in flight was a model call, so no step was in flight).
func TestKilledReplica(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 2 * time.Second, graceA: 10 * time.Second})
	const sc = "killed"
	hung := f.policy.hang(sc, "a", 1)

	ra := f.run(t, f.a, sc)
	hung.wait(t, "step 2's model call on replica a")
	thread := ra.thread(t)
	// Replica b follows the run from the shared event log; once it has
	// what replica a's client has, nothing delivered is unlogged.
	rb0 := f.attach(t, f.b, thread, 0)
	waitFor(t, "replica b's attach to catch up with replica a's client", func() bool { return rb0.last() >= ra.last() })
	if err := f.a.proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	f.a.proc.Wait(hangGuard)
	ra.end(t) // cut: the connection is gone

	rb := f.attach(t, f.b, thread, ra.last())
	rb.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
	rb0.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
	checkSequences(t, ra, rb0, rb)
	f.wantSteps(t, thread, sc, 1, 2, 3)
}

// TestPausedReplica: the replica that runs a thread is paused (SIGSTOP)
// past its lease while a model call is in flight; the other replica takes
// the run over and completes it. When the paused replica continues
// (SIGCONT) and its model call answers, it is fenced out: its client's
// stream ends ABORTED (LEASE_LOST) naming the last sequence it delivered,
// nothing it delivered contradicts the run's event log, and a re-Attach
// after that sequence delivers the rest of the run once. Steps 1 and 3 ran
// once (step 2 is the fenced replica's uncommitted step, which it may
// have started before it noticed).
func TestPausedReplica(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 2 * time.Second, graceA: 10 * time.Second})
	const sc = "paused"
	gate := f.policy.gate(sc, "a", 1)

	ra := f.run(t, f.a, sc)
	gate.wait(t, "step 2's model call on replica a")
	thread := ra.thread(t)
	if err := f.a.proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.a.proc.Signal(syscall.SIGCONT) }) // so that it can stop
	rb0 := f.attach(t, f.b, thread, 0)
	rb0.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED) // replica b took the run over and completed it

	gate.open() // the paused replica's model call has its answer
	if err := f.a.proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	ra.end(t)
	checkSequences(t, ra, rb0)
	after := ra.stoppedWith(t, codes.Aborted, "LEASE_LOST")
	rb := f.attach(t, f.b, thread, after)
	rb.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
	checkSequences(t, ra, rb)
	f.wantSteps(t, thread, sc, 1, 3)
	if lines := f.stepLog(t, thread); countLines(lines, stepLine(sc, 2)) == 0 {
		t.Errorf("%s never ran (workspace log %q)", stepLine(sc, 2), lines)
	}
}

// TestOtherReplica sends the controls of a thread to the replica that
// does not run it, as a load balancer does.
func TestOtherReplica(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 30 * time.Second, graceA: 10 * time.Second})

	// Cancel reaches the run where it runs: its client sees
	// run_finished{CANCELLED}, and Cancel answers was_running once the
	// run has ended.
	t.Run("Cancel", func(t *testing.T) {
		const sc = "cancel"
		gate := f.policy.gate(sc, "a", 1)
		ra := f.run(t, f.a, sc)
		gate.wait(t, "step 2's model call on replica a")
		thread := ra.thread(t)
		resp, err := f.b.c.Cancel(f.ctx, &plumbv1.CancelRequest{ThreadId: thread})
		gate.open()
		if err != nil || !resp.GetWasRunning() || resp.GetRunId() == "" {
			t.Errorf("Cancel on replica b = %v, %v; want was_running and the run id", resp, err)
		}
		evs := ra.finished(t, plumbv1.RunStatus_RUN_STATUS_CANCELLED)
		if len(evs) > 0 && resp.GetRunId() != evs[0].GetRunId() {
			t.Errorf("Cancel answered run %s; the run is %s", resp.GetRunId(), evs[0].GetRunId())
		}
		checkSequences(t, ra)
		for _, r := range []*replica{f.a, f.b} {
			th, err := r.c.GetThread(f.ctx, &plumbv1.GetThreadRequest{ThreadId: thread})
			if got := th.GetThread().GetLastRun().GetStatus(); err != nil || got != plumbv1.RunStatus_RUN_STATUS_CANCELLED {
				t.Errorf("GetThread on replica %s: last run %v, %v; want CANCELLED", r.name, got, err)
			}
		}
	})

	// DeleteThread without force refuses a thread that runs elsewhere;
	// the run completes and the thread stays, with every step once.
	t.Run("Delete", func(t *testing.T) {
		const sc = "delete"
		gate := f.policy.gate(sc, "a", 1)
		ra := f.run(t, f.a, sc)
		gate.wait(t, "step 2's model call on replica a")
		thread := ra.thread(t)
		_, err := f.b.c.DeleteThread(f.ctx, &plumbv1.DeleteThreadRequest{ThreadId: thread})
		gate.open()
		if status.Code(err) != codes.FailedPrecondition || pbconv.Reason(err) != "THREAD_RUNNING" {
			t.Errorf("DeleteThread on replica b while replica a runs the thread: %v; want FAILED_PRECONDITION, THREAD_RUNNING", err)
		}
		ra.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
		checkSequences(t, ra)
		for _, r := range []*replica{f.a, f.b} {
			if _, err := r.c.GetThread(f.ctx, &plumbv1.GetThreadRequest{ThreadId: thread}); err != nil {
				t.Errorf("GetThread on replica %s after the refused delete: %v", r.name, err)
			}
		}
		f.wantSteps(t, thread, sc, 1, 2, 3)
	})

	// DeleteThread with force cancels the run where it runs, waits for
	// it to end, then deletes the thread and its sandbox; the owner's
	// client sees run_finished{CANCELLED}, no STORAGE error.
	t.Run("ForceDelete", func(t *testing.T) {
		const sc = "forcedelete"
		gate := f.policy.gate(sc, "a", 1)
		ra := f.run(t, f.a, sc)
		gate.wait(t, "step 2's model call on replica a")
		thread := ra.thread(t)
		th, err := f.b.c.GetThread(f.ctx, &plumbv1.GetThreadRequest{ThreadId: thread})
		if err != nil {
			t.Fatal(err)
		}
		box := th.GetThread().GetSandboxId()
		_, err = f.b.c.DeleteThread(f.ctx, &plumbv1.DeleteThreadRequest{ThreadId: thread, Force: true})
		gate.open()
		if err != nil {
			t.Errorf("DeleteThread with force on replica b: %v", err)
		}
		evs := ra.finished(t, plumbv1.RunStatus_RUN_STATUS_CANCELLED)
		for _, e := range evs {
			if e.GetError() != nil {
				t.Errorf("replica a's client saw error event %v", e)
			}
		}
		checkSequences(t, ra)
		for _, r := range []*replica{f.a, f.b} {
			if _, err := r.c.GetThread(f.ctx, &plumbv1.GetThreadRequest{ThreadId: thread}); status.Code(err) != codes.NotFound {
				t.Errorf("GetThread on replica %s after the forced delete: %v; want NOT_FOUND", r.name, err)
			}
		}
		if _, err := f.sandbox.GetSandbox(f.ctx, &plumbv1.GetSandboxRequest{SandboxId: box}); status.Code(err) != codes.NotFound {
			t.Errorf("the thread's sandbox %s after the forced delete: %v; want NOT_FOUND", box, err)
		}
	})

	// Attach on the replica that does not run the thread follows the run
	// mid-way to its terminal event, telling the story the owner's client
	// sees.
	t.Run("Attach", func(t *testing.T) {
		const sc = "attach"
		gate := f.policy.gate(sc, "a", 1)
		ra := f.run(t, f.a, sc)
		gate.wait(t, "step 2's model call on replica a")
		thread := ra.thread(t)
		rb := f.attach(t, f.b, thread, 0)
		waitFor(t, "replica b's attach to catch up with replica a's client", func() bool { return rb.last() >= ra.last() })
		gate.open()
		ra.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
		rb.finished(t, plumbv1.RunStatus_RUN_STATUS_COMPLETED)
		checkSequences(t, ra, rb)
		f.wantSteps(t, thread, sc, 1, 2, 3)
	})
}
