package replicas

import (
	"syscall"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// quotaConfig gives tenant default (the fleet's token) one concurrent run
// and a token quota the first model call crosses.
const quotaConfig = `quotas:
  tenants:
    default: {concurrent_runs: 1, tokens_per_day: 1}
`

// refusedForQuota sends scenario's Run on a new thread through r and
// fails t unless it is refused before it starts with RESOURCE_EXHAUSTED,
// reason QUOTA_EXCEEDED, naming quota.
func (f *fleet) refusedForQuota(t *testing.T, r *replica, scenario, quota string) {
	t.Helper()
	rs, err := r.c.Run(f.ctx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: scenario}}})
	if err != nil {
		t.Fatalf("run %s on replica %s: %v", scenario, r.name, err)
	}
	evs, err := follow("run "+scenario+" on "+r.name, 0, rs.Recv).end(t)
	st := status.Convert(err)
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	if len(evs) != 0 || st.Code() != codes.ResourceExhausted || info.GetReason() != "QUOTA_EXCEEDED" || info.GetMetadata()["quota"] != quota {
		t.Fatalf("run %s on replica %s: %d events, %v (ErrorInfo %v); want RESOURCE_EXHAUSTED QUOTA_EXCEEDED naming %s before any event",
			scenario, r.name, len(evs), err, info, quota)
	}
}

// TestQuotasAcrossReplicas: a tenant's quotas hold across two replicas on
// one PostgreSQL. With concurrent_runs 1, a run held on replica a makes a
// Run for another thread of the tenant on replica b fail before it starts
// with RESOURCE_EXHAUSTED naming concurrent_runs. The held run's first
// model call crosses tokens_per_day: the run ends FAILED with
// QUOTA_EXCEEDED at the next step (its first tool step ran, no second
// model call was made), and the next Run, on either replica, is refused
// naming tokens_per_day.
func TestQuotasAcrossReplicas(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 10 * time.Minute, graceA: 10 * time.Second, extra: quotaConfig})
	const held = "quota-held"
	g := f.policy.gate(held, "a", 0)
	s := f.run(t, f.a, held)
	g.wait(t, "the held run's first model call on replica a")

	f.refusedForQuota(t, f.b, "quota-other", "concurrent_runs")
	if n := f.model.Count("main"); n != 1 {
		t.Fatalf("the model was called %d times; want only the held run's first call", n)
	}

	g.open()
	evs, err := s.end(t)
	if err != nil || len(evs) == 0 {
		t.Fatalf("held run stream: %v after %d events", err, len(evs))
	}
	last := evs[len(evs)-1]
	if last.GetError().GetCode() != "QUOTA_EXCEEDED" {
		t.Fatalf("the held run ended with %v; want an error event QUOTA_EXCEEDED", last)
	}
	thread := s.thread(t)
	f.wantSteps(t, thread, held, 1)
	if n := f.model.Count("main"); n != 1 {
		t.Fatalf("the model was called %d times; want 1 (the step after the crossing makes no call)", n)
	}
	rec := f.waitRun(t, f.b, evs[0].GetRunStarted().GetRunId())
	if rec.GetStatus() != plumbv1.RunStatus_RUN_STATUS_FAILED || rec.GetError().GetCode() != "QUOTA_EXCEEDED" {
		t.Fatalf("run record %v; want FAILED with QUOTA_EXCEEDED", rec)
	}

	f.refusedForQuota(t, f.b, "quota-after-b", "tokens_per_day")
	f.refusedForQuota(t, f.a, "quota-after-a", "tokens_per_day")
}

// TestTakeoverAndQuotas: a run taken over is not a new run, and the token
// quota still applies to it. With concurrent_runs 1, runs_per_minute 1
// and tokens_per_day 1 for the tenant, replica a starts a run (the
// minute's one run) and is killed in its first model call, before any
// token was counted. Replica b takes the run over — not refused as a
// second run of the minute — and makes the model call again; that call
// crosses tokens_per_day, its tool step runs once, and the run ends
// FAILED with QUOTA_EXCEEDED at the next step, with no further call. A
// new Run is then refused for a quota.
func TestTakeoverAndQuotas(t *testing.T) {
	f := startFleet(t, config{leaseTTL: 2 * time.Second, graceA: 10 * time.Second, extra: `quotas:
  tenants:
    default: {concurrent_runs: 1, runs_per_minute: 1, tokens_per_day: 1}
`})
	const sc = "quota-takeover"
	hung := f.policy.hang(sc, "a", 0)
	ra := f.run(t, f.a, sc)
	hung.wait(t, "the run's first model call on replica a")
	thread := ra.thread(t)
	if err := f.a.proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	f.a.proc.Wait(hangGuard)
	evs, _ := ra.end(t) // cut: the connection is gone
	runID := evs[0].GetRunStarted().GetRunId()

	rec := f.waitRun(t, f.b, runID)
	if rec.GetStatus() != plumbv1.RunStatus_RUN_STATUS_FAILED || rec.GetError().GetCode() != "QUOTA_EXCEEDED" || rec.GetHolder() == "" {
		t.Fatalf("the taken-over run = %v; want FAILED with QUOTA_EXCEEDED on replica b", rec)
	}
	f.wantSteps(t, thread, sc, 1)
	if n := f.model.Count("main"); n != 2 {
		t.Fatalf("the model was called %d times; want 2 (a's call cut by the kill, b's that crossed the quota, none after)", n)
	}
	rs, err := f.b.c.Run(f.ctx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "quota-after-takeover"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = follow("run after the takeover", 0, rs.Recv).end(t)
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted {
		t.Fatalf("a new Run after the takeover: %v; want RESOURCE_EXHAUSTED for a quota", err)
	}
}
