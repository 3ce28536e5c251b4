package agentd

import (
	"context"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/plumbhq/plumb/internal/daemon/tracing"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// daemonSpans is one daemon's tracing, recorded in memory.
type daemonSpans struct {
	exp *tracetest.InMemoryExporter
	tr  *tracing.Tracing
}

func newDaemonSpans(t *testing.T) daemonSpans {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return daemonSpans{exp: exp, tr: tracing.New(tp)}
}

func (d daemonSpans) spans() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range d.exp.GetSpans() {
		out = append(out, s.Snapshot())
	}
	return out
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// TestOneTracePerRunAcrossDaemons: with both daemons traced (each its own
// provider, as two processes are), a run that works in a sandbox is one
// trace: agentd's Run server span, the run span below it, a span per step
// below that, the model and tool calls below their steps, agentd's calls
// to sandboxd below the tool calls, and sandboxd's server span of each call
// below agentd's client span.
func TestOneTracePerRunAcrossDaemons(t *testing.T) {
	agentdSpans, sandboxdSpans := newDaemonSpans(t), newDaemonSpans(t)
	w := sandboxsvctest.StartWorker(t, sandbox.Config{}, sandboxdSpans.tr.ServerOptions()...)
	s := startTracedStack(t, w, "backends: {default: sandbox}\n", agentdSpans.tr)
	s.model.Script("main",
		modeltest.Calls(mcall("w1", "write_file", `{"file_path":"/workspace/a.txt","content":"traced"}`)),
		modeltest.Calls(mcall("e1", "execute", `{"command":"cat /workspace/a.txt"}`)),
		modeltest.Text("done"),
	)
	thread, results := s.mustRun(input("", "Write a file and show it."))
	wantResult(t, results, "w1", false)
	wantResult(t, results, "e1", false, "traced")

	// The client sees the stream end a moment before the run span and the
	// RPC's server span end.
	// So does sandboxd's span of the last call (the workspace snapshot
	// at the run's end) just after agentd's.
	var as, ss []sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		as, ss = agentdSpans.spans(), sandboxdSpans.spans()
		runs, rpcs := countNamed(as, agent.SpanRun), countNamed(as, "plumb.v1.AgentService/Run")
		calls, served := 0, 0
		for _, sp := range as {
			if strings.HasPrefix(sp.Name(), "plumb.v1.SandboxService/") && sp.SpanKind() == trace.SpanKindClient {
				calls++
			}
		}
		for _, sp := range ss {
			if sp.SpanKind() == trace.SpanKindServer {
				served++
			}
		}
		if runs == 1 && rpcs == 1 && served >= calls {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%d run spans, %d Run RPC spans, %d of %d sandboxd calls served ended, want 1, 1 and all", runs, rpcs, served, calls)
		}
	}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, sp := range as {
		byID[sp.SpanContext().SpanID()] = sp
	}
	// below reports whether sp descends from ancestor within agentd.
	below := func(sp, ancestor sdktrace.ReadOnlySpan) bool {
		for p := byID[sp.Parent().SpanID()]; p != nil; p = byID[p.Parent().SpanID()] {
			if p.SpanContext().SpanID() == ancestor.SpanContext().SpanID() {
				return true
			}
		}
		return false
	}
	parentIs := func(sp, parent sdktrace.ReadOnlySpan) {
		t.Helper()
		if sp.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("%s %v has parent %s, want %s (%s)", sp.Name(), sp.Attributes(), sp.Parent().SpanID(), parent.Name(), parent.SpanContext().SpanID())
		}
	}

	var server, run sdktrace.ReadOnlySpan
	steps := map[string]sdktrace.ReadOnlySpan{}
	tools := map[string]sdktrace.ReadOnlySpan{}
	var models, clients []sdktrace.ReadOnlySpan
	for _, sp := range as {
		switch {
		case sp.Name() == "plumb.v1.AgentService/Run" && sp.SpanKind() == trace.SpanKindServer:
			server = sp
		case sp.Name() == agent.SpanRun:
			run = sp
		case sp.Name() == agent.SpanStep:
			steps[spanAttr(sp, agent.AttrStep)] = sp
		case sp.Name() == agent.SpanModelCall:
			models = append(models, sp)
		case sp.Name() == agent.SpanToolCall:
			tools[spanAttr(sp, agent.AttrToolCallID)] = sp
		case strings.HasPrefix(sp.Name(), "plumb.v1.SandboxService/") && sp.SpanKind() == trace.SpanKindClient:
			clients = append(clients, sp)
		default:
			t.Errorf("unexpected agentd span %s (%v)", sp.Name(), sp.SpanKind())
		}
	}
	if server == nil || run == nil || len(steps) != 3 || len(models) != 3 || len(tools) != 2 || tools["w1"] == nil || tools["e1"] == nil {
		t.Fatalf("agentd spans: server %v, run %v, steps %v, %d model calls, tools %v", server != nil, run != nil, steps, len(models), tools)
	}
	id := server.SpanContext().TraceID()
	for _, sp := range append(as, ss...) {
		if sp.SpanContext().TraceID() != id {
			t.Errorf("span %s is in trace %s, want the run's %s", sp.Name(), sp.SpanContext().TraceID(), id)
		}
	}
	if server.Parent().IsValid() {
		t.Errorf("the Run server span has a parent %v; the client sent no trace context", server.Parent())
	}
	parentIs(run, server)
	if spanAttr(run, agent.AttrThreadID) != thread || spanAttr(run, agent.AttrRunStatus) != "COMPLETED" {
		t.Errorf("run span attributes %v", run.Attributes())
	}
	for n, st := range steps {
		parentIs(st, run)
		for _, m := range models {
			if spanAttr(m, agent.AttrStep) == n {
				parentIs(m, st)
			}
		}
	}
	parentIs(tools["w1"], steps["1"])
	parentIs(tools["e1"], steps["2"])
	for _, tl := range tools {
		if spanAttr(tl, agent.AttrToolIsError) != "false" {
			t.Errorf("tool span %v", tl.Attributes())
		}
	}

	// agentd → sandboxd: every call agentd made is below the run, and is
	// served under a sandboxd span whose parent is the call's span. The
	// sandboxd server span is the sandbox operation; the Docker Engine
	// calls it makes are below it.
	served := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	operations := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var engine []sdktrace.ReadOnlySpan
	for _, sp := range ss {
		switch {
		case sp.SpanKind() == trace.SpanKindServer && sp.Parent().IsRemote():
			served[sp.Parent().SpanID()] = sp
			operations[sp.SpanContext().SpanID()] = sp
		case sp.SpanKind() == trace.SpanKindClient && !sp.Parent().IsRemote():
			engine = append(engine, sp)
		default:
			t.Errorf("sandboxd span %s: kind %v, remote parent %v", sp.Name(), sp.SpanKind(), sp.Parent().IsRemote())
		}
	}
	if len(clients) == 0 || len(served) != len(clients) {
		t.Errorf("%d agentd calls to sandboxd, %d sandboxd server spans; want one each per call", len(clients), len(served))
	}
	createdContainer := false
	for _, sp := range engine {
		op := operations[sp.Parent().SpanID()]
		if op == nil {
			t.Errorf("Docker Engine call %s is not below a sandboxd operation", sp.Name())
			continue
		}
		if op.Name() == "plumb.v1.SandboxService/CreateSandbox" && strings.HasSuffix(sp.Name(), "/containers/create") {
			createdContainer = true
		}
	}
	if !createdContainer {
		t.Errorf("no container create below CreateSandbox; Engine calls %v", names(engine))
	}
	var sawWrite, sawExecute bool
	for _, c := range clients {
		switch {
		case c.Name() == "plumb.v1.SandboxService/SnapshotSandbox":
			// The workspace snapshot at the run's end is taken after
			// the run span ended (runhost's OnRunEnd), in its trace.
			if c.SpanContext().TraceID() != run.SpanContext().TraceID() {
				t.Errorf("agentd call %s is not in the run's trace", c.Name())
			}
		case !below(c, run):
			t.Errorf("agentd call %s is not below the run span", c.Name())
		}
		sp := served[c.SpanContext().SpanID()]
		if sp == nil || sp.Name() != c.Name() {
			t.Errorf("agentd call %s: sandboxd span %v, want one of the same name below it", c.Name(), sp)
			continue
		}
		switch c.Name() {
		case "plumb.v1.SandboxService/Write":
			sawWrite = below(c, tools["w1"])
		case "plumb.v1.SandboxService/Execute", "plumb.v1.SandboxService/ExecuteStream":
			sawExecute = below(c, tools["e1"])
		}
	}
	if !sawWrite || !sawExecute {
		t.Errorf("sandboxd Write below w1: %v, Execute below e1: %v; calls %v", sawWrite, sawExecute, names(clients))
	}
}

func countNamed(ss []sdktrace.ReadOnlySpan, name string) int {
	n := 0
	for _, s := range ss {
		if s.Name() == name {
			n++
		}
	}
	return n
}

func names(ss []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name())
	}
	return out
}
