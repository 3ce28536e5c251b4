package replicas

import (
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
