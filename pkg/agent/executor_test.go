package agent_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

func TestRunText(t *testing.T) {
	h := newHarness(t)
	h.srv.Script("main", modeltest.Text("Hello"))
	var rec recorder
	res, err := h.runner.Run(context.Background(), agent.RunInput{Input: []string{"hi"}}, rec.sink)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"run_started", "message_delta", "message_delta", "message_delta", "message", "usage", "run_finished"}
	if got := rec.kinds(); !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	for i, e := range rec.all() {
		if e.Sequence != uint64(i+1) {
			t.Errorf("event %d has sequence %d", i, e.Sequence)
		}
	}
	if res.Status != agent.StatusCompleted || res.FinalText != "Hello" {
		t.Errorf("result = %+v", res)
	}
	td, err := h.store.LoadThread(context.Background(), res.ThreadID)
	if err != nil {
		t.Fatal(err)
	}
	if len(td.Messages) != 2 || td.Messages[0].Role != model.RoleUser || td.Messages[1].Content != "Hello" {
		t.Errorf("log = %+v", td.Messages)
	}
}

func TestRunParallelToolsInCallOrder(t *testing.T) {
	h := newHarness(t)
	h.srv.Script("main",
		modeltest.Calls(
			modeltest.Call{ID: "c1", Name: "sleep", Args: `{"ms":300}`},
			modeltest.Call{ID: "c2", Name: "sleep", Args: `{"ms":10}`},
			modeltest.Call{ID: "c3", Name: "frobnicate", Args: `{}`},
		),
		modeltest.Text("ok"))
	var rec recorder
	res, err := h.runner.Run(context.Background(), agent.RunInput{Input: []string{"go"}}, rec.sink)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, e := range rec.all() {
		if r, ok := e.Payload.(agent.ToolResultEvent); ok {
			order = append(order, r.ID)
			if r.ID == "c3" && (!r.IsError || r.Origin != agent.OriginInvalidCall || !strings.Contains(r.Content, `Unknown tool "frobnicate". Available tools: big, counter, echo, fail, panic, sleep.`)) {
				t.Errorf("c3 = %+v", r)
			}
		}
	}
	// Results arrive as calls finish: c2 (10 ms) before c1 (300 ms) proves
	// the calls ran at once, with no bound on wall time.
	if !slices.Equal(order, []string{"c3", "c2", "c1"}) {
		t.Errorf("result events = %v", order)
	}
	td, _ := h.store.LoadThread(context.Background(), res.ThreadID)
	var ids []string
	for _, m := range td.Messages {
		if m.Role == model.RoleTool {
			ids = append(ids, m.ToolCallID)
		}
	}
	if !slices.Equal(ids, []string{"c1", "c2", "c3"}) {
		t.Errorf("log order = %v", ids)
	}
	if res.Status != agent.StatusCompleted {
		t.Errorf("status %s", res.Status)
	}
}
