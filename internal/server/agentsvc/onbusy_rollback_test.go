package agentsvc_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// waitRunDone waits until run id is neither QUEUED nor RUNNING.
func (e *env) waitRunDone(id string) *plumbv1.RunRecord {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		w, err := e.c.WaitRun(e.ctx(), &plumbv1.WaitRunRequest{RunId: id, Timeout: durationpb.New(30 * time.Second)})
		if err != nil {
			e.t.Fatal(err)
		}
		if !w.GetTimedOut() || time.Now().After(deadline) {
			return w.GetRun()
		}
	}
}

// ON_BUSY_ROLLBACK: a first run leaves a file, a todo and five messages
// on the thread. Run A's first model call (writing another file and
// todo) is in flight when run B arrives with on_busy ROLLBACK. A's step
// completes, then A is rolled back: it ends CANCELLED with ROLLED_BACK,
// and the thread's messages, todos and State files are the first run's
// again. B then runs on that thread: its model call sees none of A's
// input or steps. On SQLite (one agentd) and on PostgreSQL (leases).
func TestOnBusyRollback(t *testing.T) {
	for _, c := range []struct {
		name string
		opts func(t *testing.T) []option
	}{
		{"sqlite", func(*testing.T) []option { return nil }},
		{"postgres", func(t *testing.T) []option { return []option{withShared(sharedPostgres(t), "replica-a")} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, c.opts(t)...)
			gate, openGate := newGate(t)
			e.srv.Script("main",
				modeltest.Calls(call("c1", "write_file", `{"file_path":"/keep.txt","content":"kept"}`), call("c2", "write_todos", `{"todos":[{"content":"keep","status":"in_progress"}]}`)),
				modeltest.Text("first done"),
				gated(gate, modeltest.Calls(call("c3", "write_file", `{"file_path":"/gone.txt","content":"discarded"}`), call("c4", "write_todos", `{"todos":[{"content":"gone","status":"pending"}]}`))),
				modeltest.Text("B done"),
			)
			first := e.mustRun(runReq("", "first"))
			thread := first[0].GetThreadId()

			s, err := e.c.Run(e.ctx(), runReq(thread, "A: discard me"))
			if err != nil {
				t.Fatal(err)
			}
			head := recvUntil(t, s, "run_started")
			runA := head[0].GetRunId()
			waitFor(t, "A's model call", func() bool { return len(e.srv.Requests("main")) == 3 })

			req := runReq(thread, "B: instead")
			req.OnBusy = plumbv1.OnBusy_ON_BUSY_ROLLBACK
			evs := e.mustRun(req)
			if len(evs) != 1 || evs[0].GetRunQueued() == nil {
				t.Fatalf("B's stream = %v; want one run_queued", kinds(evs, true))
			}
			runB := evs[0].GetRunQueued().GetRun().GetRunId()
			openGate()

			rest, err := recvAll(s)
			if err != nil {
				t.Fatalf("A's stream: %v", err)
			}
			if fin := last(t, rest).GetRunFinished(); fin.GetStatus() != plumbv1.RunStatus_RUN_STATUS_CANCELLED {
				t.Fatalf("A ended with %v; want run_finished CANCELLED", kinds(rest, true))
			}
			a, err := e.c.GetRun(e.ctx(), &plumbv1.GetRunRequest{RunId: runA})
			if err != nil || a.GetRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_CANCELLED || a.GetRun().GetError().GetCode() != agent.CodeRolledBack {
				t.Fatalf("GetRun A = %v, %v; want CANCELLED, ROLLED_BACK", a, err)
			}
			b := e.waitRunDone(runB)
			if b.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || b.GetFinalText() != "B done" {
				t.Fatalf("run B = %v; want COMPLETED", b)
			}
			// B's model call saw the first run and its own input only.
			var contents []string
			for _, m := range e.srv.Requests("main")[3].Body.Messages {
				contents = append(contents, m.Role+":"+m.Content)
				if m.Content == "A: discard me" || m.ToolCallID == "c3" || m.ToolCallID == "c4" {
					t.Errorf("B's model call saw A's message %+v", m)
				}
			}
			if !slices.Contains(contents, "user:first") || !slices.Contains(contents, "user:B: instead") {
				t.Errorf("B's model call saw %v", contents)
			}
			full := e.thread(thread, plumbv1.ThreadView_THREAD_VIEW_FULL)
			var files []string
			for _, f := range full.GetFiles() {
				files = append(files, f.GetPath())
			}
			if n := len(full.GetMessages()); n != 7 || !slices.Equal(files, []string{"/keep.txt"}) ||
				len(full.GetTodos()) != 1 || full.GetTodos()[0].GetContent() != "keep" {
				t.Errorf("after the rollback and B: %d messages (want 7), files %v (want /keep.txt), todos %v (want keep)", n, files, full.GetTodos())
			}
		})
	}
}

// Cancel on a thread with queued runs cancels them too: each ends
// CANCELLED ("cancelled while queued") without starting, and Cancel's
// answer lists them. CancelRun cancels one queued run and leaves the
// rest of the queue; a run that ended is FAILED_PRECONDITION.
func TestCancelEndsQueuedRuns(t *testing.T) {
	e := newEnv(t)
	gate, openGate := newGate(t)
	defer openGate()
	e.srv.Script("main",
		gated(gate, modeltest.Text("A done")),
		modeltest.Text("Q3 done"),
	)
	s, err := e.c.Run(e.ctx(), runReq("", "A"))
	if err != nil {
		t.Fatal(err)
	}
	head := recvUntil(t, s, "run_started")
	thread, runA := head[0].GetThreadId(), head[0].GetRunId()
	waitFor(t, "A's model call", func() bool { return len(e.srv.Requests("main")) == 1 })
	queue := func(text string) string {
		req := runReq(thread, text)
		req.OnBusy = plumbv1.OnBusy_ON_BUSY_ENQUEUE
		evs := e.mustRun(req)
		return evs[0].GetRunQueued().GetRun().GetRunId()
	}
	q1, q2 := queue("Q1"), queue("Q2")

	one, err := e.c.CancelRun(e.ctx(), &plumbv1.CancelRunRequest{RunId: q1})
	if err != nil || one.GetRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_CANCELLED || one.GetRun().GetError().GetCode() != agent.CodeCancelled {
		t.Fatalf("CancelRun(Q1) = %v, %v; want CANCELLED", one, err)
	}
	_, err = e.c.CancelRun(e.ctx(), &plumbv1.CancelRunRequest{RunId: q1})
	wantStatus(t, err, codes.FailedPrecondition, agentsvc.ReasonRunNotActive)
	_, err = e.c.CancelRun(e.ctx(), &plumbv1.CancelRunRequest{})
	wantStatus(t, err, codes.InvalidArgument, agentsvc.ReasonInvalidArgument)

	c, err := e.c.Cancel(e.ctx(), &plumbv1.CancelRequest{ThreadId: thread})
	if err != nil || !c.GetWasRunning() || c.GetRunId() != runA || !slices.Equal(c.GetCancelledQueuedRunIds(), []string{q2}) {
		t.Fatalf("Cancel = %v, %v; want A cancelled and Q2 listed", c, err)
	}
	if _, err := recvAll(s); err != nil {
		t.Fatalf("A's stream: %v", err)
	}
	for _, id := range []string{runA, q2} {
		r, err := e.c.GetRun(e.ctx(), &plumbv1.GetRunRequest{RunId: id})
		if err != nil || r.GetRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_CANCELLED {
			t.Fatalf("run %s = %v, %v; want CANCELLED", id, r, err)
		}
	}
	r, _ := e.c.GetRun(e.ctx(), &plumbv1.GetRunRequest{RunId: q2})
	if r.GetRun().GetError().GetMessage() != "cancelled while queued" || r.GetRun().GetStartedAt() != nil {
		t.Errorf("Q2 = %v; want cancelled while queued, never started", r.GetRun())
	}
	// The thread is free: a new run starts at once, nothing queued runs.
	evs := e.mustRun(runReq(thread, "Q3"))
	if fin := last(t, evs).GetRunFinished(); fin.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("the next run: %v", kinds(evs, true))
	}
	if n := len(e.srv.Requests("main")); n != 2 {
		t.Fatalf("%d model calls; want A's and Q3's only", n)
	}
}
