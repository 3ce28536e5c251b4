package agentsvc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/store"
)

// TestRunTakesTheThreadLease: with leases in the shared store, a run on a
// thread whose lease another replica holds is ABORTED (THREAD_BUSY)
// naming that replica; once it is released the run goes ahead, and a
// finished run leaves the lease released for any replica.
func TestRunTakesTheThreadLease(t *testing.T) {
	e := newEnv(t, withLeases("replica-b"))
	leases := e.store.(store.Leases)
	e.srv.Script("main", modeltest.Text("warm-up"))
	thread := last(t, e.mustRun(runReq("", "hi"))).GetThreadId()

	ctx := context.Background()
	held, err := leases.AcquireLease(ctx, thread, "replica-a", time.Now(), time.Hour)
	if err != nil {
		t.Fatalf("the first run left its lease held: %v", err)
	}
	_, err = e.run(runReq(thread, "again"))
	wantStatus(t, err, codes.Aborted, agentsvc.ReasonThreadBusy)
	if !strings.Contains(err.Error(), "replica-a") {
		t.Errorf("busy error %q does not name the replica that runs the thread", err)
	}
	if err := leases.ReleaseLease(ctx, held); err != nil {
		t.Fatal(err)
	}
	e.srv.Script("main", modeltest.Text("done"))
	e.mustRun(runReq(thread, "again"))
	if _, err := leases.AcquireLease(ctx, thread, "replica-c", time.Now(), time.Hour); err != nil {
		t.Fatalf("after the run the lease is still held: %v", err)
	}
}

// TestLostLeaseStopsTheRun: when the run's lease stops being this
// replica's (here: released behind its back, as when it expired and
// another replica took the thread), the next renewal fails and the run
// stops; its last checkpoint is fenced off, so the stream ends ABORTED,
// LEASE_LOST, naming the last sequence it delivered (where a re-Attach
// picks up), without a terminal event, and the stored run is left for the
// replica that holds the thread now.
func TestLostLeaseStopsTheRun(t *testing.T) {
	e := newEnv(t, withLeases("replica-b"), withService(func(c *agentsvc.Config) { c.LeaseTTL = 300 * time.Millisecond }))
	leases := e.store.(store.Leases)
	e.srv.Script("main", modeltest.Text("warm-up"))
	thread := last(t, e.mustRun(runReq("", "hi"))).GetThreadId() // lease epoch 1

	e.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"ms":60000}`)))
	s, err := e.c.Run(e.ctx(), runReq(thread, "sleep"))
	if err != nil {
		t.Fatal(err)
	}
	head := recvUntil(t, s, "tool_call_started")
	if err := leases.ReleaseLease(context.Background(), store.Lease{ThreadID: thread, Holder: "replica-b", Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	rest, err := recvAll(s)
	evs := append(head, rest...)
	wantStatus(t, err, codes.Aborted, agentsvc.ReasonLeaseLost)
	if after := afterSequence(t, err); after != last(t, evs).GetSequence() || terminal(last(t, evs)) {
		t.Fatalf("the stream after the lost lease ended at %s %d naming after_sequence %d; want its last event's, not terminal", kind(last(t, evs)), last(t, evs).GetSequence(), after)
	}
	td, err := e.store.LoadThread(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	if td.LastRun.Status != agent.StatusRunning || len(td.Messages) != 4 {
		t.Fatalf("after the lost lease the stored run is %s with %d messages; want RUNNING with the 4 committed before", td.LastRun.Status, len(td.Messages))
	}
}
