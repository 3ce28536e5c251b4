package deep_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// pairingError checks a request the way OpenAI does: every assistant
// message with tool calls must be followed by one tool message per call,
// and a tool message must answer a call of the assistant message before
// its block. It returns "" for a valid request.
func pairingError(msgs []goopenai.ChatCompletionMessage) string {
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role == goopenai.ChatMessageRoleTool {
			return fmt.Sprintf("messages[%d]: tool message %q does not follow an assistant message with tool_calls", i, m.ToolCallID)
		}
		if m.Role != goopenai.ChatMessageRoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		open := make(map[string]bool)
		for _, c := range m.ToolCalls {
			open[c.ID] = true
		}
		j := i + 1
		for ; j < len(msgs) && msgs[j].Role == goopenai.ChatMessageRoleTool; j++ {
			if !open[msgs[j].ToolCallID] {
				return fmt.Sprintf("messages[%d]: tool message %q answers no open tool call", j, msgs[j].ToolCallID)
			}
			delete(open, msgs[j].ToolCallID)
		}
		if len(open) > 0 {
			return fmt.Sprintf("messages[%d]: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id' (missing %v)", i, open)
		}
		i = j - 1
	}
	return ""
}

// strict plays t only when the request pairs every tool call with its
// result, and otherwise answers 400 like the OpenAI endpoint.
func strict(t modeltest.Turn) modeltest.Turn {
	return modeltest.Dynamic(func(r modeltest.Request) modeltest.Turn {
		if msg := pairingError(r.Body.Messages); msg != "" {
			return modeltest.HTTPError(http.StatusBadRequest, nil, modeltest.ErrorBody("invalid_request_error", nil, msg))
		}
		return t
	})
}

// TestCancelledCallIsAnsweredWithoutPatchToolCalls: with
// patch_tool_calls disabled, a call left dangling by a cancelled run is
// still answered in every later request (issue 8, B11), so the thread
// stays usable against an endpoint that rejects unpaired calls.
func TestCancelledCallIsAnsweredWithoutPatchToolCalls(t *testing.T) {
	off := false
	e := newEnv(t, withConfig(func(c *deep.Config) { c.Middleware.PatchToolCalls = &off }))
	e.srv.Script("main", strict(modeltest.Calls(call("c1", "sleep", `{"ms":600000}`), call("c2", "echo", `{"text":"done"}`))))
	// The client cancels its stream once c2 has its result; c1 sleeps on.
	ctx, cancel := context.WithCancel(e.ctx())
	defer cancel()
	s, err := e.c.Run(ctx, runRequest(input("go")))
	if err != nil {
		t.Fatal(err)
	}
	var thread string
	for {
		m, err := s.Recv()
		if err != nil {
			break
		}
		if thread == "" {
			thread = m.GetEvent().GetThreadId()
		}
		if r := m.GetEvent().GetToolResult(); r != nil && r.GetId() == "c2" {
			cancel()
		}
	}
	// The run ends on its own once the tool saw the cancellation; the
	// poll's limit is only a hang guard.
	for deadline := time.Now().Add(2 * time.Minute); e.thread(thread).LastRun.Status == agent.StatusRunning && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if st := e.thread(thread).LastRun.Status; st != agent.StatusCancelled {
		t.Fatalf("run record %s, want cancelled", st)
	}
	res := &agent.RunResult{ThreadID: thread}
	if d := agent.DanglingCalls(e.thread(res.ThreadID).Messages); len(d) != 1 || d[0].Call.ID != "c1" {
		t.Fatalf("dangling calls %+v, want c1", d)
	}

	for i, text := range []string{"next", "again"} {
		e.srv.Script("main", strict(modeltest.Text("ok")))
		tr := e.run(agent.RunInput{ThreadID: res.ThreadID, Input: []string{text}}).must(t)
		if _, ok := tr.last().(agent.RunError); ok {
			t.Fatalf("run %d failed: %+v", i+2, tr.last())
		}
		tr.finished(t, agent.StatusCompleted)
		got := requestMessages(e.srv.Requests("main")[i+1])
		want := []string{
			"user: go",
			"assistant:  [c1 sleep] [c2 echo]",
			"tool(c1): Tool call sleep (c1) did not complete: the run stopped before it returned a result.",
			"tool(c2): done",
			"user: next",
		}
		if i == 1 {
			want = append(want, "assistant: ok", "user: again")
		}
		if got = got[1:]; !slices.Equal(got, want) { // after the system prompt
			t.Errorf("request %d =\n%q\nwant\n%q", i+2, got, want)
		}
	}
	// The log is left as it was: the repair lives in the requests only.
	if d := agent.DanglingCalls(e.thread(res.ThreadID).Messages); len(d) != 1 {
		t.Errorf("dangling calls %+v", d)
	}
	for _, m := range e.thread(res.ThreadID).Messages {
		if m.Role == model.RoleTool && m.ToolCallID == "c1" {
			t.Errorf("a result for c1 was stored: %+v", m)
		}
	}
}
