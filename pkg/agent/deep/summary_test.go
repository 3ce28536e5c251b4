package deep_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

func withSummary(f func(*deep.SummarizationConfig)) option {
	return withConfig(func(c *deep.Config) {
		c.Middleware.Summarization.Model = "fast"
		f(&c.Middleware.Summarization)
	})
}

// echoRounds scripts n steps that each echo a 2,000-char text, then "ok".
func echoRounds(n int) []modeltest.Turn {
	var turns []modeltest.Turn
	for i := range n {
		turns = append(turns, modeltest.Calls(call(fmt.Sprintf("e%d", i+1), "echo", `{"text":"`+strings.Repeat(string(rune('a'+i)), 2000)+`"}`)))
	}
	return append(turns, modeltest.Text("ok"))
}

func summaries(n int, latency time.Duration) []modeltest.Turn {
	var turns []modeltest.Turn
	for i := range n {
		tu := modeltest.Text(fmt.Sprintf("SUMMARY-%d", i+1))
		tu.FirstByteDelay = latency
		turns = append(turns, tu)
	}
	return turns
}

func summarizedEvents(tr *transcript) []agent.Summarized {
	var out []agent.Summarized
	for _, ev := range tr.events {
		if s, ok := ev.Payload.(agent.Summarized); ok {
			out = append(out, s)
		}
	}
	return out
}

// priorMessages are n user messages of 500 chars each: enough history for
// a summary to shrink the context (a summary that would not is skipped).
func priorMessages(n int) []string {
	var in []string
	for i := range n {
		in = append(in, fmt.Sprintf("prior %d %s", i, strings.Repeat("p", 500)))
	}
	return in
}

// tailEvict is the size in chars above which a kept tool result is
// evicted from a request after a summary that left it too big.
const tailEvict = 20000

const compacted = "user: The earlier part of this conversation was compacted"

var summaryScenarios = []scenario{
	{"49_summarization", func(t *testing.T) {
		e := newEnv(t, withFiles(), withSummary(func(c *deep.SummarizationConfig) { c.TriggerTokens, c.KeepMessages = 3000, 4 }))
		e.srv.Script("main", echoRounds(6)...)
		e.srv.Script("main/summarizer", summaries(6, 0)...)
		tr := e.run(input("start")).must(t)
		tr.checkEnvelope(t, 1)
		tr.finished(t, agent.StatusCompleted)
		sums := summarizedEvents(tr)
		if len(sums) == 0 {
			t.Fatal("no summarized event")
		}
		// summarized precedes the message of the call that used it.
		si := tr.index(func(ev agent.Event) bool { _, ok := ev.Payload.(agent.Summarized); return ok })
		mi := tr.index(func(ev agent.Event) bool {
			_, ok := ev.Payload.(agent.AssistantMessage)
			return ok && ev.Sequence > tr.events[si].Sequence
		})
		if mi < 0 {
			t.Fatal("no message after summarized")
		}
		path := "/conversation_history/" + tr.res.ThreadID + ".md"
		var req modeltest.Request
		for _, r := range e.srv.Requests("main") {
			if msgs := requestMessages(r); len(msgs) > 1 && strings.HasPrefix(msgs[1], compacted) {
				req = r
				break
			}
		}
		msgs := requestMessages(req)
		if len(msgs) < 3 || !strings.HasPrefix(msgs[0], "system: ") || !strings.Contains(msgs[1], path) || !strings.Contains(msgs[1], "<summary>\nSUMMARY-1\n</summary>") {
			t.Fatalf("request after summary = %q", msgs)
		}
		if !strings.HasPrefix(msgs[2], "assistant: ") || !strings.HasPrefix(msgs[len(msgs)-1], "tool(") {
			t.Errorf("kept tail %q", msgs[2:])
		}
		td := e.thread(tr.res.ThreadID)
		if len(td.Messages) != 1+2*6+1 {
			t.Errorf("log has %d messages", len(td.Messages))
		}
		file, ok := e.readFile(path)
		if !ok || !strings.Contains(file, "## Summarized at ") {
			t.Fatalf("transcript %v:\n%.300s", ok, file)
		}
		for i := 0; i < sums[0].CutoffIndex; i++ {
			if !strings.Contains(file, fmt.Sprintf(`<message index="%d" role="%s"`, i, td.Messages[i].Role)) {
				t.Errorf("transcript lacks message %d", i)
			}
		}
		if s := sums[0]; s.TranscriptPath != path || s.Fallback || s.MessagesSummarized != s.CutoffIndex || s.TokensBefore < 3000 {
			t.Errorf("summarized %+v", s)
		}
		if td.Summary == nil || td.Summary.Cutoff != sums[len(sums)-1].CutoffIndex {
			t.Errorf("stored summary %+v", td.Summary)
		}
		// Usage of the summarizer is reported with purpose SUMMARY.
		found := false
		for _, ev := range tr.events {
			if u, ok := ev.Payload.(agent.UsageReport); ok && u.Purpose == agent.PurposeSummary && u.Model == fastModel {
				found = true
			}
		}
		if !found {
			t.Error("no SUMMARY usage event")
		}
	}},
	{"50_cut_before_batch", func(t *testing.T) {
		e := newEnv(t, withFiles(), withSummary(func(c *deep.SummarizationConfig) { c.TriggerTokens, c.KeepMessages, c.SummaryMaxTokens = 12500, 4, 100 }))
		e.srv.Script("main",
			modeltest.Calls(call("c1", "echo", `{"text":"1"}`), call("c2", "echo", `{"text":"2"}`), call("c3", "echo", `{"text":"3"}`)),
			modeltest.Calls(call("c4", "echo", `{"text":"`+strings.Repeat("q", 8000)+`"}`)),
			modeltest.Text("ok"))
		e.srv.Script("main/summarizer", summaries(1, 0)...)
		tr := e.run(input(strings.Repeat("u", 40000))).must(t)
		tr.finished(t, agent.StatusCompleted)
		if n := len(summarizedEvents(tr)); n != 1 {
			t.Fatalf("%d summaries", n)
		}
		msgs := requestMessages(e.srv.Requests("main")[2])
		want := []string{"assistant:  [c1 echo] [c2 echo] [c3 echo]", "tool(c1): 1", "tool(c2): 2", "tool(c3): 3"}
		if len(msgs) < 6 || !strings.HasPrefix(msgs[1], compacted) {
			t.Fatalf("request 3 = %.200q", msgs)
		}
		for i, w := range want {
			if !strings.HasPrefix(msgs[2+i], w) {
				t.Errorf("kept[%d] = %.80q, want %q", i, msgs[2+i], w)
			}
		}
	}},
	{"52_bounded_summarizer_input", func(t *testing.T) {
		e := newEnv(t, withFiles(), withSummary(func(c *deep.SummarizationConfig) {
			c.TriggerTokens, c.KeepMessages, c.MaxSummarizerInputTokens = 3000, 4, 8000
		}))
		var in []string
		for i := range 100 {
			in = append(in, fmt.Sprintf("message %03d %s", i, strings.Repeat("m", 4000)))
		}
		e.srv.Script("main", modeltest.Text("ok"))
		e.srv.Script("main/summarizer", summaries(1, 0)...)
		e.run(agent.RunInput{Input: in}).must(t).finished(t, agent.StatusCompleted)
		reqs := e.srv.Requests("main/summarizer")
		if len(reqs) != 1 {
			t.Fatalf("%d summarizer requests", len(reqs))
		}
		body := reqs[0].Body.Messages[1].Content
		if n := len([]rune(body)); n > 32000 {
			t.Errorf("summarizer input %d chars", n)
		}
		if !strings.Contains(body, "<first_user_message>\nmessage 000 ") || !strings.Contains(body, "earlier messages omitted; see transcript]") {
			t.Errorf("summarizer input lacks the first message or the marker: %.300s", body)
		}
		if !strings.Contains(reqs[0].Body.Messages[0].Content, "## User requirements and constraints") {
			t.Error("summary prompt lacks its sections")
		}
	}},
	{"53_54_56_repeated_summaries", func(t *testing.T) {
		e := newEnv(t, withFiles(), withSummary(func(c *deep.SummarizationConfig) { c.TriggerTokens, c.KeepMessages = 3000, 4 }))
		e.srv.Script("main", echoRounds(10)...)
		e.srv.Script("main/summarizer", summaries(10, 200*time.Millisecond)...)
		tr := e.run(input("start")).must(t)
		tr.finished(t, agent.StatusCompleted)
		sums := summarizedEvents(tr)
		if len(sums) < 2 {
			t.Fatalf("%d summaries, want ≥ 2", len(sums))
		}
		for i, s := range sums {
			if i > 0 && s.CutoffIndex <= sums[i-1].CutoffIndex {
				t.Errorf("cutoffs do not increase: %d then %d", sums[i-1].CutoffIndex, s.CutoffIndex)
			}
			// 54: the compaction halves the context, quickly.
			if s.TokensAfter > s.TokensBefore/2 {
				t.Errorf("summary %d: tokens %d → %d", i, s.TokensBefore, s.TokensAfter)
			}
			if s.Duration > time.Minute { // a hang guard; speed is the benchmarks' job
				t.Errorf("summary %d took %v", i, s.Duration)
			}
		}
		file, _ := e.readFile("/conversation_history/" + tr.res.ThreadID + ".md")
		if n := strings.Count(file, "## Summarized at "); n != len(sums) {
			t.Errorf("%d blocks for %d summaries", n, len(sums))
		}
		if n := strings.Count(file, `<message index="1" `); n != 1 {
			t.Errorf("message 1 appears in %d blocks (ranges overlap)", n)
		}
		second := e.srv.Requests("main/summarizer")[1].Body.Messages[1].Content
		if !strings.Contains(second, "<previous_summary>\nSUMMARY-1\n</previous_summary>") {
			t.Errorf("2nd summarizer input lacks the 1st summary: %.200s", second)
		}
		// 56: one context_usage reminder per crossing, re-armed after each
		// summary.
		var marks []string
		for _, ev := range tr.events {
			switch p := ev.Payload.(type) {
			case agent.ToolResultEvent:
				if strings.Contains(p.Content, "of the size at which older messages get summarized") {
					marks = append(marks, "R")
				}
			case agent.Summarized:
				marks = append(marks, "S")
			}
		}
		seq := strings.Join(marks, "")
		if !strings.HasPrefix(seq, "RS") || strings.Contains(seq, "RR") {
			t.Errorf("reminders and summaries: %s", seq)
		}
		if strings.Count(seq, "R") < 2 {
			t.Errorf("reminder not re-armed: %s", seq)
		}
	}},
	{"55_summarizer_fallback", func(t *testing.T) {
		e := newEnv(t, withFiles(), withSummary(func(c *deep.SummarizationConfig) { c.TriggerTokens, c.KeepMessages = 3000, 4 }))
		e.srv.Script("main", echoRounds(4)...)
		var fails []modeltest.Turn
		for range 8 {
			fails = append(fails, modeltest.HTTPError(500, nil, ""))
		}
		e.srv.Script("main/summarizer", fails...)
		tr := e.run(input("first request")).must(t)
		tr.finished(t, agent.StatusCompleted)
		sums := summarizedEvents(tr)
		if len(sums) == 0 || !sums[0].Fallback {
			t.Fatalf("summaries %+v", sums)
		}
		td := e.thread(tr.res.ThreadID)
		if !strings.Contains(td.Summary.Text, "first request") || !strings.Contains(td.Summary.Text, "echo ×") {
			t.Errorf("mechanical summary %q", td.Summary.Text)
		}
	}},
	{"57_forced_summary_on_overflow", func(t *testing.T) {
		e := newEnv(t, withFiles(), withSummary(func(c *deep.SummarizationConfig) { c.KeepMessages = 4 }))
		e.srv.Script("main", modeltest.Text("a"))
		in := priorMessages(11)
		tr := e.run(agent.RunInput{Input: in}).must(t)
		overflow := modeltest.HTTPError(400, nil, modeltest.ErrorBody("invalid_request_error", "context_length_exceeded", "This model's maximum context length is 10 tokens."))
		e.srv.Script("main", overflow, modeltest.Text("ok"))
		e.srv.Script("main/summarizer", summaries(1, 0)...)
		tr2 := e.run(agent.RunInput{ThreadID: tr.res.ThreadID, Input: []string{"next"}}).must(t)
		tr2.checkEnvelope(t, 1)
		if n := len(summarizedEvents(tr2)); n != 1 {
			t.Errorf("%d summaries", n)
		}
		if m := firstMessage(t, tr2); m.Text != "ok" {
			t.Errorf("message %q", m.Text)
		}
		if n := e.srv.Count("main"); n != 3 {
			t.Errorf("%d agent requests in total, want 1 + 2", n)
		}
		tr2.finished(t, agent.StatusCompleted)
	}},
	{"summary_counts_tail_eviction", func(t *testing.T) {
		// A summary whose kept tail holds a result too big for the trigger:
		// step 8 evicts it from the very request the summary is made for,
		// so tokens_after must not count it.
		e := newEnv(t, withFiles(), withSummary(func(c *deep.SummarizationConfig) { c.TriggerTokens, c.KeepMessages = 5000, 2 }))
		e.srv.Script("main", modeltest.Text("a"))
		tr := e.run(agent.RunInput{Input: priorMessages(11)}).must(t)
		var big strings.Builder
		for i := range 1000 {
			fmt.Fprintf(&big, "line %04d %s\n", i, strings.Repeat("x", 40))
		}
		e.writeFile("/big.txt", big.String())
		e.srv.Script("main", modeltest.Calls(call("r1", "read_file", `{"file_path":"/big.txt"}`)), modeltest.Text("ok"))
		e.srv.Script("main/summarizer", summaries(1, 0)...)
		tr2 := e.run(agent.RunInput{ThreadID: tr.res.ThreadID, Input: []string{"next"}}).must(t)
		tr2.finished(t, agent.StatusCompleted)
		sums := summarizedEvents(tr2)
		if len(sums) != 1 {
			t.Fatalf("%d summaries", len(sums))
		}
		reqs := e.srv.Requests("main")
		msgs := requestMessages(reqs[len(reqs)-1])
		if len(msgs) != 4 || !strings.HasPrefix(msgs[1], compacted) || !strings.Contains(msgs[3], "was too large to show") {
			t.Fatalf("request after the summary = %.200q", msgs)
		}
		read := 0
		for _, r := range tr2.events {
			if res, ok := r.Payload.(agent.ToolResultEvent); ok {
				read = len(res.Content)
			}
		}
		sent := 0
		for _, m := range msgs {
			sent += len(m)
		}
		// The estimate is about what was sent (give or take the tool
		// schemas and rounding), far from counting the evicted result.
		if s := sums[0]; read <= tailEvict || s.TokensAfter > sent/4+3000 || s.TokensAfter < sent/4-200 {
			t.Errorf("tokens_after %d; the request sent about %d tokens, the evicted result was %d chars", s.TokensAfter, sent/4, read)
		}
	}},
	{"58_overflow_after_forced_summary", func(t *testing.T) {
		e := newEnv(t, withFiles(), withSummary(func(c *deep.SummarizationConfig) { c.KeepMessages = 4 }))
		overflow := modeltest.HTTPError(400, nil, modeltest.ErrorBody("invalid_request_error", "context_length_exceeded", "too long"))
		in := priorMessages(12)
		e.srv.Script("main", overflow, overflow)
		e.srv.Script("main/summarizer", summaries(1, 0)...)
		tr := e.run(agent.RunInput{Input: in}).must(t)
		er := runError(t, tr)
		if er.Code != string(model.CodeContextOverflow) || er.Retryable {
			t.Errorf("error %+v", er)
		}
		if n := e.srv.Count("main"); n != 2 {
			t.Errorf("%d agent requests, want 2", n)
		}
	}},
}
