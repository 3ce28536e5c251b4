package agentsvc_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// ON_BUSY_INTERRUPT: run A's first model call is in flight when run B
// arrives on its thread with on_busy INTERRUPT. B's stream carries one
// run_queued event. A's step in flight completes (its counter call runs
// and its result is kept), then A ends CANCELLED with the error
// SUPERSEDED, and B starts once, behind it, to COMPLETED with A's work in
// the thread. On SQLite (one agentd) and on PostgreSQL (leases).
func TestOnBusyInterrupt(t *testing.T) {
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
				gated(gate, modeltest.Calls(call("c1", "counter", `{}`))),
				modeltest.Text("B done"),
			)
			s, err := e.c.Run(e.ctx(), runReq("", "A: count"))
			if err != nil {
				t.Fatal(err)
			}
			head := recvUntil(t, s, "run_started")
			thread, runA := head[0].GetThreadId(), head[0].GetRunId()
			waitFor(t, "A's model call", func() bool { return len(e.srv.Requests("main")) == 1 })

			req := runReq(thread, "B: instead")
			req.OnBusy = plumbv1.OnBusy_ON_BUSY_INTERRUPT
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
			fin := last(t, rest).GetRunFinished()
			if fin == nil || fin.GetStatus() != plumbv1.RunStatus_RUN_STATUS_CANCELLED {
				t.Fatalf("A ended with %v; want run_finished CANCELLED", kinds(rest, true))
			}
			if !slices.ContainsFunc(rest, func(e *plumbv1.Event) bool { return e.GetToolResult() != nil }) {
				t.Fatalf("A's tool call in flight did not complete: %v", kinds(rest, true))
			}
			a, err := e.c.GetRun(e.ctx(), &plumbv1.GetRunRequest{RunId: runA})
			if err != nil || a.GetRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_CANCELLED || a.GetRun().GetError().GetCode() != agent.CodeSuperseded {
				t.Fatalf("GetRun A = %v, %v; want CANCELLED, SUPERSEDED", a, err)
			}

			var b *plumbv1.RunRecord
			deadline := time.Now().Add(5 * time.Minute)
			for b.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED && time.Now().Before(deadline) {
				w, err := e.c.WaitRun(e.ctx(), &plumbv1.WaitRunRequest{RunId: runB, Timeout: durationpb.New(30 * time.Second)})
				if err != nil {
					t.Fatal(err)
				}
				b = w.GetRun()
			}
			if b.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || b.GetFinalText() != "B done" {
				t.Fatalf("run B = %v; want COMPLETED with B's text", b)
			}
			if n := len(e.srv.Requests("main")); n != 2 {
				t.Fatalf("%d model calls; want A's one and B's one", n)
			}
			// B saw A's kept work: its call, its result, then B's input.
			msgs := e.srv.Requests("main")[1].Body.Messages
			var roles []string
			for _, m := range msgs {
				roles = append(roles, m.Role)
			}
			if !slices.Contains(roles, "tool") {
				t.Fatalf("B's model call saw roles %v; want A's tool result kept", roles)
			}
		})
	}
}
