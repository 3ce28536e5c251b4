package deep_test

import (
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// toolCallDeltas returns the tool_call_delta events of a transcript.
func toolCallDeltas(tr *transcript) (out []agent.ToolCallDelta) {
	for _, ev := range tr.events {
		if d, ok := ev.Payload.(agent.ToolCallDelta); ok {
			out = append(out, d)
		}
	}
	return out
}

var streamScenarios = []scenario{
	{"tool_call_arguments_streamed", func(t *testing.T) {
		// The model writes a call's arguments in 12 fragments: clients get
		// them as they come, coalesced, ahead of the complete message.
		e := newEnv(t, withFiles())
		content := strings.Repeat("0123456789", 200)
		args := `{"file_path":"/long.txt","content":"` + content + `"}`
		e.srv.Script("main", modeltest.Calls(modeltest.Call{ID: "w1", Name: "write_file", Args: args, Fragments: 12}), modeltest.Text("ok"))
		tr := e.run(input("write")).must(t)
		tr.checkEnvelope(t, 1) // the deltas add up to the message's arguments
		tr.finished(t, agent.StatusCompleted)
		ds := toolCallDeltas(tr)
		if len(ds) < 3 || len(ds) > 12 {
			t.Fatalf("%d tool_call_delta events for 12 fragments of %d chars, want them coalesced in 256-char pieces", len(ds), len(args))
		}
		if d := ds[0]; d.ID != "w1" || d.Name != "write_file" || d.Index != 0 || d.Step != 1 || d.Attempt != 1 {
			t.Errorf("first delta %+v", d)
		}
		mi := tr.index(func(ev agent.Event) bool { _, ok := ev.Payload.(agent.AssistantMessage); return ok })
		last := tr.index(func(ev agent.Event) bool { d, ok := ev.Payload.(agent.ToolCallDelta); return ok && d == ds[len(ds)-1] })
		if last > mi {
			t.Errorf("a delta (%d) follows the message (%d)", last, mi)
		}
		for _, d := range ds[1:] {
			if d.ID != "" || d.Name != "" || d.Truncated {
				t.Errorf("later delta %+v", d)
			}
		}
	}},
	{"tool_call_arguments_capped", func(t *testing.T) {
		// Past StreamArgsCap the stream of a call stops, said so by its
		// last delta; the message still carries all of it.
		e := newEnv(t)
		args := `{"text":"` + strings.Repeat("é", agent.StreamArgsCap/2+100) + `"}`
		e.srv.Script("main", modeltest.Calls(modeltest.Call{ID: "x1", Name: "no_such_tool", Args: args, Fragments: 40}), modeltest.Text("ok"))
		tr := e.run(input("go")).must(t)
		tr.checkEnvelope(t, 1)
		ds := toolCallDeltas(tr)
		streamed := 0
		for i, d := range ds {
			streamed += len(d.Args)
			if d.Truncated != (i == len(ds)-1) {
				t.Errorf("delta %d of %d: truncated=%v", i, len(ds), d.Truncated)
			}
		}
		if streamed > agent.StreamArgsCap || streamed < agent.StreamArgsCap-4 {
			t.Errorf("streamed %d bytes of %d, want the cap %d", streamed, len(args), agent.StreamArgsCap)
		}
		if m := firstMessage(t, tr); len(m.ToolCalls) != 1 || m.ToolCalls[0].Args != args {
			t.Errorf("the message lost the arguments")
		}
	}},
}
