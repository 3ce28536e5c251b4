package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	goopenai "github.com/sashabaranov/go-openai"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/agent/tools"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/model/openai"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/postgres"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
)

// b8Steps is the number of tool steps of one timed run; with the final
// answer, a run makes b8Steps+1 model calls.
const b8Steps = 20

// noopCalls counts the calls of noopTool, to check that timed runs really
// made their tool steps.
var noopCalls atomic.Int64

// noopTool does nothing and answers "ok".
var noopTool = agent.Tool{
	Name:        "noop",
	Description: "Do nothing and answer ok. Benchmark tool.",
	Schema:      []byte(`{"type":"object","additionalProperties":false,"properties":{}}`),
	Func: func(context.Context, *agent.ToolRequest) (agent.ToolResult, error) {
		noopCalls.Add(1)
		return agent.ToolResult{Content: "ok"}, nil
	},
}

// toolResultsSinceUser counts the tool results after the last user message:
// the step a scripted model is at.
func toolResultsSinceUser[M any](msgs []M, role func(M) string) int {
	n := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		switch role(msgs[i]) {
		case "user":
			return n
		case "tool":
			n++
		}
	}
	return n
}

// instantModel is a model.ChatModel in this process that answers at once:
// a call of noop until steps tool results follow the user message, then
// the text "done". It is stateless, so any number of runs may share it.
type instantModel struct{ steps int }

func (m instantModel) Generate(_ context.Context, req model.Request, onDelta func(model.Delta)) (model.Response, error) {
	n := toolResultsSinceUser(req.Messages, func(m model.Message) string { return string(m.Role) })
	usage := model.Usage{Prompt: 100, Completion: 5, Total: 105}
	if n < m.steps {
		return model.Response{
			Message:      model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: fmt.Sprintf("call_%d", n), Name: noopTool.Name, Args: "{}"}}},
			FinishReason: model.FinishToolCalls, Usage: usage, Attempts: 1,
		}, nil
	}
	if onDelta != nil {
		onDelta(model.Delta{Text: "done", Attempt: 1})
	}
	return model.Response{Message: model.Message{Role: model.RoleAssistant, Content: "done"}, FinishReason: model.FinishStop, Usage: usage, Attempts: 1}, nil
}

// scriptedTurn is the same behaviour as instantModel for the scripted
// OpenAI-compatible server; hold, if set, runs before the first answer of
// each run.
func scriptedTurn(steps int, hold func()) modeltest.Turn {
	return modeltest.Dynamic(func(r modeltest.Request) modeltest.Turn {
		n := toolResultsSinceUser(r.Body.Messages, func(m goopenai.ChatCompletionMessage) string { return m.Role })
		if n == 0 && hold != nil {
			hold()
		}
		if n < steps {
			return modeltest.Calls(modeltest.Call{ID: fmt.Sprintf("call_%d", n), Name: noopTool.Name, Args: "{}"})
		}
		return modeltest.Text("done")
	})
}

// deepRuntime builds agentd's agent core (the deep runtime with its
// default middleware and the State backend) over chat and store.
func deepRuntime(chat model.ChatModel, store agent.Store, maxIter int) (*deep.Runtime, error) {
	reg := tools.NewRegistry()
	if err := reg.RegisterGroup("bench", noopTool); err != nil {
		return nil, err
	}
	return deep.New(deep.Config{
		Models:       map[string]deep.Model{"bench": {Chat: chat, Name: "bench-model"}},
		DefaultModel: "bench",
		Tools:        reg,
		Store:        store,
		Backend:      deep.StateBackends(),
		Limits:       agent.Limits{MaxIterations: maxIter},
	})
}

// scriptedServer is the scripted OpenAI-compatible server with turns
// enough for runs runs of steps steps, and a go-openai model on it.
func scriptedServer(runs, steps int, hold func()) (*modeltest.Server, model.ChatModel, error) {
	srv := modeltest.New(nil)
	turns := make([]modeltest.Turn, runs*(steps+1))
	for i := range turns {
		turns[i] = scriptedTurn(steps, hold)
	}
	srv.Script(modeltest.DefaultKey, turns...)
	m, err := openai.New(openai.Config{BaseURL: srv.URL(), Model: "bench-model", Retry: openai.RetryConfig{MaxAttempts: 1}},
		openai.WithHTTPClient(srv.Client()))
	if err != nil {
		srv.Close()
		return nil, nil, err
	}
	return srv, m, nil
}

// timeRuns runs n sequential runs (after warm ones) of rt, each expected
// to make steps no-op tool calls, and returns each run's duration.
func timeRuns(ctx context.Context, rt *deep.Runtime, steps, warm, n int) (samples, error) {
	var out samples
	calls0 := noopCalls.Load()
	for i := range warm + n {
		t0 := time.Now()
		res, err := rt.Run(ctx, agent.RunInput{Input: []string{"go"}}, func(agent.Event) {})
		d := time.Since(t0)
		if err != nil {
			return out, err
		}
		if res.Status != agent.StatusCompleted {
			return out, fmt.Errorf("run ended %s: %+v", res.Status, res.Error)
		}
		if i >= warm {
			out = append(out, d)
		}
	}
	if got := noopCalls.Load() - calls0; got != int64(steps*(warm+n)) {
		return nil, fmt.Errorf("%d runs of %d steps made %d tool calls", warm+n, steps, got)
	}
	return out, nil
}

// perStep divides run durations by the model calls of a run.
func perStep(s samples, calls int) samples {
	out := make(samples, len(s))
	for i, d := range s {
		out[i] = d / time.Duration(calls)
	}
	return out
}

// runB8 measures the agent executor: µs per step (one model call plus the
// no-op tool call it asks for) with a model that answers at once, in this
// process; the same through the scripted OpenAI-compatible server (HTTP +
// SSE + go-openai) and with SQLite for reference; then many concurrent
// runs through AgentService on one agentd core.
func runB8(ctx context.Context, e *env) ([]Row, error) {
	var rows []Row
	calls := b8Steps + 1

	// Executor only: in-process model, memory store.
	rt, err := deepRuntime(instantModel{steps: b8Steps}, agent.NewMemoryStore(), calls+5)
	if err != nil {
		return nil, err
	}
	runs, err := timeRuns(ctx, rt, b8Steps, e.scale(20, 5), e.scale(300, 60))
	if err != nil {
		return nil, fmt.Errorf("executor runs: %w", err)
	}
	oneRt, err := deepRuntime(instantModel{steps: 0}, agent.NewMemoryStore(), 5)
	if err != nil {
		return nil, err
	}
	fixed, err := timeRuns(ctx, oneRt, 0, e.scale(20, 5), e.scale(300, 60))
	if err != nil {
		return nil, fmt.Errorf("one-call runs: %w", err)
	}
	r := latencyRow("B8", fmt.Sprintf("executor µs/step (in-process instant model, no-op tool, %d steps/run)", calls), unitUs, perStep(runs, calls))
	r.OpsPerSec = 0
	r.Target = "≤ 200 µs/step"
	r.judge(r.P50 <= 200)
	slope := float64(runs.p50()-fixed.p50()) / float64(b8Steps) / float64(time.Microsecond)
	r.note("run time / model calls, default deep middleware stack, memory store; a 1-call run takes p50 %.0f µs, so one more step adds ≈ %.0f µs; %.0f sequential steps/s",
		float64(fixed.p50())/float64(time.Microsecond), slope, 1e6/r.P50)
	rows = append(rows, r)

	// Reference: the same runs over the wire and with the SQLite store.
	n := e.scale(60, 15)
	srv, chat, err := scriptedServer(n+5, b8Steps, nil)
	if err != nil {
		return rows, err
	}
	httpRt, err := deepRuntime(chat, agent.NewMemoryStore(), calls+5)
	if err == nil {
		runs, err = timeRuns(ctx, httpRt, b8Steps, 5, n)
	}
	srv.Close()
	if err != nil {
		return rows, fmt.Errorf("scripted-server runs: %w", err)
	}
	r = latencyRow("B8", "µs/step via the scripted OpenAI-compatible server (HTTP+SSE, go-openai)", unitUs, perStep(runs, calls))
	r.OpsPerSec = 0
	r.Target = "— (reference)"
	r.Verdict = verdictInfo
	r.note("same runs as above, model answered over loopback HTTP with streamed SSE")
	rows = append(rows, r)

	for _, ts := range []struct {
		name, note string
		open       func(context.Context) (store.Threads, func(), error)
	}{
		{"SQLite thread store (agentd's default)", "", openBenchSQLite},
		{"PostgreSQL thread store (replicated agentd)", "; a local PostgreSQL server with fsync and synchronous commit on, over loopback TCP", openBenchPostgres},
	} {
		r, err := storeStepRow(ctx, ts.name, ts.note, ts.open, calls, n)
		if err != nil {
			return rows, err
		}
		rows = append(rows, r)
	}

	cr, err := concurrentRuns(ctx, e, e.scale(1000, 200))
	rows = append(rows, cr)
	return rows, err
}

// concurrentRuns starts n runs at once through AgentService (agentd's gRPC
// service over loopback TCP, deep runtime, SQLite store, scripted model
// server). The model holds every run's first call until all n have made
// it, so they are provably in flight together; each run then makes one
// no-op tool step and answers.
func concurrentRuns(ctx context.Context, e *env, n int) (Row, error) {
	row := Row{Scenario: "B8", Name: fmt.Sprintf("%d concurrent runs through AgentService", n), Target: "1,000 concurrent runs without error"}
	var arrived atomic.Int64
	all := make(chan struct{})
	var once sync.Once
	hold := func() {
		if arrived.Add(1) == int64(n) {
			once.Do(func() { close(all) })
		}
		select {
		case <-all:
		case <-time.After(60 * time.Second):
		case <-ctx.Done():
		}
	}
	srv, chat, err := scriptedServer(n, 1, hold)
	if err != nil {
		return row, err
	}
	defer srv.Close()
	dir, err := os.MkdirTemp("", "plumb-bench-sqlite")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "threads.db"), sqlite.Options{})
	if err != nil {
		return row, err
	}
	defer st.Close()
	rt, err := deepRuntime(chat, st, 5)
	if err != nil {
		return row, err
	}
	svc, err := agentsvc.New(agentsvc.Config{Runtime: rt, Config: runhost.Config{Threads: runhost.DurableThreads(st), MaxConcurrentRuns: n}}, agentsvc.WithLogger(e.lg))
	if err != nil {
		return row, err
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(maxMsg))
	plumbv1.RegisterAgentServiceServer(gs, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return row, err
	}
	go func() { _ = gs.Serve(lis) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Shutdown(sctx)
		gs.Stop()
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return row, err
	}
	defer conn.Close()
	c := plumbv1.NewAgentServiceClient(conn)

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		lat     samples
		failed  []string
		started = time.Now()
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			err := oneRun(ctx, c, i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, err.Error())
				return
			}
			lat = append(lat, time.Since(t0))
		}()
	}
	wg.Wait()
	wall := time.Since(started)

	row = latencyRow("B8", row.Name, unitMs, lat)
	row.Name, row.Target = fmt.Sprintf("%d concurrent runs through AgentService (run latency)", n), "1,000 concurrent runs without error"
	row.OpsPerSec = float64(len(lat)) / wall.Seconds()
	held := arrived.Load()
	row.judge(len(failed) == 0 && held >= int64(n))
	if n < 1000 {
		row.Target = fmt.Sprintf("%d concurrent runs without error (quick; spec: 1,000)", n)
	}
	row.note("%d/%d runs completed, %d failed; %d runs were in flight at once (the model held every first call until all had arrived); wall %.1f s (run latency includes the wait for the last run to start); "+
		"ops/s = runs completed per second; deep runtime + SQLite store + scripted model over HTTP, server.max_concurrent_runs=%d, one client connection",
		len(lat), n, len(failed), held, wall.Seconds(), n)
	if len(failed) > 0 {
		row.note("first failure: %s", failed[0])
	}
	return row, nil
}

// oneRun streams one Run to its end and checks it completed.
func oneRun(ctx context.Context, c plumbv1.AgentServiceClient, i int) error {
	st, err := c.Run(ctx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: fmt.Sprintf("run %d", i)}}})
	if err != nil {
		return err
	}
	var last *plumbv1.Event
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		last = m.GetEvent()
	}
	if f := last.GetRunFinished(); f == nil || f.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		return fmt.Errorf("run %d ended with %v", i, last)
	}
	return nil
}

// storeStepRow measures the B8 runs with a durable thread store. A store
// that cannot be opened because PostgreSQL is not installed gives a row
// saying so, not a failed scenario.
func storeStepRow(ctx context.Context, name, note string, open func(context.Context) (store.Threads, func(), error), calls, n int) (Row, error) {
	r := Row{Scenario: "B8", Name: "µs/step with the " + name, Target: "— (reference)", Verdict: verdictInfo}
	st, closeStore, err := open(ctx)
	if errors.Is(err, errNoPostgres) {
		r.note("not measured: %v", err)
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("%s: %w", name, err)
	}
	defer closeStore()
	rt, err := deepRuntime(instantModel{steps: b8Steps}, st, calls+5)
	if err != nil {
		return r, err
	}
	runs, err := timeRuns(ctx, rt, b8Steps, 5, n)
	if err != nil {
		return r, fmt.Errorf("%s runs: %w", name, err)
	}
	r = latencyRow("B8", r.Name, unitUs, perStep(runs, calls))
	r.OpsPerSec = 0
	r.Target = "— (reference)"
	r.Verdict = verdictInfo
	r.note("in-process instant model; each step persists the transcript and a checkpoint%s", note)
	return r, nil
}

// openBenchSQLite opens a SQLite store in a temporary directory.
func openBenchSQLite(ctx context.Context) (store.Threads, func(), error) {
	dir, err := os.MkdirTemp("", "plumb-bench-sqlite")
	if err != nil {
		return nil, nil, err
	}
	st, err := sqlite.Open(ctx, filepath.Join(dir, "threads.db"), sqlite.Options{})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return st, func() { st.Close(); os.RemoveAll(dir) }, nil
}

// errNoPostgres: PostgreSQL's server binaries are not installed.
var errNoPostgres = errors.New("PostgreSQL is not installed (" + pgtest.Install + ")")

// openBenchPostgres starts a throwaway durable PostgreSQL server and opens
// a store on a new database in it.
func openBenchPostgres(ctx context.Context) (store.Threads, func(), error) {
	if _, err := pgtest.Binaries(); err != nil {
		return nil, nil, errNoPostgres
	}
	srv, err := pgtest.Start()
	if err != nil {
		return nil, nil, err
	}
	dsn, err := srv.CreateDatabase(ctx, "bench")
	if err == nil {
		var st *postgres.Store
		if st, err = postgres.Open(ctx, dsn, postgres.Options{}); err == nil {
			return st, func() { st.Close(); _ = srv.Stop() }, nil
		}
	}
	_ = srv.Stop()
	return nil, nil, err
}
