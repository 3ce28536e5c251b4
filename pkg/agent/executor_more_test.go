package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

func lastPayload(r *recorder) agent.Payload {
	evs := r.all()
	return evs[len(evs)-1].Payload
}

func resultsOf(r *recorder) map[string]agent.ToolResultEvent {
	out := make(map[string]agent.ToolResultEvent)
	for _, e := range r.all() {
		if p, ok := e.Payload.(agent.ToolResultEvent); ok {
			out[p.ID] = p
		}
	}
	return out
}

func TestToolTimeout(t *testing.T) {
	h := newHarness(t)
	stuckDone, release := make(chan struct{}), make(chan struct{})
	h.extra = []agent.Tool{{
		Name: "slow", Timeout: 50 * time.Millisecond,
		Func: func(ctx context.Context, _ *agent.ToolRequest) (agent.ToolResult, error) {
			<-ctx.Done()
			return agent.ToolResult{}, ctx.Err()
		},
	}, {
		// Ignores its context and returns only after the run has ended:
		// the run can end only if the watchdog frees the step after the
		// timeout plus the cancel grace.
		Name: "stuck", Timeout: 50 * time.Millisecond,
		Func: func(context.Context, *agent.ToolRequest) (agent.ToolResult, error) {
			defer close(stuckDone)
			<-release
			return agent.ToolResult{Content: "late"}, nil
		},
	}}
	h.limits = agent.Limits{CancelGrace: 100 * time.Millisecond}
	h.srv.Script("main", modeltest.Calls(modeltest.Call{ID: "c1", Name: "slow", Args: `{}`}, modeltest.Call{ID: "c2", Name: "stuck", Args: `{}`}), modeltest.Text("ok"))
	var rec recorder
	_, err := h.runner.Run(context.Background(), agent.RunInput{Input: []string{"go"}}, rec.sink)
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	rs := resultsOf(&rec)
	if r := rs["c1"]; !r.IsError || r.Content != "tool slow timed out after 50ms" {
		t.Errorf("c1 %+v", r)
	}
	if r := rs["c2"]; !r.IsError || r.Content != "tool stuck timed out after 50ms" {
		t.Errorf("c2 %+v", r)
	}
	<-stuckDone // the abandoned goroutine ends before goleak looks
}

func TestCancelKeepsResultsThatArrived(t *testing.T) {
	h := newHarness(t)
	release := make(chan struct{})
	h.extra = []agent.Tool{{
		Name: "hang",
		Func: func(ctx context.Context, _ *agent.ToolRequest) (agent.ToolResult, error) {
			<-ctx.Done()
			<-release
			return agent.ToolResult{}, ctx.Err()
		},
	}}
	h.limits = agent.Limits{CancelGrace: 50 * time.Millisecond}
	h.srv.Script("main", modeltest.Calls(
		modeltest.Call{ID: "c1", Name: "hang", Args: `{}`},
		modeltest.Call{ID: "c2", Name: "echo", Args: `{"text":"done"}`}))
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	var rec recorder
	res, err := h.runner.Run(ctx, agent.RunInput{Input: []string{"go"}}, func(e agent.Event) {
		rec.sink(e)
		if r, ok := e.Payload.(agent.ToolResultEvent); ok && r.ID == "c2" {
			once.Do(cancel)
		}
	})
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := lastPayload(&rec).(agent.RunFinished); !ok || f.Status != agent.StatusCancelled {
		t.Fatalf("last %+v", lastPayload(&rec))
	}
	td, _ := h.store.LoadThread(context.Background(), res.ThreadID)
	if n := len(td.Messages); n != 3 || td.Messages[2].ToolCallID != "c2" {
		t.Fatalf("log %+v", td.Messages)
	}
	if d := agent.DanglingCalls(td.Messages); len(d) != 1 || d[0].Call.ID != "c1" {
		t.Errorf("dangling %+v", d)
	}
	// The view keeps call order once c1 is answered after c2.
	st := agent.RestoreState(agent.Snapshot{Messages: append(td.Messages,
		agent.Message{Message: model.Message{Role: model.RoleUser, Content: "next"}},
		agent.Message{Message: model.Message{Role: model.RoleTool, ToolCallID: "c1", Content: "patched"}})})
	var order []string
	for _, v := range st.Effective() {
		order = append(order, string(v.Role)+":"+v.ToolCallID)
	}
	if got := strings.Join(order, " "); got != "user: assistant: tool:c1 tool:c2 user:" {
		t.Errorf("view %s", got)
	}
}

// failingStore fails checkpoints of one phase.
type failingStore struct {
	*agent.MemoryStore
	phase agent.Phase
}

func (s failingStore) SaveCheckpoint(ctx context.Context, cp *agent.Checkpoint) error {
	if cp.Phase == s.phase {
		return errors.New("disk on fire")
	}
	return s.MemoryStore.SaveCheckpoint(ctx, cp)
}

func TestStorageFailureIsAnErrorEvent(t *testing.T) {
	h := newHarness(t)
	h.srv.Script("main", modeltest.Text("hi"))
	runner := agent.NewRunner(failingStore{h.store, agent.PhaseModel}, func(ctx context.Context, req agent.ConfigureRequest) (*agent.Config, error) {
		return &agent.Config{Model: modelOf(t, h), Agent: "main"}, nil
	})
	var rec recorder
	if _, err := runner.Run(context.Background(), agent.RunInput{Input: []string{"go"}}, rec.sink); err != nil {
		t.Fatal(err)
	}
	if e, ok := lastPayload(&rec).(agent.RunError); !ok || e.Code != agent.CodeStorage || !e.Retryable {
		t.Errorf("last %+v", lastPayload(&rec))
	}
}

// TestRunStartedAfterRecord: a run's record and input are committed
// before run_started reaches the sink, so that a client that got the run
// id from run_started finds the run in the store at once; a run whose
// first checkpoint fails has not started: Run returns the error and the
// sink gets nothing.
func TestRunStartedAfterRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail agent.Phase
	}{
		{"recorded first", ""},
		{"input checkpoint fails", agent.PhaseInput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.srv.Script("main", modeltest.Text("hi"))
			st := failingStore{h.store, tc.fail}
			runner := agent.NewRunner(st, func(ctx context.Context, req agent.ConfigureRequest) (*agent.Config, error) {
				return &agent.Config{Model: modelOf(t, h), Agent: "main"}, nil
			})
			var rec recorder
			checked := false
			sink := func(e agent.Event) {
				if rs, ok := e.Payload.(agent.RunStarted); ok {
					checked = true
					td, err := h.store.LoadThread(context.Background(), rs.ThreadID)
					if err != nil || td.LastRun == nil || td.LastRun.RunID != rs.RunID || td.LastRun.Status != agent.StatusRunning ||
						len(td.Messages) != 1 || td.Messages[0].Content != "go" {
						t.Errorf("at run_started the store has %+v, %v; want the run RUNNING and its input", td, err)
					}
				}
				rec.sink(e)
			}
			_, err := runner.Run(context.Background(), agent.RunInput{Input: []string{"go"}}, sink)
			if tc.fail != "" {
				if err == nil || !strings.Contains(err.Error(), "disk on fire") || len(rec.all()) != 0 {
					t.Fatalf("Run = %v after %d events; want the checkpoint's error before any event", err, len(rec.all()))
				}
				return
			}
			if err != nil || !checked {
				t.Fatalf("Run = %v, run_started seen: %v", err, checked)
			}
			if f, ok := lastPayload(&rec).(agent.RunFinished); !ok || f.Status != agent.StatusCompleted {
				t.Fatalf("last %+v", lastPayload(&rec))
			}
		})
	}
}

type failingHook struct{ agent.BaseMiddleware }

func (failingHook) Name() string { return "broken" }

func (failingHook) BeforeModel(context.Context, *agent.RunContext, *agent.State) error {
	return errors.New("kaput")
}

func TestHookErrorIsInternal(t *testing.T) {
	h := newHarness(t)
	h.mw = func() []agent.Middleware { return []agent.Middleware{failingHook{}} }
	var rec recorder
	if _, err := h.runner.Run(context.Background(), agent.RunInput{Input: []string{"go"}}, rec.sink); err != nil {
		t.Fatal(err)
	}
	if e, ok := lastPayload(&rec).(agent.RunError); !ok || e.Code != agent.CodeInternal || e.Retryable || !strings.Contains(e.Message, "kaput") {
		t.Errorf("last %+v", lastPayload(&rec))
	}
}

func TestToolNameClashIsAConfigError(t *testing.T) {
	h := newHarness(t)
	h.extra = []agent.Tool{{Name: "echo", Func: func(context.Context, *agent.ToolRequest) (agent.ToolResult, error) { return agent.ToolResult{}, nil }}}
	_, err := h.runner.Run(context.Background(), agent.RunInput{Input: []string{"go"}}, nil)
	if !errors.Is(err, agent.ErrInvalidConfig) {
		t.Errorf("err = %v", err)
	}
}
