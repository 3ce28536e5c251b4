package deep_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// withTracing sends the runtime's spans to an in-memory exporter.
func withTracing(t *testing.T) (option, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return func(e *env) { e.tp = tp }, exp
}

type spanSet []sdktrace.ReadOnlySpan

func (ss spanSet) named(name string) spanSet {
	var out spanSet
	for _, s := range ss {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// where keeps the spans whose attribute key has the string value v.
func (ss spanSet) where(key, v string) spanSet {
	var out spanSet
	for _, s := range ss {
		if spanAttr(s, key).String() == v {
			out = append(out, s)
		}
	}
	return out
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// waitRuns returns the exported spans once n agent.run spans have ended
// (the stream ends with the terminal event, a moment before the span).
func waitRuns(t *testing.T, exp *tracetest.InMemoryExporter, n int) spanSet {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a hang guard
	for {
		var all spanSet
		for _, s := range exp.GetSpans() {
			all = append(all, s.Snapshot())
		}
		if len(all.named(agent.SpanRun)) >= n {
			return all
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d agent.run spans ended, want %d", len(all.named(agent.SpanRun)), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func only(t *testing.T, ss spanSet, what string) sdktrace.ReadOnlySpan {
	t.Helper()
	if len(ss) != 1 {
		t.Fatalf("%d %s spans, want 1: %v", len(ss), what, ss)
	}
	return ss[0]
}

func wantParent(t *testing.T, s, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("%s %v: parent %s in trace %s, want %s %s in trace %s", s.Name(), s.Attributes(), s.Parent().SpanID(), s.SpanContext().TraceID(),
			parent.Name(), parent.SpanContext().SpanID(), parent.SpanContext().TraceID())
	}
}

// TestSubagentSpans: a subagent is an agent.subagent span below its task
// call's span, with its own steps and model calls below it.
func TestSubagentSpans(t *testing.T) {
	opt, exp := withTracing(t)
	e := newEnv(t, opt)
	e.srv.Script("main", modeltest.Calls(task("t1", "general-purpose", "find X")), modeltest.Text("done"))
	e.srv.Script("main/general-purpose", modeltest.Text("X=42"))
	e.run(input("what is X?")).must(t).finished(t, agent.StatusCompleted)
	all := waitRuns(t, exp, 1)

	run := only(t, all.named(agent.SpanRun), "run")
	mainStep := only(t, all.named(agent.SpanStep).where(agent.AttrAgentPath, "main").where(agent.AttrStep, "1"), "main step 1")
	wantParent(t, mainStep, run)
	taskCall := only(t, all.named(agent.SpanToolCall).where(agent.AttrToolCallID, "t1"), "task call")
	wantParent(t, taskCall, mainStep)
	sub := only(t, all.named(agent.SpanSubagent), "subagent")
	wantParent(t, sub, taskCall)
	for key, want := range map[string]string{
		agent.AttrAgentName: "general-purpose", agent.AttrAgentPath: "main/general-purpose",
		agent.AttrParentToolCallID: "t1", agent.AttrSubagentStatus: "COMPLETED",
	} {
		if got := spanAttr(sub, key).String(); got != want {
			t.Errorf("subagent span %s = %q, want %q", key, got, want)
		}
	}
	subStep := only(t, all.named(agent.SpanStep).where(agent.AttrAgentPath, "main/general-purpose"), "subagent step")
	wantParent(t, subStep, sub)
	subModel := only(t, all.named(agent.SpanModelCall).where(agent.AttrAgentPath, "main/general-purpose"), "subagent model call")
	wantParent(t, subModel, subStep)
	if got := spanAttr(subModel, agent.AttrRequestModel).String(); got != smartModel {
		t.Errorf("subagent model %q, want %q", got, smartModel)
	}
}

// TestInterruptedRunSpans: a gated call's span says it interrupted and the
// run span ends INTERRUPTED; the Resume is a second agent.run span whose
// resumed step runs the call.
func TestInterruptedRunSpans(t *testing.T) {
	opt, exp := withTracing(t)
	e := newEnv(t, opt, withFiles(), gate(map[string]profile.InterruptRule{"write_file": {}}))
	e.srv.Script("main", modeltest.Calls(call("c1", "write_file", `{"file_path":"/a.txt","content":"x"}`)), modeltest.Text("ok"))
	tr := e.run(input("go")).must(t)
	in := tr.interrupted(t)
	e.resume(tr.res.ThreadID, in.InterruptID, decide("c1", agent.DecisionApprove)).must(t).finished(t, agent.StatusCompleted)
	all := waitRuns(t, exp, 2)

	first := only(t, all.named(agent.SpanRun).where(agent.AttrResumed, "false"), "first run")
	second := only(t, all.named(agent.SpanRun).where(agent.AttrResumed, "true"), "resumed run")
	if s := spanAttr(first, agent.AttrRunStatus).String(); s != "INTERRUPTED" {
		t.Errorf("first segment status %q", s)
	}
	if s := spanAttr(second, agent.AttrRunStatus).String(); s != "COMPLETED" {
		t.Errorf("resumed segment status %q", s)
	}
	if a, b := spanAttr(first, agent.AttrRunID).String(), spanAttr(second, agent.AttrRunID).String(); a == "" || a != b {
		t.Errorf("run ids %q, %q; want one run", a, b)
	}
	calls := all.named(agent.SpanToolCall).where(agent.AttrToolCallID, "c1")
	gated := only(t, calls.where(agent.AttrToolInterrupted, "true"), "gated call")
	ran := only(t, calls.where(agent.AttrToolIsError, "false"), "approved call")
	step1 := only(t, all.named(agent.SpanStep).where(agent.AttrResumed, "false").where(agent.AttrStep, "1"), "first step")
	resumed := only(t, all.named(agent.SpanStep).where(agent.AttrResumed, "true"), "resumed step")
	wantParent(t, step1, first)
	wantParent(t, gated, step1)
	wantParent(t, resumed, second)
	wantParent(t, ran, resumed)
	if s := spanAttr(step1, agent.AttrStepEnd).String(); s != "interrupted" {
		t.Errorf("first step ended %q", s)
	}
	if n := spanAttr(resumed, agent.AttrStep).String(); n != "1" {
		t.Errorf("resumed step is step %s, want 1", n)
	}
}
