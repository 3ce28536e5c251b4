package agentd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/grpccreds"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// fleetPolicy answers every model call of the fleet test from the request
// alone, so concurrent runs on one replica need no ordered script. The
// last user message names the scenario; the number of tool results after
// it is the step.
type fleetPolicy struct {
	// hang makes step 2 of a "crash" run hang (the replica that crashes).
	hang bool
	// gate holds step 1 of every "gate" run until it is closed.
	gate <-chan struct{}
	// gated counts the "gate" runs waiting at the gate; hung counts the
	// "crash" model calls hanging.
	gated, hung atomic.Int64
}

func (p *fleetPolicy) turn(r modeltest.Request) modeltest.Turn {
	msgs := r.Body.Messages
	scenario, step := "", 0
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			scenario = msgs[i].Content
			break
		}
		if msgs[i].Role == "tool" {
			step++
		}
	}
	exec := func(id, cmd string) modeltest.Turn {
		return modeltest.Calls(mcall(id, "execute", fmt.Sprintf(`{"command":%q}`, cmd)))
	}
	switch {
	case scenario == "write" && step == 0:
		return exec("w1", "echo step-w1 >> /workspace/log")
	case scenario == "gate" && step == 0:
		p.gated.Add(1)
		<-p.gate
		return exec("g1", "echo step-g1 >> /workspace/log")
	case scenario == "crash" && step == 0:
		return exec("c1", "echo step-c1 >> /workspace/log")
	case scenario == "crash" && step == 1 && p.hang:
		p.hung.Add(1)
		return modeltest.Turn{FirstByteDelay: time.Hour, Text: []string{"never"}}
	case scenario == "crash" && step == 1:
		return exec("c2", "echo step-c2 >> /workspace/log")
	case scenario == "read" && step == 0:
		return exec("r1", "cat /workspace/log")
	}
	return modeltest.Text("done " + scenario)
}

// replica is one agentd replica: Build from a config document on the
// shared PostgreSQL, AgentService on a loopback port, its own scripted
// model.
type replica struct {
	name   string
	model  *modeltest.Server
	policy *fleetPolicy
	core   *Agentd
	c      plumbv1.AgentServiceClient

	stopOnce sync.Once
	stopFn   func(ctx context.Context)
}

func startReplica(t *testing.T, name, dsn, workers string, p *fleetPolicy) *replica {
	t.Helper()
	r := &replica{name: name, model: modeltest.New(t), policy: p}
	turns := make([]modeltest.Turn, 500)
	for i := range turns {
		turns[i] = modeltest.Dynamic(p.turn)
	}
	r.model.Script("main", turns...)
	doc := fmt.Sprintf(`version: 1
storage: {sqlite_path: %s, postgres_dsn: %q, lease_ttl: 2s}
models:
  scripted: {base_url: %s, api_key_env: TEST_MODEL_KEY, model: scripted-model, retry: {max_attempts: 1}}
defaults: {model: scripted}
sandbox: {address: %q, refresh_interval: 1s, template: {memory: 256Mi, ttl: 30m}}
backends: {default: sandbox}
`, filepath.Join(t.TempDir(), "agentd.db"), dsn, r.model.URL(), workers)
	cfg, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	lg := zaptest.NewLogger(t).Named(name)
	core, err := Build(context.Background(), cfg, Options{
		Env: func(k string) string {
			if k == "TEST_MODEL_KEY" {
				return "test-key"
			}
			return ""
		},
		Logger:     lg,
		WorkerDial: append(tenant.DialOptions(), grpc.WithPerRPCCredentials(grpccreds.BearerToken(fleetWorkerToken))),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.core = core
	svc, err := agentsvc.New(core.ServiceConfig(name), agentsvc.WithLogger(lg))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(daemon.ServerAuth(fleetCredentials(t, fleetClientToken, false))...)
	plumbv1.RegisterAgentServiceServer(gs, svc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(grpccreds.BearerToken(fleetClientToken)))
	if err != nil {
		t.Fatal(err)
	}
	r.c = plumbv1.NewAgentServiceClient(conn)
	r.stopFn = func(ctx context.Context) {
		conn.Close()
		_ = svc.Shutdown(ctx)
		gs.Stop()
		<-served
		core.Close()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r.stop(ctx)
	})
	return r
}

// stop shuts the replica down; with ctx already done, its runs are
// cancelled at once.
func (r *replica) stop(ctx context.Context) { r.stopOnce.Do(func() { r.stopFn(ctx) }) }

// fleetCtx is a hang guard, not a performance bound.
func fleetCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// fleetRun runs text on thread (new when empty) through r and returns the
// thread, the events and the tool results by call id.
func fleetRun(t *testing.T, r *replica, thread, text string) (string, []*plumbv1.Event, map[string]*plumbv1.ToolResult, error) {
	stream, err := r.c.Run(fleetCtx(t), input(thread, text))
	if err != nil {
		return "", nil, nil, err
	}
	evs, err := recvEvents(stream.Recv)
	results := map[string]*plumbv1.ToolResult{}
	for _, e := range evs {
		if res := e.GetToolResult(); res != nil {
			results[res.GetId()] = res
		}
	}
	if len(evs) > 0 {
		thread = evs[0].GetThreadId()
	}
	return thread, evs, results, err
}

type eventMsg interface{ GetEvent() *plumbv1.Event }

func recvEvents[M eventMsg](recv func() (M, error)) ([]*plumbv1.Event, error) {
	var out []*plumbv1.Event
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m.GetEvent())
	}
}

func completed(evs []*plumbv1.Event) bool {
	return len(evs) > 0 && evs[len(evs)-1].GetRunFinished().GetStatus() == plumbv1.RunStatus_RUN_STATUS_COMPLETED
}

// fleetWait polls cond (a hang guard, not a performance bound).
func fleetWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// restartableWorker is a real sandbox worker on a fixed loopback address
// that can die and come back as sandboxd does: kill stops its gRPC server
// and closes its Manager, leaving its boxes running; restart makes a new
// Manager with the same worker name on the same engine, which re-adopts
// them, and serves it on the same address again.
type restartableWorker struct {
	t    *testing.T
	cli  sandbox.DockerAPI
	cfg  sandbox.Config
	name string
	addr string

	mu  sync.Mutex
	m   *sandbox.Manager
	srv *grpc.Server
}

func startRestartableWorker(t *testing.T) *restartableWorker {
	t.Helper()
	cli := sandboxtest.Docker(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	run := hex.EncodeToString(b)
	sandboxtest.SweepOnCleanup(t, cli, sandboxtest.LabelTest, run)
	sandboxtest.ReleaseImagesOnCleanup(t, cli, "w"+run)
	cfg := sandbox.Config{Worker: "w" + run, Agent: sandboxtest.Agent(t), ExtraLabels: sandboxtest.Labels(run)}
	cfg.Defaults.Image = sandboxtest.Image(t, cli)
	cfg.Defaults.MemoryBytes = 256 << 20
	w := &restartableWorker{t: t, cli: cli, cfg: cfg, name: cfg.Worker, addr: "127.0.0.1:0"}
	w.restart()
	t.Cleanup(func() {
		// The worker stops; a last Manager re-adopts and removes its boxes.
		w.kill()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		m, err := sandbox.NewManager(ctx, w.cli, w.cfg, sandbox.WithLogger(zaptest.NewLogger(t)))
		if err != nil {
			t.Errorf("worker %s: manager to clean up: %v", w.name, err)
			return
		}
		if err := m.DeleteAll(ctx); err != nil {
			t.Errorf("delete sandboxes: %v", err)
		}
		m.Close()
	})
	return w
}

// restart starts a Manager (re-adopting the worker's boxes) and serves it.
func (w *restartableWorker) restart() {
	w.t.Helper()
	m, err := sandbox.NewManager(context.Background(), w.cli, w.cfg, sandbox.WithLogger(zaptest.NewLogger(w.t).Named(w.name)))
	if err != nil {
		w.t.Fatal(err)
	}
	lis, err := net.Listen("tcp", w.addr)
	if err != nil {
		m.Close()
		w.t.Fatal(err)
	}
	srv := grpc.NewServer(daemon.ServerAuth(fleetCredentials(w.t, fleetWorkerToken, true))...)
	plumbv1.RegisterSandboxServiceServer(srv, sandboxsvc.New(m, []string{"runc"}, zaptest.NewLogger(w.t)))
	go func() { _ = srv.Serve(lis) }()
	w.mu.Lock()
	w.m, w.srv, w.addr = m, srv, lis.Addr().String()
	w.mu.Unlock()
}

// kill stops serving and closes the Manager; the boxes keep running.
func (w *restartableWorker) kill() {
	w.mu.Lock()
	m, srv := w.m, w.srv
	w.m, w.srv = nil, nil
	w.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop()
	m.Close()
}

// sandboxes lists the worker's sandboxes (its Manager's view).
func (w *restartableWorker) sandboxes() []sandbox.Info {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m.List(nil)
}

// TestFleet (issue 10 item 7): three sandbox workers and two agentd
// replicas on one PostgreSQL. Runs spread across the workers; when a
// worker is lost mid-run only the runs whose sandbox lives there fail,
// with an event naming it, and the others finish; when a replica crashes
// mid-run (its database connections cut, its lease left to expire), the
// other replica takes the thread over, a client attached there sees it
// complete, and the committed step is neither lost nor repeated; when
// the lost worker comes back (a new Manager with its name), it re-adopts
// its sandboxes and agentd uses them again, files and all.
func TestFleet(t *testing.T) {
	dsn := pgtest.New(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// Replica A reaches PostgreSQL through a forwarder, so that crashing
	// it cuts its connections: it neither commits, renews nor releases.
	pgfw := startForwarder(t, u.Host)
	ua := *u
	ua.Host = pgfw.addr

	var (
		ws    []*restartableWorker
		addrs []string
	)
	for range 3 {
		w := startRestartableWorker(t)
		ws, addrs = append(ws, w), append(addrs, w.addr)
	}
	gate := make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	t.Cleanup(openGate) // before the model servers close (cleanups run last first)
	a := startReplica(t, "replica-a", ua.String(), strings.Join(addrs, ","), &fleetPolicy{hang: true, gate: gate})
	b := startReplica(t, "replica-b", dsn, strings.Join(addrs, ","), &fleetPolicy{gate: gate})
	reps := []*replica{a, b}

	// Without its token, a worker turns a caller away.
	anon, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = plumbv1.NewSandboxServiceClient(anon).ListSandboxes(fleetCtx(t), &plumbv1.ListSandboxesRequest{})
	anon.Close()
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a worker called without a token: %v, want Unauthenticated", err)
	}

	workerOf := func(thread string) string {
		th, err := b.core.Store.(threadRecords).Thread(fleetCtx(t), thread)
		if err != nil {
			t.Fatalf("thread %s: %v", thread, err)
		}
		return sandbox.WorkerOf(th.SandboxID)
	}

	// (a) Runs on both replicas spread across the workers.
	var threads []string
	perWorker := map[string][]string{}
	for i := range 6 {
		thread, evs, results, err := fleetRun(t, reps[i%2], "", "write")
		if err != nil || !completed(evs) {
			t.Fatalf("write run %d: %v (events %v)", i, err, evs)
		}
		wantResult(t, results, "w1", false)
		threads = append(threads, thread)
		w := workerOf(thread)
		perWorker[w] = append(perWorker[w], thread)
	}
	if len(perWorker) < 2 {
		t.Fatalf("sandboxes by worker = %v; want more than one worker used", perWorker)
	}
	for _, w := range ws {
		if got := w.sandboxes(); len(got) != len(perWorker[w.name]) {
			t.Fatalf("worker %s has %v; want %d sandboxes", w.name, got, len(perWorker[w.name]))
		}
	}

	// (c) Replica A crashes mid-run; B takes the thread over.
	runCtx, stopClient := context.WithCancel(fleetCtx(t))
	defer stopClient()
	cs, err := a.c.Run(runCtx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "crash"}}, Detach: true})
	if err != nil {
		t.Fatal(err)
	}
	first, err := cs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	crashThread := first.GetEvent().GetThreadId()
	// Step 2's model call is under way on A: step 1 (c1) is committed.
	fleetWait(t, "step 2's model call on replica A", func() bool { return a.policy.hung.Load() == 1 })
	pgfw.stop()
	stopClient()
	dead, cancelDead := context.WithCancel(context.Background())
	cancelDead()
	a.stop(dead)

	att, err := b.c.Attach(fleetCtx(t), &plumbv1.AttachRequest{ThreadId: crashThread})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := recvEvents(att.Recv)
	if err != nil || !completed(evs) {
		t.Fatalf("attach on replica B: %v (events %v)", err, evs)
	}
	resumed := 0
	for _, e := range evs {
		if rs := e.GetRunStarted(); rs != nil && rs.GetResumed() {
			resumed++
		}
	}
	if resumed != 1 {
		t.Errorf("attach on replica B saw %d resumed segments; want 1 (events %v)", resumed, evs)
	}
	_, evs, results, err := fleetRun(t, b, crashThread, "read")
	if err != nil || !completed(evs) {
		t.Fatalf("read run on replica B: %v (events %v)", err, evs)
	}
	if r := wantResult(t, results, "r1", false); r != nil {
		for _, step := range []string{"step-c1", "step-c2"} {
			if n := strings.Count(r.GetContent(), step); n != 1 {
				t.Errorf("%s ran %d times; want once (log %q)", step, n, r.GetContent())
			}
		}
	}

	// (b) A worker is lost while runs are under way on every thread.
	lost := ws[0]
	for _, w := range ws {
		if len(perWorker[w.name]) > 0 {
			lost = w
			break
		}
	}
	type outcome struct {
		evs     []*plumbv1.Event
		results map[string]*plumbv1.ToolResult
		err     error
	}
	out := make([]outcome, len(threads))
	var wg sync.WaitGroup
	for i, thread := range threads {
		wg.Go(func() {
			_, evs, results, err := fleetRun(t, b, thread, "gate")
			out[i] = outcome{evs, results, err}
		})
	}
	fleetWait(t, "every run at the gate", func() bool { return b.policy.gated.Load() == int64(len(threads)) })
	lost.kill()
	openGate()
	wg.Wait()
	for i, thread := range threads {
		o := out[i]
		if o.err != nil || !completed(o.evs) {
			t.Errorf("gate run on %s: %v (events %v)", thread, o.err, o.evs)
			continue
		}
		var lostEvents []*plumbv1.SandboxLost
		for _, e := range o.evs {
			if l := e.GetSandboxLost(); l != nil {
				lostEvents = append(lostEvents, l)
			}
		}
		if workerOf(thread) == lost.name {
			wantResult(t, o.results, "g1", true, lost.name)
			if len(lostEvents) != 1 || lostEvents[0].GetWorker() != lost.name {
				t.Errorf("thread %s on the lost worker: sandbox_lost events %v; want one naming %s", thread, lostEvents, lost.name)
			}
		} else {
			wantResult(t, o.results, "g1", false)
			if len(lostEvents) != 0 {
				t.Errorf("thread %s on a live worker: sandbox_lost events %v", thread, lostEvents)
			}
		}
	}

	// (d) The worker comes back at its address under the same name: it
	// re-adopts its boxes and agentd uses them (with their files) again.
	lost.restart()
	adopted := map[string]bool{}
	for _, info := range lost.sandboxes() {
		adopted[info.ID] = true
	}
	for _, thread := range perWorker[lost.name] {
		th, err := b.core.Store.(threadRecords).Thread(fleetCtx(t), thread)
		if err != nil || !adopted[th.SandboxID] {
			t.Fatalf("thread %s: sandbox %s not re-adopted by %s (adopted %v, %v)", thread, th.SandboxID, lost.name, adopted, err)
		}

		_, evs, results, err := fleetRun(t, b, thread, "read")
		if err != nil || !completed(evs) {
			t.Fatalf("read run on %s after the worker came back: %v (events %v)", thread, err, evs)
		}
		if r := wantResult(t, results, "r1", false, "step-w1"); r != nil && strings.Contains(r.GetContent(), resetMarker) {
			t.Errorf("thread %s: workspace reset after its worker came back: %s", thread, r.GetContent())
		}
		if after := workerOf(thread); after != lost.name {
			t.Errorf("thread %s moved to worker %s", thread, after)
		}
	}
}

// The fleet's daemons check bearer tokens, as they do off loopback:
// clients present one to the replicas, the replicas another (a forwarder's,
// whose plumb-tenant header counts) to the workers.
const (
	fleetClientToken = "fleet-client-token"
	fleetWorkerToken = "fleet-worker-token"
)

func fleetCredentials(t *testing.T, token string, forwards bool) *daemon.Credentials {
	t.Helper()
	c, err := daemon.LoadCredentials("", token, forwards)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
