package agentsvc_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// A finished run is a resource: its owner reads, lists and waits for it
// (WaitRun returns at once, not timed out); another tenant gets
// NOT_FOUND for it and lists nothing.
func TestRunRecordsAndTenancy(t *testing.T) {
	e := newEnv(t)
	e.srv.Script("main", modeltest.Text("A"))
	s, err := e.c.Run(as(e.ctx(), "acme"), runReq("", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := recvAll(s)
	if err != nil {
		t.Fatal(err)
	}
	runID, thread := evs[0].GetRunId(), evs[0].GetThreadId()
	acme := as(e.ctx(), "acme")

	got, err := e.c.GetRun(acme, &plumbv1.GetRunRequest{RunId: runID, ThreadId: thread})
	r := got.GetRun()
	if err != nil || r.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || r.GetThreadId() != thread ||
		!slices.Equal(r.GetInput(), []string{"hello"}) || r.GetFinalText() != "A" || r.GetCreatedAt() == nil || r.GetFinishedAt() == nil {
		t.Fatalf("GetRun = %v, %v", got, err)
	}
	w, err := e.c.WaitRun(acme, &plumbv1.WaitRunRequest{RunId: runID})
	if err != nil || w.GetTimedOut() || w.GetRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("WaitRun of an ended run = %v, %v", w, err)
	}
	for _, c := range []struct {
		name string
		req  *plumbv1.ListRunsRequest
		n    int
	}{
		{"tenant", &plumbv1.ListRunsRequest{}, 1},
		{"thread", &plumbv1.ListRunsRequest{ThreadId: thread}, 1},
		{"status", &plumbv1.ListRunsRequest{Status: plumbv1.RunStatus_RUN_STATUS_QUEUED}, 0},
	} {
		list, err := e.c.ListRuns(acme, c.req)
		if err != nil || len(list.GetRuns()) != c.n {
			t.Errorf("%s: ListRuns = %v, %v; want %d runs", c.name, list, err, c.n)
		}
	}

	beta := as(e.ctx(), "beta")
	_, err = e.c.GetRun(beta, &plumbv1.GetRunRequest{RunId: runID})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonRunNotFound)
	_, err = e.c.WaitRun(beta, &plumbv1.WaitRunRequest{RunId: runID})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonRunNotFound)
	_, err = e.c.GetRun(acme, &plumbv1.GetRunRequest{RunId: runID, ThreadId: "01OTHER"})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonRunNotFound)
	_, err = e.c.ListRuns(beta, &plumbv1.ListRunsRequest{ThreadId: thread})
	wantStatus(t, err, codes.NotFound, agentsvc.ReasonThreadNotFound)
	if list, err := e.c.ListRuns(beta, &plumbv1.ListRunsRequest{}); err != nil || len(list.GetRuns()) != 0 {
		t.Fatalf("beta lists %v, %v", list, err)
	}
}

// Bad run requests are INVALID_ARGUMENT naming the field.
func TestRunRequestValidation(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"GetRun without an id", func() error {
			_, err := e.c.GetRun(e.ctx(), &plumbv1.GetRunRequest{})
			return err
		}, "run_id"},
		{"WaitRun past the limit", func() error {
			_, err := e.c.WaitRun(e.ctx(), &plumbv1.WaitRunRequest{RunId: "x", Timeout: durationpb.New(2 * time.Hour)})
			return err
		}, "timeout"},
		{"ListRuns with a negative page", func() error {
			_, err := e.c.ListRuns(e.ctx(), &plumbv1.ListRunsRequest{PageSize: -1})
			return err
		}, "page_size"},
		{"ListRuns with a foreign token", func() error {
			_, err := e.c.ListRuns(e.ctx(), &plumbv1.ListRunsRequest{PageToken: "nope"})
			return err
		}, "page_token"},
		{"Run with an unknown strategy", func() error {
			req := runReq("", "x")
			req.OnBusy = 42
			_, err := e.run(req)
			return err
		}, "on_busy"},
		{"Run ENQUEUE with files", func() error {
			req := runReq("", "x")
			req.OnBusy, req.Files = plumbv1.OnBusy_ON_BUSY_ENQUEUE, map[string]string{"/a.txt": "a"}
			_, err := e.run(req)
			return err
		}, "files"},
		{"Run INTERRUPT abandoning an interrupt", func() error {
			req := runReq("", "x")
			req.OnBusy, req.AbandonInterrupt = plumbv1.OnBusy_ON_BUSY_INTERRUPT, true
			_, err := e.run(req)
			return err
		}, "abandon_interrupt"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidArgument)
			if f := fields(err); !slices.Contains(f, c.field) {
				t.Fatalf("violations %v; want %s", f, c.field)
			}
		})
	}
}

// Without a store that keeps run records (the memory store) the run RPCs
// are FAILED_PRECONDITION (RUNS_OFF).
func TestRunsOffWithoutRecords(t *testing.T) {
	e := newEnv(t, withMemoryStore())
	_, err := e.c.GetRun(e.ctx(), &plumbv1.GetRunRequest{RunId: "x"})
	wantStatus(t, err, codes.FailedPrecondition, agentsvc.ReasonRunsOff)
}
