package deep_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// overflowTurn is the provider's answer to a request that does not fit.
func overflowTurn() modeltest.Turn {
	return modeltest.HTTPError(http.StatusBadRequest, nil,
		modeltest.ErrorBody("invalid_request_error", "context_length_exceeded", "This model's maximum context length is 60000 tokens."))
}

// fitting answers t when no message of the request is longer than limit
// characters, and with a context overflow otherwise, like an endpoint
// whose window is smaller than a huge message.
func fitting(limit int, t modeltest.Turn) modeltest.Turn {
	return modeltest.Dynamic(func(r modeltest.Request) modeltest.Turn {
		for _, m := range r.Body.Messages {
			if utf8.RuneCountInString(m.Content) > limit {
				return overflowTurn()
			}
		}
		return t
	})
}

// TestOverflowRetryGoesThroughTheMiddleware: the retry after a forced
// summarization is shaped by the whole middleware chain (issue 8, B3): the
// filesystem middleware offloads a 250k-character user message in the
// retry as in the first attempt, so the run recovers.
func TestOverflowRetryGoesThroughTheMiddleware(t *testing.T) {
	e := newEnv(t, withFiles(), withSummary(func(c *deep.SummarizationConfig) { c.KeepMessages = 4 }))
	e.srv.Script("main", modeltest.Text("a"))
	prior := e.run(agent.RunInput{Input: priorMessages(8)}).must(t)
	prior.finished(t, agent.StatusCompleted)

	big := "BIG " + strings.Repeat("x", 250000)
	e.srv.Script("main", overflowTurn(), fitting(200000, modeltest.Text("ok")))
	e.srv.Script("main/summarizer", summaries(1, 0)...)
	tr := e.run(agent.RunInput{ThreadID: prior.res.ThreadID, Input: []string{big}}).must(t)
	tr.checkEnvelope(t, 1)
	if er, ok := tr.last().(agent.RunError); ok {
		t.Fatalf("run failed: %+v", er)
	}
	tr.finished(t, agent.StatusCompleted)
	if n := len(summarizedEvents(tr)); n != 1 {
		t.Errorf("%d summaries, want 1", n)
	}
	reqs := e.srv.Requests("main")
	if len(reqs) != 3 {
		t.Fatalf("%d agent requests, want 1 + 2", len(reqs))
	}
	retry := requestMessages(reqs[2])
	if len(retry) < 3 || !strings.HasPrefix(retry[1], compacted) {
		t.Fatalf("retry = %.200q", retry)
	}
	last := retry[len(retry)-1]
	if !strings.HasPrefix(last, "user: [This message is 250004 characters long") || !strings.Contains(last, "/conversation_history/") {
		t.Errorf("the huge message was not offloaded in the retry: %.200q", last)
	}
	// The log keeps the full text.
	msgs := e.thread(tr.res.ThreadID).Messages
	if got := msgs[len(msgs)-2].Content; got != big {
		t.Errorf("stored message is %d chars, want the original", len(got))
	}
}

// TestSummaryThatDoesNotShrinkIsNotKept: when the summary would not make
// the context smaller, a context overflow ends the run as before and the
// thread is unchanged (issue 8, B3).
func TestSummaryThatDoesNotShrinkIsNotKept(t *testing.T) {
	cases := []struct {
		name  string
		prior []string
		// summary is the summarizer's answer; "" = it must not be asked.
		summary string
	}{
		{"prefix smaller than any summary", []string{"p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8"}, ""},
		{"summary longer than the prefix", priorMessages(8)[:6], strings.Repeat("long summary ", 400)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, withFiles(), withSummary(func(sc *deep.SummarizationConfig) { sc.KeepMessages = 2 }))
			e.srv.Script("main", modeltest.Text("a"))
			prior := e.run(agent.RunInput{Input: c.prior}).must(t)
			before := e.thread(prior.res.ThreadID)

			e.srv.Script("main", overflowTurn(), modeltest.Text("should not be asked"))
			if c.summary != "" {
				e.srv.Script("main/summarizer", modeltest.Text(c.summary))
			}
			tr := e.run(agent.RunInput{ThreadID: prior.res.ThreadID, Input: []string{"next"}}).must(t)
			tr.checkEnvelope(t, 1)
			er := runError(t, tr)
			if er.Code != string(model.CodeContextOverflow) || er.Retryable {
				t.Errorf("error %+v", er)
			}
			if n := e.srv.Count("main"); n != 2 {
				t.Errorf("%d agent requests, want 1 + 1", n)
			}
			if n := e.srv.Remaining("main/summarizer"); n != 0 {
				t.Errorf("%d summarizer turns left", n)
			}
			if n := len(summarizedEvents(tr)); n != 0 {
				t.Errorf("%d summarized events", n)
			}
			td := e.thread(tr.res.ThreadID)
			if td.Summary != nil {
				t.Errorf("summary kept: %+v", td.Summary)
			}
			if len(td.Messages) != len(before.Messages)+1 {
				t.Errorf("log has %d messages, want %d + the input", len(td.Messages), len(before.Messages))
			}
			if _, ok := e.readFile(fmt.Sprintf("/conversation_history/%s.md", tr.res.ThreadID)); ok {
				t.Error("a transcript was written")
			}
		})
	}
}
