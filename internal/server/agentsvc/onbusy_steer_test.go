package agentsvc_test

import (
	"slices"
	"testing"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// userTexts lists the user messages of a model request.
func userTexts(r modeltest.Request) []string {
	var out []string
	for _, m := range r.Body.Messages {
		if m.Role == "user" {
			out = append(out, m.Content)
		}
	}
	return out
}

// ON_BUSY_STEER: run A's first model call is in flight when a Run with
// on_busy STEER arrives on its thread. Its stream follows A (as Attach,
// from A's first event); A's tool call completes, then A's next model
// call sees the steered message after the tool result, once, and the
// streams carry a steered event. A steer that arrives while the model's
// final answer is in flight is not lost: it runs as a queued run after A.
// On SQLite (one agentd) and on PostgreSQL (leases).
func TestOnBusySteer(t *testing.T) {
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
			late, openLate := newGate(t)
			e.srv.Script("main",
				gated(gate, modeltest.Calls(call("c1", "counter", `{}`))),
				gated(late, modeltest.Text("A done")),
				modeltest.Text("late done"),
			)
			s, err := e.c.Run(e.ctx(), runReq("", "A: count"))
			if err != nil {
				t.Fatal(err)
			}
			head := recvUntil(t, s, "run_started")
			thread, runA := head[0].GetThreadId(), head[0].GetRunId()
			waitFor(t, "A's model call", func() bool { return len(e.srv.Requests("main")) == 1 })

			req := runReq(thread, "also this")
			req.OnBusy = plumbv1.OnBusy_ON_BUSY_STEER
			steered, err := e.c.Run(e.ctx(), req)
			if err != nil {
				t.Fatal(err)
			}
			// Its stream replays A: the steer is stored by then (the
			// call returning says nothing yet).
			head = recvUntil(t, steered, "run_started")
			openGate()
			waitFor(t, "A's second model call", func() bool { return len(e.srv.Requests("main")) == 2 })
			if got := userTexts(e.srv.Requests("main")[1]); !slices.Equal(got, []string{"A: count", "also this"}) {
				t.Fatalf("A's second model call saw user messages %q; want the steer after A's input", got)
			}
			// A steer while the final answer is in flight.
			req = runReq(thread, "too late")
			req.OnBusy = plumbv1.OnBusy_ON_BUSY_STEER
			ls, err := e.c.Run(e.ctx(), req)
			if err != nil {
				t.Fatal(err)
			}
			// Its stream replays A: the steer is stored by then.
			recvUntil(t, ls, "run_started")
			openLate()

			rest, err := recvAll(steered)
			if err != nil {
				t.Fatalf("the steering stream: %v", err)
			}
			evs := append(head, rest...)
			if evs[0].GetRunId() != runA || evs[0].GetRunStarted() == nil || last(t, evs).GetRunFinished().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
				t.Fatalf("the steering stream = %v; want run A from its start to COMPLETED", kinds(evs, true))
			}
			var steers [][]string
			for _, ev := range evs {
				if st := ev.GetSteered(); st != nil {
					steers = append(steers, st.GetInput())
				}
			}
			if len(steers) != 1 || !slices.Equal(steers[0], []string{"also this"}) {
				t.Fatalf("steered events = %v; want one with the steer", steers)
			}
			list, err := e.c.ListRuns(e.ctx(), &plumbv1.ListRunsRequest{ThreadId: thread})
			if err != nil || len(list.GetRuns()) != 2 {
				t.Fatalf("the thread's runs = %v, %v; want A and the late steer's run", list, err)
			}
			lateRun := e.waitRunDone(list.GetRuns()[0].GetRunId())
			if lateRun.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || !slices.Equal(lateRun.GetInput(), []string{"too late"}) {
				t.Fatalf("the late steer's run = %v", lateRun)
			}
			if n := len(e.srv.Requests("main")); n != 3 {
				t.Fatalf("%d model calls; want 3", n)
			}
			if got := userTexts(e.srv.Requests("main")[2]); !slices.Equal(got, []string{"A: count", "also this", "too late"}) {
				t.Fatalf("the late run's model call saw %q", got)
			}
		})
	}
}
