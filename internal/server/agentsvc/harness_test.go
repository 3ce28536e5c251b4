package agentsvc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/plumbhq/plumb/internal/daemon"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/retention"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/agent/tools"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/model/openai"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
)

// Compile-time check: the deep runtime is what cmd/agentd passes.
var _ agentsvc.Runtime = (*deep.Runtime)(nil)

// env is agentd's AgentService over bufconn: a real deep.Runtime talking
// to a scripted OpenAI-compatible server, a SQLite thread store in a
// temporary directory (or the memory store), and a gRPC client.
type env struct {
	t     *testing.T
	srv   *modeltest.Server
	kit   *tools.TestKit
	rt    *deep.Runtime
	svc   *agentsvc.Service
	c     plumbv1.AgentServiceClient
	store agent.Store
	lis   *bufconn.Listener

	mu      sync.Mutex
	deleted []*agent.ThreadData // OnDeleteThread calls
}

type setup struct {
	deep    deep.Config
	svc     agentsvc.Config
	memory  bool
	replica string // with leases in the SQLite store, as this replica
	// shared, if set, is the store instead of a SQLite file of the env's
	// own, with its event log (several replicas share it).
	shared sharedStore
	// svcOpts are passed to agentsvc.New.
	svcOpts []agentsvc.Option
	// schedules serves schedules from the SQLite store.
	schedules bool
	// retention, if set, runs the retention sweeper over the env's store
	// with this policy (passes on demand: SweepRetention).
	retention *retention.Policy
}

// withRetention runs the retention sweeper with policy p; its own passes
// are an hour apart, so the test's SweepRetention calls decide.
func withRetention(p retention.Policy) option { return func(s *setup) { s.retention = &p } }

// sharedStore is a thread store with leases and an event log.
type sharedStore interface {
	store.Threads
	store.LeaseStore
}

// withShared makes the env a replica on st: its store, leases and event
// log.
func withShared(st sharedStore, replica string) option {
	return func(s *setup) { s.shared, s.replica = st, replica }
}

type option func(*setup)

// withSchedules serves the schedule RPCs from the env's SQLite store and
// polls for due schedules every poll (negative: never).
func withSchedules(poll time.Duration) option {
	return func(s *setup) { s.schedules, s.svc.SchedulePoll = true, poll }
}

// withClock sets the service's clock (its leases' times among others).
func withClock(c agent.Clock) option {
	return func(s *setup) { s.svcOpts = append(s.svcOpts, agentsvc.WithClock(c)) }
}

func withDeep(f func(*deep.Config)) option { return func(s *setup) { f(&s.deep) } }

func withService(f func(*agentsvc.Config)) option { return func(s *setup) { f(&s.svc) } }

// withLeases makes the service take thread leases in its SQLite store as
// replica.
func withLeases(replica string) option { return func(s *setup) { s.replica = replica } }

// withMemoryStore uses agent.MemoryStore instead of SQLite.
func withMemoryStore() option { return func(s *setup) { s.memory = true } }

// gate configures interrupt_on for the main agent.
func gate(rules map[string]profile.InterruptRule) option {
	return withDeep(func(c *deep.Config) {
		if c.Agents == nil {
			c.Agents = map[string]profile.Profile{}
		}
		p := c.Agents[profile.Main]
		p.InterruptOn = rules
		c.Agents[profile.Main] = p
	})
}

func newEnv(t *testing.T, opts ...option) *env {
	t.Helper()
	e := &env{t: t, srv: modeltest.New(t), kit: tools.NewTestKit()}
	reg := tools.NewRegistry()
	if err := reg.RegisterGroup(tools.TestKitGroup, e.kit.Tools()...); err != nil {
		t.Fatal(err)
	}
	s := setup{deep: deep.Config{
		DefaultModel: "smart", Tools: reg, Backend: deep.StateBackends(),
		Limits: agent.Limits{CancelGrace: time.Second},
	}}
	for _, o := range opts {
		o(&s)
	}
	var threads runhost.Threads
	switch {
	case s.shared != nil:
		e.store, threads = s.shared, runhost.DurableThreads(s.shared)
		s.svc.Leases, s.svc.Events, s.svc.ReplicaID = s.shared, s.shared, s.replica
	case s.memory:
		ms := agent.NewMemoryStore()
		e.store, threads = ms, runhost.MemoryThreads(ms)
	default:
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "threads.db"), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		e.store, threads = st, runhost.DurableThreads(st)
		if s.schedules {
			s.svc.Schedules = st
		}
		if s.replica != "" {
			s.svc.Leases, s.svc.ReplicaID = st, s.replica
		}
	}
	if st, ok := e.store.(store.Steers); ok {
		s.svc.Steers = st
	}
	if rs, ok := e.store.(store.Runs); ok {
		s.svc.Runs = rs
	}
	if m, ok := e.store.(store.StorageMeter); ok {
		s.svc.Storage = m
	}
	if sl, ok := e.store.(store.SandboxLedger); ok {
		s.svc.Sandboxes = sl
	}
	if mr, ok := e.store.(store.MessageRanger); ok {
		s.svc.Messages = mr
	}
	if ss, ok := e.store.(store.ThreadSnapshots); ok {
		s.svc.Snapshots = ss
	}
	if l, ok := e.store.(store.Ledger); ok {
		s.svc.Ledger, s.svc.OnUsage = l, runhost.RecordUsage(e.store.(runhost.ThreadTenants), l)
	}
	s.deep.Store = e.store
	if s.retention != nil {
		rs, ok := e.store.(store.Retention)
		if !ok {
			t.Fatalf("store %T keeps no retention", e.store)
		}
		s.svc.Retention = &retention.Config{Store: rs, Policy: *s.retention, Interval: time.Hour}
	}
	m, err := openai.New(openai.Config{BaseURL: e.srv.URL(), Model: "gpt-test",
		Retry: openai.RetryConfig{MaxAttempts: 1, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond}},
		openai.WithHTTPClient(e.srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	s.deep.Models = map[string]deep.Model{"smart": {Chat: m, Name: "gpt-test"}}
	lg := zaptest.NewLogger(t)
	if e.rt, err = deep.New(s.deep, deep.WithLogger(lg)); err != nil {
		t.Fatal(err)
	}
	s.svc.Runtime, s.svc.Threads = e.rt, threads
	if s.svc.OnDeleteThread == nil {
		s.svc.OnDeleteThread = func(_ context.Context, td *agent.ThreadData) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.deleted = append(e.deleted, td)
			return nil
		}
	}
	if e.svc, err = agentsvc.New(s.svc, append([]agentsvc.Option{agentsvc.WithLogger(lg)}, s.svcOpts...)...); err != nil {
		t.Fatal(err)
	}

	e.lis = bufconn.Listen(1 << 20)
	gs := grpc.NewServer(daemon.ServerAuth(nil)...) // the tenant comes from plumb-tenant
	plumbv1.RegisterAgentServiceServer(gs, e.svc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(e.lis)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = e.svc.Shutdown(ctx)
		gs.Stop()
		<-served
	})
	e.c = e.dial()
	return e
}

// dial opens another client connection to the service (closed when the
// test ends).
func (e *env) dial(opts ...grpc.DialOption) plumbv1.AgentServiceClient {
	e.t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return e.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, opts...)
	conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return plumbv1.NewAgentServiceClient(conn)
}

// ctx is a test context with a deadline, so a broken test fails instead of
// hanging.
func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(e.t.Context(), 30*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

func call(id, name, args string) modeltest.Call {
	return modeltest.Call{ID: id, Name: name, Args: args}
}

func runReq(thread string, texts ...string) *plumbv1.RunRequest {
	r := &plumbv1.RunRequest{ThreadId: thread}
	for _, t := range texts {
		r.Input = append(r.Input, &plumbv1.InputMessage{Content: t})
	}
	return r
}

// eventStream is the client side of Run, Resume and Attach.
type eventStream[M any] interface {
	Recv() (*M, error)
}

type eventMsg interface{ GetEvent() *plumbv1.Event }

// recvAll reads a stream to its end; err is nil when it closed with OK.
func recvAll[M any, P interface {
	*M
	eventMsg
}](s eventStream[M]) ([]*plumbv1.Event, error) {
	var out []*plumbv1.Event
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, P(m).GetEvent())
	}
}

// recvUntil reads events up to and including the first of kind.
func recvUntil[M any, P interface {
	*M
	eventMsg
}](t *testing.T, s eventStream[M], k string) []*plumbv1.Event {
	t.Helper()
	var out []*plumbv1.Event
	for {
		m, err := s.Recv()
		if err != nil {
			t.Fatalf("stream ended before %s (kinds %v): %v", k, kinds(out, false), err)
		}
		e := P(m).GetEvent()
		out = append(out, e)
		if kind(e) == k {
			return out
		}
	}
}

// kind is the payload's name in docs/agent-core.md §8.
func kind(e *plumbv1.Event) string {
	m := e.ProtoReflect()
	if fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("payload")); fd != nil {
		return string(fd.Name())
	}
	return ""
}

// kinds lists payload kinds; brief skips deltas and usage.
func kinds(evs []*plumbv1.Event, brief bool) []string {
	var out []string
	for _, e := range evs {
		k := kind(e)
		if brief && (k == "message_delta" || k == "reasoning_delta" || k == "tool_call_delta" || k == "tool_output" || k == "usage") {
			continue
		}
		out = append(out, k)
	}
	return out
}

func seqs(evs []*plumbv1.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.GetSequence()
	}
	return out
}

// checkStream asserts docs/agent-core.md §8's guarantees for one stream: run_started
// first, contiguous sequences from first, one terminal event and it last,
// a complete envelope.
func checkStream(t *testing.T, evs []*plumbv1.Event, first uint64) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	if kind(evs[0]) != "run_started" {
		t.Errorf("first event %s, want run_started", kind(evs[0]))
	}
	for i, e := range evs {
		if e.GetSequence() != first+uint64(i) {
			t.Errorf("event %d (%s) sequence %d, want %d", i, kind(e), e.GetSequence(), first+uint64(i))
		}
		if e.GetRunId() == "" || e.GetThreadId() == "" || e.GetAgentPath() == "" || e.GetTimestamp() == nil {
			t.Errorf("event %d (%s) has an incomplete envelope", i, kind(e))
		}
		if terminal(e) != (i == len(evs)-1) {
			t.Errorf("event %d of %d is %s", i, len(evs), kind(e))
		}
	}
}

func terminal(e *plumbv1.Event) bool {
	return e.GetRunFinished() != nil || e.GetInterrupted() != nil || e.GetError() != nil
}

// last returns the final event.
func last(t *testing.T, evs []*plumbv1.Event) *plumbv1.Event {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	return evs[len(evs)-1]
}

// wantStatus asserts a gRPC code and, if reason is set, the ErrorInfo
// reason.
func wantStatus(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("status %v (%v), want %v", status.Code(err), err, code)
	}
	if reason != "" && pbconv.Reason(err) != reason {
		t.Fatalf("reason %q (%v), want %q", pbconv.Reason(err), err, reason)
	}
}

func errorInfo(err error) *errdetails.ErrorInfo {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// fields lists the BadRequest field violations of err.
func fields(err error) []string {
	var out []string
	for _, v := range pbconv.FieldViolations(err) {
		out = append(out, v.Field)
	}
	return out
}

// run sends a Run and reads its stream to the end.
func (e *env) run(req *plumbv1.RunRequest) ([]*plumbv1.Event, error) {
	e.t.Helper()
	s, err := e.c.Run(e.ctx(), req)
	if err != nil {
		return nil, err
	}
	return recvAll(s)
}

// mustRun is run for a request that must start.
func (e *env) mustRun(req *plumbv1.RunRequest) []*plumbv1.Event {
	e.t.Helper()
	evs, err := e.run(req)
	if err != nil {
		e.t.Fatalf("run: %v (kinds %v)", err, kinds(evs, true))
	}
	return evs
}

func (e *env) resume(req *plumbv1.ResumeRequest) ([]*plumbv1.Event, error) {
	e.t.Helper()
	s, err := e.c.Resume(e.ctx(), req)
	if err != nil {
		return nil, err
	}
	return recvAll(s)
}

func (e *env) thread(id string, view plumbv1.ThreadView) *plumbv1.Thread {
	e.t.Helper()
	res, err := e.c.GetThread(e.ctx(), &plumbv1.GetThreadRequest{ThreadId: id, View: view})
	if err != nil {
		e.t.Fatalf("get thread %s: %v", id, err)
	}
	return res.GetThread()
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *env) deletedIDs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, td := range e.deleted {
		out = append(out, td.Thread.ID)
	}
	return slices.Clone(out)
}
