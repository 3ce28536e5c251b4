package agentd

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// gatedTurn is a model turn that answers text once its gate opens.
func gatedTurn(text string) (modeltest.Turn, func()) {
	gate := make(chan struct{})
	var once sync.Once
	return modeltest.Turn{Dynamic: func(modeltest.Request) modeltest.Turn {
		<-gate
		return modeltest.Text(text)
	}}, func() { once.Do(func() { close(gate) }) }
}

// startHeld starts a detached run of tenantName on a new thread and
// returns its run and thread ids once it has started.
func (s *servedCore) startHeld(t *testing.T, tenantName string) (runID, threadID string) {
	t.Helper()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(t.Context(), tenant.MetadataKey, tenantName))
	defer cancel() // the client leaves; the detached run goes on
	rs, err := s.c.Run(ctx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "first"}}, Detach: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := rs.Recv()
	if err != nil || m.GetEvent().GetRunStarted() == nil {
		t.Fatalf("first event %v, %v; want run_started", m, err)
	}
	return m.GetEvent().GetRunId(), m.GetEvent().GetThreadId()
}

// enqueue queues a run of tenantName on the busy thread and returns its id.
func (s *servedCore) enqueue(t *testing.T, tenantName, threadID, text string) string {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(t.Context(), tenant.MetadataKey, tenantName)
	rs, err := s.c.Run(ctx, &plumbv1.RunRequest{ThreadId: threadID, Input: []*plumbv1.InputMessage{{Content: text}}, OnBusy: plumbv1.OnBusy_ON_BUSY_ENQUEUE})
	if err != nil {
		t.Fatal(err)
	}
	m, err := rs.Recv()
	id := m.GetEvent().GetRunQueued().GetRun().GetRunId()
	if err != nil || id == "" {
		t.Fatalf("enqueue %q: %v, %v; want run_queued", text, m, err)
	}
	return id
}

// wait waits for run id of tenantName to end (WaitRun, looped).
func (s *servedCore) wait(t *testing.T, tenantName, id string) *plumbv1.RunRecord {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(t.Context(), tenant.MetadataKey, tenantName)
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for {
		w, err := s.c.WaitRun(ctx, &plumbv1.WaitRunRequest{RunId: id, Timeout: durationpb.New(10 * time.Second)})
		if err != nil {
			t.Fatalf("WaitRun %s: %v", id, err)
		}
		if !w.GetTimedOut() {
			return w.GetRun()
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still %v", id, w.GetRun().GetStatus())
		}
	}
}

func (s *servedCore) status(t *testing.T, tenantName, id string) plumbv1.RunStatus {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(t.Context(), tenant.MetadataKey, tenantName)
	r, err := s.c.GetRun(ctx, &plumbv1.GetRunRequest{RunId: id})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetRun().GetStatus()
}

// TestQueuedRunsAndQuotas: a queued run is checked against its tenant's
// quotas again when it is about to start, on one agentd on SQLite.
//   - Over concurrent_runs (a run of the tenant that the request-time
//     checks let through elsewhere is RUNNING on another thread) the
//     thread's queued runs stay QUEUED, with no model call, and start in
//     their order once that run has ended.
//   - Over tokens_per_day (the run before it crossed it) the queued run
//     ends FAILED with QUOTA_EXCEEDED without starting: no model call.
//   - runs_per_minute counted a queued run when it was asked for: it is
//     not counted again as it starts.
func TestQueuedRunsAndQuotas(t *testing.T) {
	s := serveCore(t, `quotas:
  tenants:
    acme: {concurrent_runs: 1}
    beta: {tokens_per_day: 1}
    gamma: {runs_per_minute: 2}
`)
	held, open := gatedTurn("first done")
	heldB, openB := gatedTurn("beta first done")
	heldG, openG := gatedTurn("gamma first done")
	t.Cleanup(func() { open(); openB(); openG() })
	s.model.Script("main", held, modeltest.Text("q1 done"), modeltest.Text("q2 done"), heldB, heldG, modeltest.Text("gamma queued done"))
	ctx := context.Background()

	t.Run("concurrent_runs waits", func(t *testing.T) {
		first, thread := s.startHeld(t, "acme")
		q1, q2 := s.enqueue(t, "acme", thread, "q1"), s.enqueue(t, "acme", thread, "q2")
		// Another run of acme's is RUNNING on another thread (admitted
		// by a replica at the same moment as this one's).
		if err := s.core.Store.CreateThread(ctx, agent.Thread{ID: "elsewhere", Tenant: "acme", CreatedAt: time.Now(), UpdatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		other := agent.RunRecord{RunID: "run-elsewhere", Status: agent.StatusRunning, StartedAt: time.Now()}
		if err := s.core.Store.SaveCheckpoint(ctx, &agent.Checkpoint{ThreadID: "elsewhere", Phase: agent.PhaseInput, Run: other, CreatedAt: time.Now(),
			Append: []agent.Message{{Message: model.Message{Role: model.RoleUser, Content: "hi"}}}}); err != nil {
			t.Fatal(err)
		}
		open()
		if r := s.wait(t, "acme", first); r.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
			t.Fatalf("the held run: %v", r)
		}
		if st := s.status(t, "acme", q1); st != plumbv1.RunStatus_RUN_STATUS_QUEUED || s.model.Count("main") != 1 {
			t.Fatalf("q1 is %v after %d model calls; want QUEUED with no call of its own", st, s.model.Count("main"))
		}
		ended := time.Now()
		other.Status, other.FinishedAt = agent.StatusCompleted, ended
		if err := s.core.Store.SaveCheckpoint(ctx, &agent.Checkpoint{ThreadID: "elsewhere", Phase: agent.PhaseFinal, Base: 1, Run: other, CreatedAt: ended}); err != nil {
			t.Fatal(err)
		}
		r1, r2 := s.wait(t, "acme", q1), s.wait(t, "acme", q2)
		if r1.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || r1.GetFinalText() != "q1 done" || r1.GetStartedAt().AsTime().Before(ended) {
			t.Fatalf("q1 = %v; want COMPLETED, started after the other run ended (%v)", r1, ended)
		}
		if r2.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || r2.GetFinalText() != "q2 done" || r2.GetStartedAt().AsTime().Before(r1.GetFinishedAt().AsTime()) {
			t.Fatalf("q2 = %v; want COMPLETED after q1 (%v)", r2, r1.GetFinishedAt().AsTime())
		}
	})

	t.Run("tokens_per_day fails", func(t *testing.T) {
		calls := s.model.Count("main")
		first, thread := s.startHeld(t, "beta")
		q := s.enqueue(t, "beta", thread, "over")
		openB() // its answer's tokens cross the quota
		if r := s.wait(t, "beta", first); r.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
			t.Fatalf("the held run: %v", r)
		}
		r := s.wait(t, "beta", q)
		if r.GetStatus() != plumbv1.RunStatus_RUN_STATUS_FAILED || r.GetError().GetCode() != "QUOTA_EXCEEDED" {
			t.Fatalf("the queued run = %v; want FAILED with QUOTA_EXCEEDED", r)
		}
		if n := s.model.Count("main"); n != calls+1 {
			t.Fatalf("model calls %d; want %d (none for the refused run)", n, calls+1)
		}
	})

	t.Run("runs_per_minute counted once", func(t *testing.T) {
		first, thread := s.startHeld(t, "gamma")
		q := s.enqueue(t, "gamma", thread, "queued") // the second run asked for this minute
		openG()
		if r := s.wait(t, "gamma", first); r.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
			t.Fatalf("the held run: %v", r)
		}
		if r := s.wait(t, "gamma", q); r.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || r.GetFinalText() != "gamma queued done" {
			t.Fatalf("the queued run = %v; want COMPLETED (counted when asked for, not again)", r)
		}
	})
}
