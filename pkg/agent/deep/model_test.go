package deep_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/agent/middleware/hooks"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/model/openai"
)

func runError(t *testing.T, tr *transcript) agent.RunError {
	t.Helper()
	e, ok := tr.last().(agent.RunError)
	if !ok {
		t.Fatalf("last event %#v, want error", tr.last())
	}
	return e
}

var modelScenarios = []scenario{
	{"62_retry_after", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.HTTPError(429, modeltest.RetryAfter("2"), ""), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		tr.checkEnvelope(t, 1)
		reqs := e.srv.Requests("main")
		if gap := reqs[1].Received.Sub(reqs[0].Received); gap < 2*time.Second {
			t.Errorf("second request %v after the first, want ≥ 2s", gap)
		}
		if got := tr.kinds(true); !slices.Equal(got, []string{"run_started", "message", "run_finished"}) {
			t.Errorf("events %v", got)
		}
		f := tr.finished(t, agent.StatusCompleted)
		n := 0
		for _, k := range tr.kinds(false) {
			if k == "usage" {
				n++
			}
		}
		if n != 1 || f.Usage.Total == 0 {
			t.Errorf("%d usage events, run usage %+v", n, f.Usage)
		}
	}},
	{"63_backoff", func(t *testing.T) {
		e := newEnv(t, withRetry(openai.RetryConfig{MaxAttempts: 4, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}))
		e.srv.Script("main", modeltest.HTTPError(503, nil, ""), modeltest.HTTPError(503, nil, ""), modeltest.HTTPError(503, nil, ""), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		tr.finished(t, agent.StatusCompleted)
		reqs := e.srv.Requests("main")
		if len(reqs) != 4 {
			t.Fatalf("%d requests", len(reqs))
		}
		for i, base := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
			gap := reqs[i+1].Received.Sub(reqs[i].Received)
			// Only the lower bound: a loaded machine makes gaps longer.
			if gap < base/2 {
				t.Errorf("gap %d = %v, want at least %v", i+1, gap, base/2)
			}
		}
	}},
	{"64_retries_exhausted", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.HTTPError(500, nil, ""), modeltest.HTTPError(500, nil, ""), modeltest.HTTPError(500, nil, ""), modeltest.HTTPError(500, nil, ""))
		tr := e.run(input("go")).must(t)
		tr.checkEnvelope(t, 1)
		if er := runError(t, tr); er.Code != string(model.CodeUnavailable) || !er.Retryable {
			t.Errorf("error %+v", er)
		}
		td := e.thread(tr.res.ThreadID)
		if len(td.Messages) != 1 || td.Messages[0].Role != model.RoleUser || td.LastRun.Status != agent.StatusFailed {
			t.Errorf("log %+v, run %s", td.Messages, td.LastRun.Status)
		}
		e.srv.Script("main", modeltest.Text("ok"))
		e.run(agent.RunInput{ThreadID: tr.res.ThreadID, Input: []string{"again"}}).must(t).finished(t, agent.StatusCompleted)
	}},
	{"65_auth_error", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.HTTPError(401, nil, ""))
		tr := e.run(input("go")).must(t)
		if n := e.srv.Count("main"); n != 1 {
			t.Errorf("%d requests", n)
		}
		if er := runError(t, tr); er.Code != string(model.CodeAuth) || er.Retryable {
			t.Errorf("error %+v", er)
		}
		golden(t, "65_auth_error", tr)
	}},
	{"66_retry_after_too_long", func(t *testing.T) {
		e := newEnv(t, withRetry(openai.RetryConfig{InitialBackoff: 10 * time.Millisecond, MaxRetryAfter: 60 * time.Second}))
		e.srv.Script("main", modeltest.HTTPError(429, modeltest.RetryAfter("3600"), ""))
		// Ending at all (within the test's hang guard) shows that the hour
		// was not waited.
		tr := e.run(input("go")).must(t)
		if er := runError(t, tr); er.Code != string(model.CodeRateLimited) || !er.Retryable {
			t.Errorf("error %+v", er)
		}
	}},
	{"67_retry_after_partial_output", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Drop(2, modeltest.Turn{Text: []string{"par", "tial", "…"}}), modeltest.Text("full"))
		tr := e.run(input("go")).must(t)
		tr.checkEnvelope(t, 1)
		var attempts []int
		for _, ev := range tr.events {
			if d, ok := ev.Payload.(agent.MessageDelta); ok {
				attempts = append(attempts, d.Attempt)
			}
		}
		if !slices.Equal(attempts, []int{1, 1, 2, 2, 2}) {
			t.Errorf("delta attempts %v", attempts)
		}
		if m := firstMessage(t, tr); m.Text != "full" {
			t.Errorf("message %q", m.Text)
		}
	}},
	{"68_missing_usage_is_estimated", func(t *testing.T) {
		e := newEnv(t)
		turn := modeltest.Text("ok")
		turn.Usage = nil
		e.srv.Script("main", turn)
		tr := e.run(input("go")).must(t)
		for _, ev := range tr.events {
			if u, ok := ev.Payload.(agent.UsageReport); ok && (!u.Estimated || u.Call.Total == 0) {
				t.Errorf("usage %+v", u)
			}
		}
	}},
}

var limitScenarios = []scenario{
	{"69_max_iterations", func(t *testing.T) {
		e := newEnv(t)
		var turns []modeltest.Turn
		for i := range 4 {
			tu := modeltest.Calls(call("c"+string(rune('1'+i)), "echo", `{"text":"x"}`))
			tu.Text = []string{"step ", string(rune('1' + i))}
			turns = append(turns, tu)
		}
		e.srv.Script("main", turns...)
		tr := e.run(agent.RunInput{Input: []string{"go"}, Spec: agent.RunSpec{MaxIterations: 3}}).must(t)
		if n := e.srv.Count("main"); n != 3 {
			t.Errorf("%d model requests", n)
		}
		if n := len(tr.results()); n != 3 {
			t.Errorf("%d tool results", n)
		}
		if f := tr.finished(t, agent.StatusMaxIterations); f.FinalText != "step 3" {
			t.Errorf("final %q", f.FinalText)
		}
		if d := agent.DanglingCalls(e.thread(tr.res.ThreadID).Messages); len(d) != 0 {
			t.Errorf("dangling %v", d)
		}
		e.srv.TakeErrors()
	}},
	{"70_cancel", func(t *testing.T) {
		// The client cancels its stream (no detach) 200 ms after
		// tool_call_started.
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(call("c1", "sleep", `{"ms":60000}`)))
		ctx, cancel := context.WithCancel(e.ctx())
		defer cancel()
		s, err := e.c.Run(ctx, runRequest(input("go")))
		if err != nil {
			t.Fatal(err)
		}
		var wire []*plumbv1.Event
		for {
			m, err := s.Recv()
			if err != nil {
				if status.Code(err) != codes.Canceled {
					t.Errorf("stream ended with %v, want CANCELLED", err)
				}
				break
			}
			wire = append(wire, m.GetEvent())
			if m.GetEvent().GetToolCallStarted() != nil {
				time.AfterFunc(200*time.Millisecond, cancel)
			}
		}
		if len(wire) == 0 {
			t.Fatal("no events")
		}
		thread := wire[0].GetThreadId()
		// The run ends on its own once the tool saw the cancellation (long
		// before the sleep would); the poll's limit is only a hang guard.
		var td *agent.ThreadData
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if td = e.thread(thread); td.LastRun.Status != agent.StatusRunning || time.Now().After(deadline) {
				break
			}
		}
		if td.LastRun.Status != agent.StatusCancelled {
			t.Fatalf("run record %s", td.LastRun.Status)
		}
		if got := toolOrder(td); len(got) != 0 {
			t.Errorf("cancelled call got a result: %v", got)
		}
		if n := e.srv.Count("main"); n != 1 {
			t.Errorf("%d model requests", n)
		}
		// The record is committed just before the service lets go of the
		// thread; Cancel returns once the thread is free (a no-op if it
		// already is).
		if _, err := e.c.Cancel(e.ctx(), &plumbv1.CancelRequest{ThreadId: thread}); err != nil {
			t.Fatal(err)
		}
		e.srv.Script("main", modeltest.Text("ok"))
		e.run(agent.RunInput{ThreadID: thread, Input: []string{"next"}}).must(t).finished(t, agent.StatusCompleted)
		got := requestMessages(e.srv.Requests("main")[1])
		if !slices.Contains(got, "tool(c1): Tool call sleep (c1) did not complete: the run stopped before it returned a result.") {
			t.Errorf("next request %q", got)
		}
	}},
	{"72_run_timeout", func(t *testing.T) {
		e := newEnv(t, withConfig(func(c *deep.Config) { c.Limits.Timeout = time.Second }))
		slow := modeltest.Text("late")
		slow.FirstByteDelay = 3 * time.Second
		e.srv.Script("main", slow)
		// The 3 s answer is cut by the 1 s run timeout.
		tr := e.run(input("go")).must(t)
		tr.finished(t, agent.StatusDeadlineExceeded)
		if td := e.thread(tr.res.ThreadID); td.LastRun.Status != agent.StatusDeadlineExceeded {
			t.Errorf("run record %s", td.LastRun.Status)
		}
	}},
	{"74_hook_blocks_before_hitl", func(t *testing.T) {
		e := newEnv(t, gate(map[string]profile.InterruptRule{"echo": {}}), withConfig(func(c *deep.Config) {
			c.Hooks = []hooks.Hook{{Name: "no-root-rm", Phase: "pre", Tools: []string{"echo"}, Match: &hooks.Match{Arg: "/text", Regex: `rm\s+-rf\s+/(\s|$)`},
				Action: "block", Message: "refusing to delete the root filesystem"}}
		}))
		e.srv.Script("main", modeltest.Calls(call("c1", "echo", `{"text":"rm -rf /"}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		r := tr.result(t, "c1")
		if !r.IsError || r.Origin != agent.OriginBlocked || r.Content != "blocked by hook no-root-rm: refusing to delete the root filesystem" {
			t.Errorf("c1 %+v", r)
		}
		tr.finished(t, agent.StatusCompleted)
	}},
}

var promptScenarios = []scenario{
	{"76_prompt_stable_within_run", func(t *testing.T) {
		e := newEnv(t)
		e.srv.Script("main", modeltest.Calls(call("c1", "echo", `{"text":"a"}`)), modeltest.Calls(call("c2", "echo", `{"text":"b"}`)), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		tr.finished(t, agent.StatusCompleted)
		reqs := e.srv.Requests("main")
		if len(reqs) != 3 {
			t.Fatalf("%d requests", len(reqs))
		}
		p := systemPrompt(reqs[0])
		for i, r := range reqs[1:] {
			if systemPrompt(r) != p {
				t.Errorf("system prompt of request %d differs", i+2)
			}
		}
		date := time.Now().UTC().Format("2006-01-02")
		for _, want := range []string{"<env>", "Working directory: /\n", "Platform: virtual filesystem", "Shell available: no", "Today's date: " + date, "Model: " + smartModel} {
			if !strings.Contains(p, want) {
				t.Errorf("system prompt lacks %q:\n%s", want, p)
			}
		}
	}},
}
