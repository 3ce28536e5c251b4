package agent_test

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// spans is a finished trace: spans by name, and attribute lookups.
type spans []sdktrace.ReadOnlySpan

func (ss spans) named(name string) spans {
	var out spans
	for _, s := range ss {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func tracer(t *testing.T) (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return exp, tp
}

func finished(exp *tracetest.InMemoryExporter) spans {
	var out spans
	for _, s := range exp.GetSpans() {
		out = append(out, s.Snapshot())
	}
	return out
}

// TestRunSpans: a run is one agent.run span under the caller's span, with
// a child per step, and below each step its model call and tool calls,
// all in one trace, carrying ids, tokens, finish reasons and error flags.
func TestRunSpans(t *testing.T) {
	exp, tp := tracer(t)
	h := newHarness(t, agent.WithTracerProvider(tp))
	h.srv.Script("main",
		modeltest.Calls(
			modeltest.Call{ID: "c1", Name: "echo", Args: `{"text":"hi"}`},
			modeltest.Call{ID: "c2", Name: "fail", Args: `{"msg":"boom"}`},
			modeltest.Call{ID: "c3", Name: "frobnicate", Args: `{}`},
		),
		modeltest.Text("done"))
	ctx, caller := tp.Tracer("test").Start(context.Background(), "caller")
	res, err := h.runner.Run(ctx, agent.RunInput{Input: []string{"go"}}, func(agent.Event) {})
	caller.End()
	if err != nil || res.Status != agent.StatusCompleted {
		t.Fatalf("run = %+v, %v", res, err)
	}
	all := finished(exp)
	traceID := caller.SpanContext().TraceID()
	for _, s := range all {
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("span %s is in trace %s, want %s", s.Name(), s.SpanContext().TraceID(), traceID)
		}
	}
	child := func(s sdktrace.ReadOnlySpan, parent trace.SpanContext) {
		t.Helper()
		if s.Parent().SpanID() != parent.SpanID() {
			t.Errorf("%s (%v) has parent %s, want %s", s.Name(), s.Attributes(), s.Parent().SpanID(), parent.SpanID())
		}
	}

	runs := all.named(agent.SpanRun)
	if len(runs) != 1 {
		t.Fatalf("%d run spans, want 1: %v", len(runs), all)
	}
	run := runs[0]
	child(run, caller.SpanContext())
	for key, want := range map[string]string{
		agent.AttrThreadID: res.ThreadID, agent.AttrRunID: res.RunID, agent.AttrRunStatus: "COMPLETED",
		agent.AttrAgentName: "main", agent.AttrModelKey: "smart", agent.AttrRequestModel: "test-model",
	} {
		if got := attr(run, key).AsString(); got != want {
			t.Errorf("run span %s = %q, want %q", key, got, want)
		}
	}
	if attr(run, agent.AttrInputTokens).AsInt64() != int64(res.Usage.Prompt) || res.Usage.Prompt == 0 {
		t.Errorf("run span input tokens %v, run usage %+v", attr(run, agent.AttrInputTokens), res.Usage)
	}

	steps := all.named(agent.SpanStep)
	models := all.named(agent.SpanModelCall)
	if len(steps) != 2 || len(models) != 2 {
		t.Fatalf("%d steps and %d model calls, want 2 each", len(steps), len(models))
	}
	slices.SortFunc(steps, func(a, b sdktrace.ReadOnlySpan) int {
		return int(attr(a, agent.AttrStep).AsInt64() - attr(b, agent.AttrStep).AsInt64())
	})
	for i, st := range steps {
		child(st, run.SpanContext())
		if n := attr(st, agent.AttrStep).AsInt64(); n != int64(i+1) {
			t.Errorf("step span %d has step %d", i, n)
		}
	}
	if a, b := attr(steps[0], agent.AttrStepEnd).AsString(), attr(steps[1], agent.AttrStepEnd).AsString(); a != "continue" || b != "completed" {
		t.Errorf("steps ended %q, %q; want continue, completed", a, b)
	}
	for _, m := range models {
		n := attr(m, agent.AttrStep).AsInt64()
		child(m, steps[n-1].SpanContext())
		want := []string{"tool_calls"}
		if n == 2 {
			want = []string{"stop"}
		}
		if got := attr(m, agent.AttrFinishReasons).AsStringSlice(); !slices.Equal(got, want) {
			t.Errorf("model call %d finish reasons %v, want %v", n, got, want)
		}
		if attr(m, agent.AttrInputTokens).AsInt64() == 0 || attr(m, agent.AttrModelKey).AsString() != "smart" ||
			attr(m, agent.AttrRequestModel).AsString() != "test-model" || m.SpanKind() != trace.SpanKindClient {
			t.Errorf("model call %d attributes %v kind %v", n, m.Attributes(), m.SpanKind())
		}
	}

	tools := all.named(agent.SpanToolCall)
	if len(tools) != 3 {
		t.Fatalf("%d tool spans, want 3", len(tools))
	}
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range tools {
		child(s, steps[0].SpanContext())
		byID[attr(s, agent.AttrToolCallID).AsString()] = s
	}
	for _, tt := range []struct {
		id, name, origin string
		isError          bool
	}{
		{"c1", "echo", "EXECUTED", false},
		{"c2", "fail", "EXECUTED", true},
		{"c3", "frobnicate", "INVALID_CALL", true},
	} {
		s := byID[tt.id]
		if s == nil {
			t.Errorf("no span for %s", tt.id)
			continue
		}
		if attr(s, agent.AttrToolName).AsString() != tt.name || attr(s, agent.AttrToolIsError).AsBool() != tt.isError ||
			attr(s, agent.AttrToolOrigin).AsString() != tt.origin || (s.Status().Code == codes.Error) != tt.isError {
			t.Errorf("%s span: attributes %v, status %v", tt.id, s.Attributes(), s.Status())
		}
	}
}

// TestRefusedRunSpan: a run refused before run_started is a failed span
// naming why.
func TestRefusedRunSpan(t *testing.T) {
	exp, tp := tracer(t)
	h := newHarness(t, agent.WithTracerProvider(tp))
	if _, err := h.runner.Run(context.Background(), agent.RunInput{}, func(agent.Event) {}); err == nil {
		t.Fatal("a run without input started")
	}
	runs := finished(exp).named(agent.SpanRun)
	if len(runs) != 1 || runs[0].Status().Code != codes.Error || attr(runs[0], agent.AttrErrorType).AsString() != "INVALID_INPUT" {
		t.Fatalf("run spans %v", runs)
	}
}
