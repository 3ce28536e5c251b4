package agentd

import (
	"errors"
	"io"
	"strings"
	"testing"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// TestExecuteOutputStreams: execute in a real sandbox sends the command's
// output as tool_output events while it runs. The first command prints a
// line and then waits for a file that this test creates only once it has
// seen that line in a tool_output event: it can finish only if its output
// was streamed before it ended. The second prints more than the streaming
// cap: the stream stops at the cap with a truncated event, the result is
// bounded as always.
func TestExecuteOutputStreams(t *testing.T) {
	w := sandboxsvctest.StartWorker(t, sandbox.Config{})
	// A route puts the composite backend between the tool and the sandbox
	// (and the offload of e2's output into the route).
	s := startStack(t, w, "backends: {default: sandbox, routes: {/large_tool_results/: {type: state}}}\n")
	wait := `echo ready; for i in $(seq 1 1200); do [ -f /tmp/go ] && { echo "saw go"; exit 0; }; sleep 0.1; done; echo "never saw go"; exit 3`
	big := `head -c 1200000 /dev/zero | tr '\0' 'x'; echo; echo end`
	s.model.Script("main",
		modeltest.Calls(mcall("e1", "execute", `{"command":`+quote(wait)+`}`)),
		modeltest.Calls(mcall("e2", "execute", `{"command":`+quote(big)+`}`)),
		modeltest.Text("done"),
	)
	stream, err := s.c.Run(s.ctx(), input("", "Run them."))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*strings.Builder{"e1": {}, "e2": {}}
	var evs []*plumbv1.Event
	released := false
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ev := m.GetEvent()
		evs = append(evs, ev)
		if o := ev.GetToolOutput(); o != nil {
			if o.GetName() != "execute" || out[o.GetId()] == nil {
				t.Fatalf("tool_output %v", o)
			}
			if s.results(evs)[o.GetId()] != nil {
				t.Errorf("output of %s after its result", o.GetId())
			}
			out[o.GetId()].WriteString(o.GetText())
			if !released && strings.Contains(out["e1"].String(), "ready\n") {
				released = true
				s.sandboxExec("touch /tmp/go")
			}
		}
	}
	if last := evs[len(evs)-1]; last.GetRunFinished().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("run ended with %v", last)
	}
	results := s.results(evs)
	wantResult(t, results, "e1", false, "ready", "saw go")
	if got := out["e1"].String(); got != "ready\nsaw go\n" {
		t.Errorf("streamed output of e1 = %q", got)
	}
	var truncated []bool
	for _, ev := range evs {
		if o := ev.GetToolOutput(); o != nil && o.GetId() == "e2" {
			truncated = append(truncated, o.GetTruncated())
		}
	}
	n := out["e2"].Len()
	if len(truncated) == 0 || !truncated[len(truncated)-1] || n != agent.StreamOutputCap || strings.Trim(out["e2"].String(), "x") != "" {
		t.Errorf("e2 streamed %d bytes in %d events (last truncated: %v), want the cap %d of x", n, len(truncated), truncated, agent.StreamOutputCap)
	}
	wantResult(t, results, "e2", false, "Exit code 0")
}

// results indexes the tool_result events of evs by call id.
func (s *stack) results(evs []*plumbv1.Event) map[string]*plumbv1.ToolResult {
	out := map[string]*plumbv1.ToolResult{}
	for _, ev := range evs {
		if r := ev.GetToolResult(); r != nil {
			out[r.GetId()] = r
		}
	}
	return out
}

// sandboxExec runs cmd in the worker's only sandbox, from outside the run.
func (s *stack) sandboxExec(cmd string) {
	s.t.Helper()
	ctx := s.ctx()
	list, err := s.worker.Client.ListSandboxes(ctx, &plumbv1.ListSandboxesRequest{})
	if err != nil || len(list.GetSandboxes()) != 1 {
		s.t.Fatalf("sandboxes %v, %v", list.GetSandboxes(), err)
	}
	r, err := s.worker.Client.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: list.GetSandboxes()[0].GetId(), Command: &plumbv1.Command{Command: cmd}})
	if err != nil || r.GetResult().GetExitCode() != 0 {
		s.t.Fatalf("%s: %v, %v", cmd, r, err)
	}
}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}

// TestExecuteOutputHeldByRedaction: with a post hook that redacts execute
// results, the output is not streamed while the command runs (it would
// pass the hook by): no tool_output event, and the result is redacted.
func TestExecuteOutputHeldByRedaction(t *testing.T) {
	w := sandboxsvctest.StartWorker(t, sandbox.Config{})
	s := startStack(t, w, "backends: {default: sandbox}\nhooks:\n"+
		`  - {name: mask-keys, phase: post, tools: [execute], match: {regex: 'sk-[A-Za-z0-9]{20,}'}, action: redact, replacement: "[redacted]"}`+"\n")
	s.model.Script("main",
		modeltest.Calls(mcall("e1", "execute", `{"command":"echo sk-AAAAAAAAAAAAAAAAAAAAAAAA; echo fine"}`)),
		modeltest.Text("done"),
	)
	evs, results, err := s.run(input("", "Print it."))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if o := ev.GetToolOutput(); o != nil {
			t.Errorf("tool_output streamed past the redaction hook: %q", o.GetText())
		}
	}
	if r := wantResult(t, results, "e1", false, "[redacted]", "fine"); r != nil && strings.Contains(r.GetContent(), "sk-AAAA") {
		t.Errorf("result not redacted: %q", r.GetContent())
	}
}
