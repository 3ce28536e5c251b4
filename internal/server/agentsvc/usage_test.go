package agentsvc_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/store"
)

// Each model call of a run lands in the usage ledger; GetUsage sums the
// caller's tenant's calls only, grouped as asked.
func TestGetUsage(t *testing.T) {
	e := newEnv(t)
	e.srv.Script("main",
		modeltest.Turn{Calls: []modeltest.Call{call("c1", "echo", `{"text":"x"}`)}, Usage: &modeltest.Usage{Prompt: 100, Completion: 10, Cached: 40}},
		modeltest.Turn{Text: modeltest.Split("done", 2), Usage: &modeltest.Usage{Prompt: 120, Completion: 5, Reasoning: 3}},
	)
	acme := as(e.ctx(), "acme")
	s, err := e.c.Run(acme, runReq("", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := recvAll(s)
	if err != nil {
		t.Fatal(err)
	}
	runID, thread := evs[0].GetRunId(), evs[0].GetThreadId()
	if st := last(t, evs).GetRunFinished().GetStatus(); st != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("run ended %v", st)
	}
	// The thread had a sandbox for half an hour (as agentd records it).
	sl := e.store.(store.SandboxLedger)
	now := time.Now()
	if err := sl.SandboxStarted(e.ctx(), store.SandboxSpan{ID: "sbx-w-1", Tenant: "acme", ThreadID: thread, Started: now.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := sl.SandboxEnded(e.ctx(), "sbx-w-1", now.Add(-30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	byThread, err := e.c.GetUsage(acme, &plumbv1.GetUsageRequest{GroupBy: plumbv1.UsageGroupBy_USAGE_GROUP_BY_THREAD})
	if err != nil || byThread.GetSandboxSeconds() != 1800 || len(byThread.GetRows()) != 1 || byThread.GetRows()[0].GetSandboxSeconds() != 1800 {
		t.Fatalf("sandbox seconds by thread = %v, %v; want 1800 in total and for the thread", byThread, err)
	}
	cases := []struct {
		name  string
		req   *plumbv1.GetUsageRequest
		key   string
		calls int64
	}{
		{"total", &plumbv1.GetUsageRequest{}, "", 2},
		{"by thread", &plumbv1.GetUsageRequest{GroupBy: plumbv1.UsageGroupBy_USAGE_GROUP_BY_THREAD}, thread, 2},
		{"by run", &plumbv1.GetUsageRequest{GroupBy: plumbv1.UsageGroupBy_USAGE_GROUP_BY_RUN}, runID, 2},
		{"by day", &plumbv1.GetUsageRequest{GroupBy: plumbv1.UsageGroupBy_USAGE_GROUP_BY_DAY}, time.Now().UTC().Format(time.DateOnly), 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := e.c.GetUsage(acme, c.req)
			if err != nil || len(got.GetRows()) != 1 {
				t.Fatalf("GetUsage = %v, %v", got, err)
			}
			r := got.GetRows()[0]
			u := r.GetUsage()
			if r.GetKey() != c.key || r.GetModelCalls() != c.calls || u.GetPromptTokens() != 220 || u.GetCompletionTokens() != 15 ||
				u.GetCachedTokens() != 40 || u.GetReasoningTokens() != 3 {
				t.Fatalf("row = %v; want key %q, %d calls, 220 prompt, 15 completion, 40 cached, 3 reasoning", r, c.key, c.calls)
			}
		})
	}
	// What acme stores: its one thread, with its messages and run.
	got, err := e.c.GetUsage(acme, &plumbv1.GetUsageRequest{})
	if b := got.GetStored(); err != nil || b.GetThreads() != 1 || b.GetMessages() <= 0 || b.GetRuns() <= 0 || b.GetState() <= 0 {
		t.Fatalf("acme's stored bytes = %v, %v", b, err)
	}
	// Another tenant sees none of it; a range before the run holds none.
	if got, err := e.c.GetUsage(as(e.ctx(), "beta"), &plumbv1.GetUsageRequest{}); err != nil || len(got.GetRows()) != 0 || got.GetStored().GetThreads() != 0 {
		t.Fatalf("beta's usage = %v, %v", got, err)
	}
	past := &plumbv1.GetUsageRequest{From: timestamppb.New(time.Unix(0, 0)), To: timestamppb.New(time.Unix(3600, 0))}
	if got, err := e.c.GetUsage(acme, past); err != nil || len(got.GetRows()) != 0 {
		t.Fatalf("usage in 1970 = %v, %v", got, err)
	}
	// Bad input names the field.
	for field, req := range map[string]*plumbv1.GetUsageRequest{
		"to":       {From: timestamppb.New(time.Unix(3600, 0)), To: timestamppb.New(time.Unix(0, 0))},
		"group_by": {GroupBy: 99},
	} {
		_, err := e.c.GetUsage(acme, req)
		wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidArgument)
		if f := fields(err); len(f) != 1 || f[0] != field {
			t.Errorf("fields = %v, want [%s]", f, field)
		}
	}
}

// Without a ledger GetUsage is FAILED_PRECONDITION (USAGE_OFF).
func TestGetUsageOff(t *testing.T) {
	e := newEnv(t, withMemoryStore())
	_, err := e.c.GetUsage(as(e.ctx(), "acme"), &plumbv1.GetUsageRequest{})
	wantStatus(t, err, codes.FailedPrecondition, agentsvc.ReasonUsageOff)
}
