package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
)

// Run runs every case against a fresh store from newStore.
func Run(t *testing.T, newStore func(t *testing.T) agent.Store) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(t *testing.T, s agent.Store)
	}{
		{"CreateAndLoad", testCreateAndLoad},
		{"NotFound", testNotFound},
		{"DuplicateThread", testDuplicateThread},
		{"AppendAndBase", testAppendAndBase},
		{"Truncate", testTruncate},
		{"EditCalls", testEditCalls},
		{"StateRoundTrip", testStateRoundTrip},
		{"RunRecords", testRunRecords},
		{"Metadata", testMetadata},
		{"FailRunningRuns", testFailRunningRuns},
		{"LoadReturnsCopies", testLoadReturnsCopies},
		{"Files", testFiles},
		{"Concurrent", testConcurrent},
		{"ConcurrentSameBase", testConcurrentSameBase},
		{"ConsistentReads", testConsistentReads},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newStore(t)) })
	}
}

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func ctx() context.Context { return context.Background() }

func mustCreate(t *testing.T, s agent.Store, id string) {
	t.Helper()
	if err := s.CreateThread(ctx(), agent.Thread{ID: id, CreatedAt: t0, Metadata: map[string]string{"tenant": "a"}}); err != nil {
		t.Fatalf("CreateThread: %v", err)
	}
}

func mustLoad(t *testing.T, s agent.Store, id string) *agent.ThreadData {
	t.Helper()
	d, err := s.LoadThread(ctx(), id)
	if err != nil {
		t.Fatalf("LoadThread: %v", err)
	}
	return d
}

func msg(role model.Role, text string) agent.Message {
	return agent.Message{Message: model.Message{Role: role, Content: text}, CreatedAt: t0}
}

func run(id string, status agent.RunStatus) agent.RunRecord {
	return agent.RunRecord{RunID: id, Status: status, StartedAt: t0, Spec: agent.RunSpec{Agent: "main"}}
}

func testCreateAndLoad(t *testing.T, s agent.Store) {
	mustCreate(t, s, "t1")
	d := mustLoad(t, s, "t1")
	if d.Thread.ID != "t1" || !d.Thread.CreatedAt.Equal(t0) || d.Thread.Metadata["tenant"] != "a" {
		t.Errorf("thread = %+v", d.Thread)
	}
	if len(d.Messages) != 0 || d.LastRun != nil || d.Interrupt != nil || d.Status() != agent.ThreadIdle {
		t.Errorf("new thread not empty: %+v", d)
	}
}

func testNotFound(t *testing.T, s agent.Store) {
	if _, err := s.LoadThread(ctx(), "nope"); !errors.Is(err, agent.ErrThreadNotFound) {
		t.Errorf("LoadThread: %v, want ErrThreadNotFound", err)
	}
	err := s.SaveCheckpoint(ctx(), &agent.Checkpoint{ThreadID: "nope", Phase: agent.PhaseInput, Run: run("r1", agent.StatusRunning)})
	if !errors.Is(err, agent.ErrThreadNotFound) {
		t.Errorf("SaveCheckpoint: %v, want ErrThreadNotFound", err)
	}
}

func testDuplicateThread(t *testing.T, s agent.Store) {
	mustCreate(t, s, "t1")
	if err := s.CreateThread(ctx(), agent.Thread{ID: "t1", CreatedAt: t0}); !errors.Is(err, agent.ErrConflict) {
		t.Errorf("duplicate: %v, want ErrConflict", err)
	}
}

// testTruncate: a checkpoint with Truncate cuts the log back to its Base
// (a rolled-back run) and appends after it; a Base past the stored log
// is a conflict that changes nothing.
func testTruncate(t *testing.T, s agent.Store) {
	mustCreate(t, s, "t1")
	three := []agent.Message{msg(model.RoleUser, "one"), msg(model.RoleUser, "two"), msg(model.RoleAssistant, "three")}
	if err := s.SaveCheckpoint(ctx(), &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseInput, Append: three, Run: run("r1", agent.StatusRunning), CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	past := &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseFinal, Base: 4, Truncate: true, Run: run("r1", agent.StatusCancelled), CreatedAt: t0.Add(time.Second)}
	if err := s.SaveCheckpoint(ctx(), past); !errors.Is(err, agent.ErrConflict) {
		t.Fatalf("truncate past the log: %v, want ErrConflict", err)
	}
	if d := mustLoad(t, s, "t1"); len(d.Messages) != 3 {
		t.Fatalf("a refused truncation changed the log: %+v", d.Messages)
	}
	back := &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseFinal, Base: 1, Truncate: true, Append: []agent.Message{msg(model.RoleUser, "again")},
		Todos: []agent.Todo{{Content: "kept", Status: agent.TodoPending}}, Run: run("r1", agent.StatusCancelled), CreatedAt: t0.Add(2 * time.Second)}
	if err := s.SaveCheckpoint(ctx(), back); err != nil {
		t.Fatal(err)
	}
	d := mustLoad(t, s, "t1")
	if want := []agent.Message{msg(model.RoleUser, "one"), msg(model.RoleUser, "again")}; !reflect.DeepEqual(d.Messages, want) {
		t.Errorf("messages after the truncation = %+v\nwant %+v", d.Messages, want)
	}
	if len(d.Todos) != 1 || d.LastRun.Status != agent.StatusCancelled {
		t.Errorf("state after the truncation: todos %v, run %v", d.Todos, d.LastRun.Status)
	}
	// The log goes on from there.
	if err := s.SaveCheckpoint(ctx(), &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseInput, Base: 2, Append: []agent.Message{msg(model.RoleUser, "next")}, Run: run("r2", agent.StatusRunning), CreatedAt: t0.Add(3 * time.Second)}); err != nil {
		t.Fatalf("append after a truncation: %v", err)
	}
	if d := mustLoad(t, s, "t1"); len(d.Messages) != 3 || d.Messages[2].Content != "next" {
		t.Errorf("messages = %+v", d.Messages)
	}
}

func testAppendAndBase(t *testing.T, s agent.Store) {
	mustCreate(t, s, "t1")
	cp := &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseInput, Base: 0,
		Append: []agent.Message{msg(model.RoleUser, "hi")}, Run: run("r1", agent.StatusRunning), CreatedAt: t0}
	if err := s.SaveCheckpoint(ctx(), cp); err != nil {
		t.Fatal(err)
	}
	a := msg(model.RoleAssistant, "")
	a.ToolCalls = []model.ToolCall{{ID: "c1", Name: "ls", Args: `{}`}}
	tm := msg(model.RoleTool, "out")
	tm.ToolCallID, tm.Name, tm.IsError, tm.Source = "c1", "ls", true, agent.SourcePatch
	cp = &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseTools, Step: 1, Base: 1,
		Append: []agent.Message{a, tm}, Run: run("r1", agent.StatusRunning), CreatedAt: t0.Add(time.Second)}
	if err := s.SaveCheckpoint(ctx(), cp); err != nil {
		t.Fatal(err)
	}
	// A stale base changes nothing.
	stale := &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseTools, Base: 1,
		Append: []agent.Message{msg(model.RoleUser, "lost")}, Todos: []agent.Todo{{Content: "x", Status: agent.TodoPending}},
		Run: run("r1", agent.StatusCompleted), CreatedAt: t0.Add(2 * time.Second)}
	if err := s.SaveCheckpoint(ctx(), stale); !errors.Is(err, agent.ErrConflict) {
		t.Fatalf("stale base: %v, want ErrConflict", err)
	}
	d := mustLoad(t, s, "t1")
	want := []agent.Message{msg(model.RoleUser, "hi"), a, tm}
	if !reflect.DeepEqual(d.Messages, want) {
		t.Errorf("messages = %+v\nwant %+v", d.Messages, want)
	}
	if len(d.Todos) != 0 || d.LastRun.Status != agent.StatusRunning {
		t.Errorf("stale checkpoint leaked: todos %v, run %v", d.Todos, d.LastRun.Status)
	}
	if !d.Thread.UpdatedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("updated_at = %v", d.Thread.UpdatedAt)
	}
	if n := len(d.Checkpoints); n != 2 || d.Checkpoints[1].MessageCount != 3 || d.Checkpoints[1].Phase != agent.PhaseTools || d.Checkpoints[0].ID >= d.Checkpoints[1].ID {
		t.Errorf("checkpoints = %+v", d.Checkpoints)
	}
}

func testEditCalls(t *testing.T, s agent.Store) {
	mustCreate(t, s, "t1")
	a := msg(model.RoleAssistant, "")
	a.ToolCalls = []model.ToolCall{{ID: "c1", Name: "write_file", Args: `{"file_path":"/a.txt"}`}, {ID: "c2", Name: "ls", Args: `{}`}}
	if err := s.SaveCheckpoint(ctx(), &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseModel, Append: []agent.Message{msg(model.RoleUser, "u"), a}, Run: run("r1", agent.StatusRunning)}); err != nil {
		t.Fatal(err)
	}
	bad := &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseTools, Base: 2,
		EditCalls: []agent.CallEdit{{MessageIndex: 1, CallID: "nope", Args: `{}`}}, Append: []agent.Message{msg(model.RoleUser, "x")}, Run: run("r1", agent.StatusRunning)}
	if err := s.SaveCheckpoint(ctx(), bad); !errors.Is(err, agent.ErrConflict) {
		t.Fatalf("unknown call edit: %v, want ErrConflict", err)
	}
	good := &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseTools, Base: 2,
		EditCalls: []agent.CallEdit{{MessageIndex: 1, CallID: "c1", Args: `{"file_path":"/b.txt"}`}}, Run: run("r1", agent.StatusRunning)}
	if err := s.SaveCheckpoint(ctx(), good); err != nil {
		t.Fatal(err)
	}
	d := mustLoad(t, s, "t1")
	if len(d.Messages) != 2 || d.Messages[1].ToolCalls[0].Args != `{"file_path":"/b.txt"}` || d.Messages[1].ToolCalls[1].Args != `{}` {
		t.Errorf("messages after edit = %+v", d.Messages)
	}
	// Two edits of one message both apply.
	both := &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseTools, Base: 2, Run: run("r1", agent.StatusRunning),
		EditCalls: []agent.CallEdit{{MessageIndex: 1, CallID: "c1", Args: `{"file_path":"/c.txt"}`}, {MessageIndex: 1, CallID: "c2", Args: `{"path":"/"}`}}}
	if err := s.SaveCheckpoint(ctx(), both); err != nil {
		t.Fatal(err)
	}
	d = mustLoad(t, s, "t1")
	if d.Messages[1].ToolCalls[0].Args != `{"file_path":"/c.txt"}` || d.Messages[1].ToolCalls[1].Args != `{"path":"/"}` {
		t.Errorf("calls after two edits of one message = %+v", d.Messages[1].ToolCalls)
	}
}

func testStateRoundTrip(t *testing.T, s agent.Store) {
	mustCreate(t, s, "t1")
	code := 3
	pending := &agent.PendingStep{
		AssistantIndex: 1,
		Calls:          []model.ToolCall{{ID: "c1", Name: "counter", Args: `{}`}, {ID: "t1", Name: "task", Args: `{"subagent_type":"ops","description":"d"}`}},
		FinishReason:   "tool_calls",
		Results:        map[string]agent.ToolResult{"c1": {Content: "1", Origin: agent.OriginExecuted, ExitCode: &code}},
		Requests: []agent.InterruptRequest{{ToolCallID: "c9", AgentPath: "main", Kind: agent.InterruptApproval, ToolName: "x",
			Args: `{}`, Description: "Approval required: x", Allowed: agent.AllDecisions(), ArgsSchema: json.RawMessage(`{"type":"object"}`)}},
		Reminders: []agent.Reminder{{Kind: "todos", Text: "t"}},
		Started:   []string{"t1"},
		Nested: map[string]*agent.SubagentSnapshot{"t1": {
			Subagent: "ops", Description: "d", AgentPath: "main/ops", TaskCallID: "t1", Depth: 1, Step: 2, Elapsed: time.Second,
			Usage: model.Usage{Prompt: 5, Total: 5},
			State: agent.Snapshot{
				Messages: []agent.Message{msg(model.RoleUser, "d")},
				Pending: &agent.PendingStep{Calls: []model.ToolCall{{ID: "e1", Name: "execute", Args: `{"command":"ls"}`}},
					Requests: []agent.InterruptRequest{{ToolCallID: "e1", AgentPath: "main/ops", ParentToolCallID: "t1", Kind: agent.InterruptApproval, ToolName: "execute", Allowed: []agent.DecisionType{agent.DecisionApprove}}}},
			},
		}},
	}
	intr := &agent.PendingInterrupt{InterruptID: "i1", RunID: "r1", Requests: pending.AllRequests(), CreatedAt: t0}
	cp := &agent.Checkpoint{
		ThreadID: "t1", Phase: agent.PhaseInterrupt, Step: 1,
		Todos:   []agent.Todo{{Content: "a", Status: agent.TodoInProgress}},
		Summary: &agent.Summary{Cutoff: 0, Text: "s", TranscriptPath: "/conversation_history/t1.md", Message: "m", TokensBefore: 10, TokensAfter: 2},
		Private: map[string]json.RawMessage{"memory": json.RawMessage(`{"loaded":true}`)},
		Pending: pending, Interrupt: intr, Run: run("r1", agent.StatusInterrupted), CreatedAt: t0,
	}
	if err := s.SaveCheckpoint(ctx(), cp); err != nil {
		t.Fatal(err)
	}
	d := mustLoad(t, s, "t1")
	check := func(name string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v\nwant %#v", name, got, want)
		}
	}
	check("todos", d.Todos, cp.Todos)
	check("summary", d.Summary, cp.Summary)
	check("pending", d.Pending, cp.Pending)
	check("interrupt", d.Interrupt, cp.Interrupt)
	if string(d.Private["memory"]) != `{"loaded":true}` {
		t.Errorf("private = %s", d.Private["memory"])
	}
	if d.Status() != agent.ThreadInterrupted {
		t.Errorf("status = %s", d.Status())
	}
	// The next checkpoint clears what it does not carry.
	if err := s.SaveCheckpoint(ctx(), &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseTools, Run: run("r1", agent.StatusRunning)}); err != nil {
		t.Fatal(err)
	}
	d = mustLoad(t, s, "t1")
	if d.Pending != nil || d.Interrupt != nil || d.Todos != nil || d.Summary != nil || len(d.Private) != 0 {
		t.Errorf("state not replaced: %+v", d)
	}
}

func testRunRecords(t *testing.T, s agent.Store) {
	mustCreate(t, s, "t1")
	r1 := run("r1", agent.StatusRunning)
	save := func(r agent.RunRecord) {
		t.Helper()
		if err := s.SaveCheckpoint(ctx(), &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseFinal, Run: r, CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	save(r1)
	r1.Status, r1.Usage, r1.FinalText, r1.LastSequence, r1.Steps = agent.StatusCompleted, model.Usage{Prompt: 10, Completion: 5, Total: 15}, "done", 7, 1
	r1.Error = nil
	r1.Elapsed = 1500 * time.Millisecond
	save(r1)
	r2 := run("r2", agent.StatusFailed)
	r2.Usage = model.Usage{Prompt: 1, Total: 1, Estimated: true}
	r2.Error = &agent.RunError{Code: "MODEL_AUTH", Message: "no"}
	r2.Spec.ClientTools = []agent.ClientToolDef{{Name: "get_location", Description: "d", Parameters: json.RawMessage(`{"type":"object"}`)}}
	save(r2)
	d := mustLoad(t, s, "t1")
	if !reflect.DeepEqual(*d.LastRun, r2) {
		t.Errorf("last run = %+v\nwant %+v", *d.LastRun, r2)
	}
	want := model.Usage{Prompt: 11, Completion: 5, Total: 16, Estimated: true}
	if d.Usage != want {
		t.Errorf("usage = %+v, want %+v", d.Usage, want)
	}
}

func testMetadata(t *testing.T, s agent.Store) {
	mustCreate(t, s, "t1")
	if err := s.SaveCheckpoint(ctx(), &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseInput, Metadata: map[string]string{"tenant": "b", "env": "dev"}, Run: run("r1", agent.StatusRunning)}); err != nil {
		t.Fatal(err)
	}
	d := mustLoad(t, s, "t1")
	if !reflect.DeepEqual(d.Thread.Metadata, map[string]string{"tenant": "b", "env": "dev"}) {
		t.Errorf("metadata = %v", d.Thread.Metadata)
	}
}

func testFailRunningRuns(t *testing.T, s agent.Store) {
	mustCreate(t, s, "t1")
	mustCreate(t, s, "t2")
	for i, id := range []string{"t1", "t2"} {
		st := agent.StatusRunning
		if i == 1 {
			st = agent.StatusCompleted
		}
		if err := s.SaveCheckpoint(ctx(), &agent.Checkpoint{ThreadID: id, Phase: agent.PhaseModel, Run: run("r-"+id, st)}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.FailRunningRuns(ctx(), "agentd restarted")
	if err != nil || n != 1 {
		t.Fatalf("FailRunningRuns = %d, %v; want 1", n, err)
	}
	d := mustLoad(t, s, "t1")
	if d.LastRun.Status != agent.StatusFailed || d.LastRun.Error == nil || d.LastRun.Error.Message != "agentd restarted" {
		t.Errorf("t1 run = %+v", d.LastRun)
	}
	if d := mustLoad(t, s, "t2"); d.LastRun.Status != agent.StatusCompleted {
		t.Errorf("t2 run = %+v", d.LastRun)
	}
}

func testLoadReturnsCopies(t *testing.T, s agent.Store) {
	mustCreate(t, s, "t1")
	a := msg(model.RoleAssistant, "x")
	a.ToolCalls = []model.ToolCall{{ID: "c1", Name: "ls", Args: `{}`}}
	cp := &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseModel, Append: []agent.Message{a},
		Todos: []agent.Todo{{Content: "a", Status: agent.TodoPending}}, Run: run("r1", agent.StatusRunning)}
	if err := s.SaveCheckpoint(ctx(), cp); err != nil {
		t.Fatal(err)
	}
	cp.Append[0].ToolCalls[0].Args = "mutated"
	cp.Todos[0].Content = "mutated"
	d := mustLoad(t, s, "t1")
	d.Messages[0].ToolCalls[0].Name = "mutated"
	d.Thread.Metadata["tenant"] = "mutated"
	d = mustLoad(t, s, "t1")
	if d.Messages[0].ToolCalls[0].Args != `{}` || d.Messages[0].ToolCalls[0].Name != "ls" || d.Todos[0].Content != "a" || d.Thread.Metadata["tenant"] != "a" {
		t.Errorf("store shares memory with callers: %+v", d)
	}
}

func testFiles(t *testing.T, s agent.Store) {
	mustCreate(t, s, "t1")
	save := func(files map[string]json.RawMessage) {
		t.Helper()
		if err := s.SaveCheckpoint(ctx(), &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseTools, Files: files, Run: run("r1", agent.StatusRunning)}); err != nil {
			t.Fatal(err)
		}
	}
	save(map[string]json.RawMessage{"/a.txt": json.RawMessage(`{"content":"a"}`), "/b.txt": json.RawMessage(`{"content":"b"}`)})
	save(map[string]json.RawMessage{"/a.txt": nil, "/c.txt": json.RawMessage(`{"content":"c"}`)})
	save(nil)
	d := mustLoad(t, s, "t1")
	want := map[string]string{"/b.txt": `{"content":"b"}`, "/c.txt": `{"content":"c"}`}
	got := make(map[string]string)
	for k, v := range d.Files {
		var c any
		if err := json.Unmarshal(v, &c); err != nil {
			t.Fatalf("file %s: %v", k, err)
		}
		b, _ := json.Marshal(c)
		got[k] = string(b)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("files = %v, want %v", got, want)
	}
}

func testConcurrent(t *testing.T, s agent.Store) {
	const threads, steps = 4, 20
	var wg sync.WaitGroup
	for i := range threads {
		id := fmt.Sprintf("t%d", i)
		mustCreate(t, s, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range steps {
				cp := &agent.Checkpoint{ThreadID: id, Phase: agent.PhaseTools, Base: j,
					Append: []agent.Message{msg(model.RoleUser, fmt.Sprint(j))}, Run: run("r-"+id, agent.StatusRunning)}
				if err := s.SaveCheckpoint(ctx(), cp); err != nil {
					t.Error(err)
					return
				}
				if _, err := s.LoadThread(ctx(), id); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := range threads {
		if d := mustLoad(t, s, fmt.Sprintf("t%d", i)); len(d.Messages) != steps {
			t.Errorf("thread %d has %d messages", i, len(d.Messages))
		}
	}
}

// testConcurrentSameBase: writers racing with the same Base serialize; one
// wins and the others see its log (ErrConflict), never a storage error.
// Several rounds, so the later ones race on warm connections.
func testConcurrentSameBase(t *testing.T, s agent.Store) {
	const writers, rounds = 8, 5
	mustCreate(t, s, "t1")
	var winners []string
	for round := range rounds {
		start := make(chan struct{})
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = s.SaveCheckpoint(ctx(), &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseInput, Base: round,
					Append: []agent.Message{msg(model.RoleUser, fmt.Sprintf("%d/%d", round, i))}, Run: run(fmt.Sprintf("r%d/%d", round, i), agent.StatusRunning), CreatedAt: t0})
			}()
		}
		close(start)
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won < 0:
				won = i
			case err == nil:
				t.Errorf("round %d: writers %d and %d both saved with base %d", round, won, i, round)
			case !errors.Is(err, agent.ErrConflict):
				t.Errorf("round %d: writer %d: %v, want ErrConflict", round, i, err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: no writer saved", round)
		}
		winners = append(winners, fmt.Sprintf("%d/%d", round, won))
	}
	d := mustLoad(t, s, "t1")
	var got []string
	for _, m := range d.Messages {
		got = append(got, m.Content)
	}
	if !reflect.DeepEqual(got, winners) || len(d.Checkpoints) != rounds || d.LastRun.RunID != "r"+winners[rounds-1] {
		t.Errorf("after the races: messages %v, %d checkpoints, last run %s; want the winners' %v alone", got, len(d.Checkpoints), d.LastRun.RunID, winners)
	}
}

// testConsistentReads: a load while a writer checkpoints sees one
// checkpoint whole: the log, the state and the files agree.
func testConsistentReads(t *testing.T, s agent.Store) {
	const steps = 30
	mustCreate(t, s, "t1")
	done := make(chan struct{})
	defer func() { <-done }() // the writer reports to t
	go func() {
		defer close(done)
		for j := range steps {
			n := fmt.Sprint(j + 1)
			cp := &agent.Checkpoint{ThreadID: "t1", Phase: agent.PhaseTools, Base: j, Append: []agent.Message{msg(model.RoleUser, n)},
				Todos: []agent.Todo{{Content: n, Status: agent.TodoPending}}, Files: map[string]json.RawMessage{"/n": json.RawMessage(n)},
				Run: run("r1", agent.StatusRunning), CreatedAt: t0}
			if err := s.SaveCheckpoint(ctx(), cp); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for reads := 0; ; reads++ {
		select {
		case <-done:
			if d := mustLoad(t, s, "t1"); len(d.Messages) != steps {
				t.Errorf("%d messages after the writer, want %d", len(d.Messages), steps)
			}
			return
		default:
		}
		d, err := s.LoadThread(ctx(), "t1")
		if err != nil {
			t.Fatalf("load %d during writes: %v", reads, err)
		}
		n := len(d.Messages)
		if n == 0 {
			continue
		}
		want := fmt.Sprint(n)
		last := d.Checkpoints[len(d.Checkpoints)-1]
		if d.Messages[n-1].Content != want || last.MessageCount != n || len(d.Todos) != 1 || d.Todos[0].Content != want || string(d.Files["/n"]) != want {
			t.Fatalf("load %d mixes checkpoints: %d messages (last %q), last checkpoint at %d, todos %+v, /n = %s",
				reads, n, d.Messages[n-1].Content, last.MessageCount, d.Todos, d.Files["/n"])
		}
	}
}
