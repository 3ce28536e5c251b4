package runhost_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/runhost/runs"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/model/openai"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Compile-time check: the deep runtime is what agentd hosts.
var _ runhost.Runtime = (*deep.Runtime)(nil)

// env is a host over the deep runtime, a memory thread store and a
// scripted model server.
type env struct {
	host  *runhost.Host
	rt    *deep.Runtime
	store *agent.MemoryStore
	model *modeltest.Server
}

// newEnv starts an env; its host is shut down when the test ends.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{model: modeltest.New(t), store: agent.NewMemoryStore()}
	m, err := openai.New(openai.Config{BaseURL: e.model.URL(), Model: "gpt-test",
		Retry: openai.RetryConfig{MaxAttempts: 1, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond}},
		openai.WithHTTPClient(e.model.Client()))
	if err != nil {
		t.Fatal(err)
	}
	lg := zaptest.NewLogger(t)
	e.rt, err = deep.New(deep.Config{
		DefaultModel: "smart", Models: map[string]deep.Model{"smart": {Chat: m, Name: "gpt-test"}},
		Store: e.store, Backend: deep.StateBackends(), Limits: agent.Limits{CancelGrace: time.Second},
	}, deep.WithLogger(lg))
	if err != nil {
		t.Fatal(err)
	}
	e.host, err = runhost.New(e.rt, runhost.Config{Threads: runhost.MemoryThreads(e.store)}, runhost.WithLogger(lg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.host.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return e
}

// collect is a Send that keeps the events.
func collect(evs *[]*plumbv1.Event) runhost.Send {
	return func(e *plumbv1.Event) error {
		*evs = append(*evs, e)
		return nil
	}
}

func seqs(evs []*plumbv1.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.GetSequence()
	}
	return out
}

// TestNewChecksTheConfig: the host refuses a config it cannot run.
func TestNewChecksTheConfig(t *testing.T) {
	e := newEnv(t)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "threads.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	threads := runhost.MemoryThreads(e.store)
	for _, tt := range []struct {
		name string
		rt   runhost.Runtime
		cfg  runhost.Config
	}{
		{"no runtime", nil, runhost.Config{Threads: threads}},
		{"no thread store", e.rt, runhost.Config{}},
		{"negative run slots", e.rt, runhost.Config{Threads: threads, MaxConcurrentRuns: -1}},
		{"negative replay retention", e.rt, runhost.Config{Threads: threads, ReplayRetention: -time.Second}},
		{"leases without a replica id", e.rt, runhost.Config{Threads: threads, Leases: st}},
		{"an event log without leases", e.rt, runhost.Config{Threads: threads, Events: st}},
	} {
		if _, err := runhost.New(tt.rt, tt.cfg); err == nil {
			t.Errorf("%s: New succeeded; want an error", tt.name)
		}
	}
}

// TestHostRunsAThreadThroughItsLife drives the host in its own terms: a
// run on a new thread streams to its terminal event and leaves the thread
// idle and free; Attach replays the retained run; Cancel finds nothing to
// cancel; DeleteThread removes the thread, after which the host reports
// it not found.
func TestHostRunsAThreadThroughItsLife(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.model.Script("main", modeltest.Text("hello back"))

	var evs []*plumbv1.Event
	if err := e.host.Run(ctx, agent.RunInput{Input: []string{"hello"}}, false, collect(&evs)); err != nil {
		t.Fatal(err)
	}
	if len(evs) < 2 || evs[0].GetRunStarted() == nil || evs[len(evs)-1].GetRunFinished() == nil {
		t.Fatalf("the run streamed %d events; want run_started first and run_finished last", len(evs))
	}
	id := evs[0].GetThreadId()
	td, err := e.store.LoadThread(ctx, id)
	if err != nil {
		t.Fatalf("the run's new thread: %v", err)
	}
	st, err := e.host.Statuses(ctx, td)
	if err != nil || len(st) != 1 || st[0] == agent.ThreadRunning {
		t.Fatalf("statuses after the run = %v, %v; want one, not running", st, err)
	}

	var replay []*plumbv1.Event
	if err := e.host.Attach(ctx, id, 0, collect(&replay)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seqs(replay), seqs(evs)) {
		t.Errorf("Attach replayed sequences %v; want the run's %v", seqs(replay), seqs(evs))
	}

	c, err := e.host.Cancel(ctx, id)
	if err != nil || c.WasRunning {
		t.Errorf("Cancel of an idle thread = %+v, %v; want nothing running", c, err)
	}

	if err := e.host.DeleteThread(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.LoadThread(ctx, id); !errors.Is(err, agent.ErrThreadNotFound) {
		t.Errorf("after DeleteThread the thread loads with %v; want agent.ErrThreadNotFound", err)
	}
	if err := e.host.Attach(ctx, id, 0, collect(&replay)); !errors.Is(err, agent.ErrThreadNotFound) {
		t.Errorf("Attach to a deleted thread = %v; want agent.ErrThreadNotFound", err)
	}
	if err := e.host.Attach(ctx, "no-such-thread", 0, collect(&replay)); !errors.Is(err, agent.ErrThreadNotFound) || errors.Is(err, runs.ErrNoRun) {
		t.Errorf("Attach to an unknown thread = %v; want agent.ErrThreadNotFound", err)
	}
	if _, err := e.host.Cancel(ctx, id); !errors.Is(err, agent.ErrThreadNotFound) {
		t.Errorf("Cancel on a deleted thread = %v; want agent.ErrThreadNotFound", err)
	}
}
