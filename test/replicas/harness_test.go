// Package replicas runs plumb as a cluster does (issue 21): two real agentd
// processes on one real PostgreSQL, sharing one real sandboxd worker and a
// scripted model, while a replica is stopped gracefully, killed, paused
// past its lease, or while clients ask the replica that does not run a
// thread to cancel, delete or follow it.
package replicas

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon/daemontest"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

var bins map[string]string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "plumb-fleet")
	if err != nil {
		panic(err)
	}
	bins, err = daemontest.BuildCommands(dir, "agentd", "sandboxd", "sandbox-agent")
	if err != nil {
		panic(err)
	}
	// The server the preview test runs in a box.
	if bins["previewserver"], err = daemontest.BuildStatic(dir, "github.com/plumbhq/plumb/test/previewserver"); err != nil {
		panic(err)
	}
	code := pgtest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// Tokens of the fleet's daemons: clients present one to the replicas, the
// replicas another to the worker.
const (
	agentdToken   = "fleet-agentd-token"
	sandboxdToken = "fleet-sandboxd-token"
)

// replicaHeader is the header each replica adds to its model requests
// (models.<key>.headers), so that the policy knows which replica asks.
const replicaHeader = "X-Fleet-Replica"

// steps is how many tool steps every scenario's run takes: step k (from
// 1) runs `echo <scenario>-step-k >> /workspace/log`, then the model
// answers with text and the run completes.
const steps = 3

// textOnly starts the scenarios whose runs the model answers with text
// at once, without tool steps (scheduled runs).
const textOnly = "text-only:"

// stepLine is the line step k of scenario appends to the workspace log.
func stepLine(scenario string, k int) string { return fmt.Sprintf("%s-step-%d", scenario, k) }

// hangGuard bounds every wait of the suite. It tells a hung fleet from a
// slow one on a loaded machine, so it is generous; it is not a
// performance bound.
const hangGuard = 8 * time.Minute

// policy answers every model call of the fleet from the request alone,
// so that the replicas need no ordered script and either can continue a
// run: the last user message names the scenario, the number of tool
// results after it is the step, the replicaHeader the replica asking.
// A hold stops the call of one scenario, replica and step.
type policy struct {
	mu    sync.Mutex
	holds map[string]*hold
}

// hold is a model call the test controls. A gate answers as usual once
// released; a hang never answers (its call ends when the replica gives up
// on it or dies).
type hold struct {
	hang    bool
	arrived chan struct{}
	release chan struct{}

	arriveOnce, releaseOnce sync.Once
}

func holdKey(scenario, replica string, step int) string {
	return fmt.Sprintf("%s/%s/%d", scenario, replica, step)
}

// gate holds the model call for step (0 = the first call) of scenario on
// replica until Open.
func (p *policy) gate(scenario, replica string, step int) *hold {
	return p.add(scenario, replica, step, false)
}

// hang makes the model call for step of scenario on replica never answer.
func (p *policy) hang(scenario, replica string, step int) *hold {
	return p.add(scenario, replica, step, true)
}

func (p *policy) add(scenario, replica string, step int, hang bool) *hold {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := &hold{hang: hang, arrived: make(chan struct{}), release: make(chan struct{})}
	p.holds[holdKey(scenario, replica, step)] = h
	return h
}

// openAll releases every gate (the suite's cleanup, so no call stays held).
func (p *policy) openAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.holds {
		h.open()
	}
}

// open releases a gate.
func (h *hold) open() { h.releaseOnce.Do(func() { close(h.release) }) }

// wait blocks until the held call has arrived.
func (h *hold) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-h.arrived:
	case <-time.After(hangGuard):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func (p *policy) turn(r modeltest.Request) modeltest.Turn {
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
	p.mu.Lock()
	h := p.holds[holdKey(scenario, r.Header.Get(replicaHeader), step)]
	p.mu.Unlock()
	if h != nil {
		h.arriveOnce.Do(func() { close(h.arrived) })
		if h.hang {
			// Aborted when the replica goes away or the server closes.
			return modeltest.Turn{FirstByteDelay: time.Hour, Text: []string{"never"}}
		}
		<-h.release
	}
	if strings.HasPrefix(scenario, textOnly) {
		return modeltest.Text("done " + scenario)
	}
	if step < steps {
		cmd := fmt.Sprintf("echo %s >> /workspace/log", stepLine(scenario, step+1))
		return modeltest.Calls(modeltest.Call{ID: fmt.Sprintf("call-%d", step+1), Name: "execute", Args: fmt.Sprintf(`{"command":%q}`, cmd)})
	}
	return modeltest.Text("done " + scenario)
}

// fleet is two agentd replicas, "a" and "b", on one PostgreSQL database,
// sharing one sandboxd worker and one scripted model.
type fleet struct {
	policy  *policy
	sandbox plumbv1.SandboxServiceClient
	// worker is the connection to the sandboxd worker.
	worker grpc.ClientConnInterface
	a, b   *replica
	ctx    context.Context
	// model is the scripted model both replicas call.
	model *modeltest.Server
}

// replica is one agentd process and a client of it.
type replica struct {
	name string
	proc *daemontest.Proc
	c    plumbv1.AgentServiceClient
}

// config is what a fleet's replicas are started with.
type config struct {
	// leaseTTL is storage.lease_ttl of both replicas.
	leaseTTL time.Duration
	// graceA is replica a's server.shutdown_grace (b's is short).
	graceA time.Duration
	// extra is more YAML for both replicas' config (top-level sections
	// the base config does not have).
	extra string
}

func startFleet(t *testing.T, cfg config) *fleet {
	t.Helper()
	dsn := pgtest.New(t)
	dir := t.TempDir()
	agentdTokens := daemontest.WriteToken(t, dir, "agentd.token", agentdToken)
	sandboxdTokens := daemontest.WriteToken(t, dir, "sandboxd.token", sandboxdToken)
	sd := daemontest.StartSandboxd(t, bins["sandboxd"], dir, sandboxdTokens)

	p := &policy{holds: map[string]*hold{}}
	model := modeltest.New(t)
	turns := make([]modeltest.Turn, 1000)
	for i := range turns {
		turns[i] = modeltest.Dynamic(p.turn)
	}
	model.Script("main", turns...)
	t.Setenv("FLEET_MODEL_KEY", "test-key")
	// The same secrets key on both replicas: it seals the webhook signing
	// keys in the shared store.
	t.Setenv("PLUMB_SECRETS_KEY", base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32))))

	ctx, cancel := context.WithTimeout(t.Context(), hangGuard)
	t.Cleanup(cancel)
	worker := daemontest.Dial(t, sd.GRPCAddr, sandboxdToken)
	f := &fleet{policy: p, sandbox: plumbv1.NewSandboxServiceClient(worker), worker: worker, ctx: ctx, model: model}
	// Both replicas serve previews, signed with the same key.
	previewKey := filepath.Join(dir, "preview.key")
	if err := os.WriteFile(previewKey, []byte(strings.Repeat("f", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(name string, grace time.Duration) *replica {
		doc := fmt.Sprintf(`version: 1
storage: {sqlite_path: %s, postgres_dsn: %q, lease_ttl: %s}
models:
  scripted:
    base_url: %s
    api_key_env: FLEET_MODEL_KEY
    model: scripted-model
    headers: {%s: %s}
    first_byte_timeout: 10m
    retry: {max_attempts: 1}
defaults: {model: scripted}
sandbox:
  address: %s
  template: {memory: 256Mi, ttl: 30m}
backends: {default: sandbox}
server: {schedule_poll: 200ms}
webhooks: {allow_http: true, allow: [127.0.0.0/8]}
`, filepath.Join(dir, name+".db"), dsn, cfg.leaseTTL, model.URL(), replicaHeader, name, sd.GRPCAddr) + cfg.extra
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		proc := daemontest.Start(t, bins["agentd"], "--config", path, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
			"--log-format", "json", "--shutdown-grace", grace.String(),
			"--token-file", agentdTokens, "--sandboxd-token-file", sandboxdTokens,
			"--preview-addr", "127.0.0.1:0", "--preview-key-file", previewKey)
		return &replica{name: name, proc: proc, c: plumbv1.NewAgentServiceClient(daemontest.Dial(t, proc.GRPCAddr, agentdToken))}
	}
	f.a = start("a", cfg.graceA)
	f.b = start("b", 10*time.Second)
	t.Cleanup(func() {
		// Runs first (cleanups run last first): no model call stays held
		// while the replicas stop, and a failure shows what they logged.
		p.openAll()
		if t.Failed() {
			for _, r := range []*replica{f.a, f.b} {
				t.Logf("replica %s logged:\n%s", r.name, tail(r.proc.Stderr(), 40))
			}
		}
	})
	return f
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// run starts scenario's run on a new thread through r and follows its
// stream.
func (f *fleet) run(t *testing.T, r *replica, scenario string) *stream {
	t.Helper()
	rs, err := r.c.Run(f.ctx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: scenario}}})
	if err != nil {
		t.Fatalf("run %s on replica %s: %v", scenario, r.name, err)
	}
	return follow("run on "+r.name, 0, rs.Recv)
}

// attach attaches to thread through r after sequence after.
func (f *fleet) attach(t *testing.T, r *replica, thread string, after uint64) *stream {
	t.Helper()
	as, err := r.c.Attach(f.ctx, &plumbv1.AttachRequest{ThreadId: thread, AfterSequence: after})
	if err != nil {
		t.Fatalf("attach to %s on replica %s: %v", thread, r.name, err)
	}
	return follow(fmt.Sprintf("attach on %s after %d", r.name, after), after, as.Recv)
}

// stepLog returns the lines of the thread's workspace log, read from its
// sandbox through sandboxd.
func (f *fleet) stepLog(t *testing.T, thread string) []string {
	t.Helper()
	th, err := f.b.c.GetThread(f.ctx, &plumbv1.GetThreadRequest{ThreadId: thread})
	if err != nil {
		t.Fatalf("get thread %s: %v", thread, err)
	}
	rd, err := f.sandbox.Read(f.ctx, &plumbv1.ReadRequest{SandboxId: th.GetThread().GetSandboxId(), Path: "/workspace/log"})
	if err != nil {
		t.Fatalf("read the workspace log of thread %s: %v", thread, err)
	}
	return strings.Split(strings.TrimRight(rd.GetContent(), "\n"), "\n")
}

// wantSteps fails t unless each of the given steps of scenario appears
// exactly once in the thread's workspace log.
func (f *fleet) wantSteps(t *testing.T, thread, scenario string, ks ...int) {
	t.Helper()
	lines := f.stepLog(t, thread)
	for _, k := range ks {
		line := stepLine(scenario, k)
		if n := countLines(lines, line); n != 1 {
			t.Errorf("%s ran %d times; want once (workspace log %q)", line, n, lines)
		}
	}
}

func countLines(lines []string, line string) int {
	n := 0
	for _, l := range lines {
		if l == line {
			n++
		}
	}
	return n
}

// stream is what one client stream delivered, read in the background.
type stream struct {
	name  string
	after uint64

	mu     sync.Mutex
	events []*plumbv1.Event
	err    error // how it ended: nil is a clean end of stream
	done   chan struct{}
}

func follow[M interface{ GetEvent() *plumbv1.Event }](name string, after uint64, recv func() (M, error)) *stream {
	s := &stream{name: name, after: after, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			m, err := recv()
			s.mu.Lock()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					s.err = err
				}
				s.mu.Unlock()
				return
			}
			s.events = append(s.events, m.GetEvent())
			s.mu.Unlock()
		}
	}()
	return s
}

// last returns the last sequence the stream delivered (its after_sequence
// when none).
func (s *stream) last() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.events) == 0 {
		return s.after
	}
	return s.events[len(s.events)-1].GetSequence()
}

// thread returns the thread of the stream's first event.
func (s *stream) thread(t *testing.T) string {
	t.Helper()
	waitFor(t, s.name+"'s first event", func() bool { return s.last() > s.after })
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events[0].GetThreadId()
}

// end waits for the stream to end and returns its events and error.
func (s *stream) end(t *testing.T) ([]*plumbv1.Event, error) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(hangGuard):
		t.Fatalf("timed out waiting for the end of the %s stream (last sequence %d)", s.name, s.last())
	}
	return s.events, s.err
}

// finished waits for the stream to end and fails t unless it ended
// cleanly with run_finished{want}.
func (s *stream) finished(t *testing.T, want plumbv1.RunStatus) []*plumbv1.Event {
	t.Helper()
	evs, err := s.end(t)
	var got plumbv1.RunStatus
	if len(evs) > 0 {
		got = evs[len(evs)-1].GetRunFinished().GetStatus()
	}
	if err != nil || got != want {
		t.Errorf("%s stream ended with %v after %d events, the last run_finished %v; want a clean end after run_finished %v (events %v)",
			s.name, err, len(evs), got, want, evs)
	}
	return evs
}

// stoppedWith waits for the stream to end and fails t unless it ended with
// status code, ErrorInfo reason and metadata after_sequence naming the
// last sequence it delivered. It returns that sequence.
func (s *stream) stoppedWith(t *testing.T, code codes.Code, reason string) uint64 {
	t.Helper()
	evs, err := s.end(t)
	last := s.last()
	st := status.Convert(err)
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	if err == nil || st.Code() != code || info.GetReason() != reason || info.GetMetadata()["after_sequence"] != strconv.FormatUint(last, 10) {
		var lastEvent *plumbv1.Event
		if len(evs) > 0 {
			lastEvent = evs[len(evs)-1]
		}
		t.Fatalf("%s stream ended with %v (ErrorInfo %v) after sequence %d (last event %v); want %v, reason %s, after_sequence %d",
			s.name, err, info, last, lastEvent, code, reason, last)
	}
	return last
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkSequences fails t unless the streams of one run tell one story:
// each delivered consecutive sequences from its after_sequence + 1, no
// sequence carries two different events across them, and together they
// deliver 1..N, N being the run's terminal event.
func checkSequences(t *testing.T, streams ...*stream) {
	t.Helper()
	bySeq := map[uint64]*plumbv1.Event{}
	from := map[uint64]string{}
	var terminal uint64
	runID := ""
	for _, s := range streams {
		s.mu.Lock()
		evs := slices.Clone(s.events)
		s.mu.Unlock()
		next := s.after + 1
		for _, e := range evs {
			if e.GetSequence() != next {
				t.Errorf("%s delivered sequence %d where %d was next", s.name, e.GetSequence(), next)
			}
			next = e.GetSequence() + 1
			if runID == "" {
				runID = e.GetRunId()
			}
			if e.GetRunId() != runID {
				t.Errorf("%s delivered event %d of run %s; the run is %s", s.name, e.GetSequence(), e.GetRunId(), runID)
			}
			if e.GetRunFinished() != nil || e.GetError() != nil || e.GetInterrupted() != nil {
				terminal = e.GetSequence()
			}
			// The meaning of an event is all of it but when it was sent.
			m := proto.Clone(e).(*plumbv1.Event)
			m.Timestamp = nil
			if prev, ok := bySeq[e.GetSequence()]; ok && !proto.Equal(prev, m) {
				t.Errorf("sequence %d means two things: %v (%s) and %v (%s)", e.GetSequence(), prev, from[e.GetSequence()], m, s.name)
				continue
			}
			bySeq[e.GetSequence()], from[e.GetSequence()] = m, s.name
		}
	}
	if terminal == 0 {
		t.Errorf("no stream delivered the run's terminal event (run_finished, error or interrupted)")
		return
	}
	for seq := uint64(1); seq <= terminal; seq++ {
		if bySeq[seq] == nil {
			t.Errorf("no stream delivered sequence %d of 1..%d", seq, terminal)
		}
	}
	if len(bySeq) != int(terminal) {
		t.Errorf("the streams delivered %d sequences; the run's terminal event is %d", len(bySeq), terminal)
	}
}

// logged waits until r's log has a line whose msg is msg.
func logged(t *testing.T, r *replica, msg string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("replica %s to log %q", r.name, msg), func() bool {
		return strings.Contains(r.proc.Stderr(), fmt.Sprintf(`"msg":%q`, msg))
	})
}
