package agentsvc_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/postgres"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
)

// sharedPostgres opens a store on a fresh database of a real PostgreSQL
// server, for replicas to share.
func sharedPostgres(t *testing.T) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), pgtest.New(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// newGate returns a gate for gated and the function that opens it; the
// gate also opens when the test ends, so that a failed test does not
// leave a model call hanging.
func newGate(t *testing.T) (<-chan struct{}, func()) {
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	return gate, open
}

// gated is a model turn that waits for gate before it is played.
func gated(gate <-chan struct{}, turn modeltest.Turn) modeltest.Turn {
	return modeltest.Turn{Dynamic: func(modeltest.Request) modeltest.Turn {
		<-gate
		return turn
	}}
}

// afterSequence is the ErrorInfo metadata after_sequence of a cut
// stream's status.
func afterSequence(t *testing.T, err error) uint64 {
	t.Helper()
	info := errorInfo(err)
	n, perr := strconv.ParseUint(info.GetMetadata()["after_sequence"], 10, 64)
	if info == nil || perr != nil {
		t.Fatalf("status %v has no after_sequence (%v)", err, perr)
	}
	return n
}

// checkContinues asserts that a re-Attach after sequence after delivered
// every later event once, in order, through a run_finished COMPLETED with
// text.
func checkContinues(t *testing.T, evs []*plumbv1.Event, after uint64, text string) {
	t.Helper()
	for i, e := range evs {
		if e.GetSequence() != after+1+uint64(i) {
			t.Fatalf("re-Attach after %d: event %d (%s) has sequence %d; want every later sequence once, in order (got %v)", after, i, kind(e), e.GetSequence(), seqs(evs))
		}
	}
	f := last(t, evs).GetRunFinished()
	if f.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || f.GetFinalText() != text {
		t.Fatalf("re-Attach ended with %v; want run_finished COMPLETED %q", last(t, evs), text)
	}
}

// toolResults counts the stored results of each tool call.
func toolResults(t *testing.T, st agent.Store, thread string) (map[string]int, *agent.ThreadData) {
	t.Helper()
	td, err := st.LoadThread(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range td.Messages {
		if m.ToolCallID != "" {
			out[m.ToolCallID]++
		}
	}
	return out, td
}

// TestShutdownHandsRunsOff: two replicas on one PostgreSQL, with a lease
// TTL of ten minutes, so that only a hand-off can explain a takeover
// within the test. Replica A runs a thread: step 1 (a counter call) is
// committed and step 2's model call is in flight when A shuts down. A
// refuses new runs (REPLICA_STOPPING) while step 2 finishes and commits
// (its counter call runs on A); then A's client stream ends UNAVAILABLE,
// REPLICA_STOPPING, naming the last sequence it delivered, and replica B
// continues the run from that checkpoint at once, to COMPLETED. No step
// runs twice, and a re-Attach on B after the named sequence sees every
// later event exactly once.
func TestShutdownHandsRunsOff(t *testing.T) {
	st := sharedPostgres(t)
	long := longLease()
	a := newEnv(t, withShared(st, "replica-a"), long)
	b := newEnv(t, withShared(st, "replica-b"), long)

	gate, openGate := newGate(t)
	a.srv.Script("main",
		modeltest.Calls(call("c1", "counter", `{}`)),
		gated(gate, modeltest.Calls(call("c2", "counter", `{}`))),
	)
	b.srv.Script("main", modeltest.Text("done on b"))
	s, err := a.c.Run(a.ctx(), runReq("", "count twice"))
	if err != nil {
		t.Fatal(err)
	}
	head := recvUntil(t, s, "run_started")
	thread := head[0].GetThreadId()
	waitFor(t, "step 2's model call on replica A", func() bool { return len(a.srv.Requests("main")) == 2 })

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard, not the test's subject
		defer cancel()
		shut <- a.svc.Shutdown(ctx)
	}()
	// A stopping replica takes no new run (and a refusal means that its
	// runs were asked to stop). Until then, a Run on the busy thread is
	// refused as busy, and starts nothing.
	var refused error
	waitFor(t, "replica A to refuse runs", func() bool {
		_, refused = a.run(runReq(thread, "another"))
		return status.Code(refused) == codes.Unavailable
	})
	openGate() // step 2 finishes and commits on A

	rest, err := recvAll(s)
	evs := append(head, rest...)
	wantStatus(t, err, codes.Unavailable, agentsvc.ReasonReplicaStopping)
	after := afterSequence(t, err)
	if after != last(t, evs).GetSequence() {
		t.Fatalf("A's stream ended naming after_sequence %d; it delivered up to %d", after, last(t, evs).GetSequence())
	}
	if slices.ContainsFunc(evs, terminal) {
		t.Fatalf("A's stream of a handed-off run has a terminal event: %v", kinds(evs, true))
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	wantStatus(t, refused, codes.Unavailable, agentsvc.ReasonReplicaStopping)

	att, err := b.c.Attach(b.ctx(), &plumbv1.AttachRequest{ThreadId: thread, AfterSequence: after})
	if err != nil {
		t.Fatal(err)
	}
	more, err := recvAll(att)
	if err != nil {
		t.Fatalf("re-Attach on replica B: %v (events %v)", err, kinds(more, true))
	}
	checkContinues(t, more, after, "done on b")
	if rs := more[0].GetRunStarted(); rs == nil || !rs.GetResumed() {
		t.Fatalf("re-Attach on B starts with %s; want B's resumed run_started", kind(more[0]))
	}

	results, td := toolResults(t, st, thread)
	if td.LastRun.Status != agent.StatusCompleted || results["c1"] != 1 || results["c2"] != 1 || len(td.Messages) != 6 {
		t.Fatalf("after the hand-off: run %s, %d messages, results %v; want COMPLETED, 6, one per call", td.LastRun.Status, len(td.Messages), results)
	}
	if a.kit.Count() != 2 || b.kit.Count() != 0 || len(a.srv.Requests("main")) != 2 || len(b.srv.Requests("main")) != 1 {
		t.Fatalf("counter ran %d times on A and %d on B, model calls %d on A and %d on B; want 2, 0, 2, 1 (no step repeated)",
			a.kit.Count(), b.kit.Count(), len(a.srv.Requests("main")), len(b.srv.Requests("main")))
	}
}

// TestFencedReplicaDeliversNothingMore: replica A runs a thread; step 1
// is committed and step 2's model call hangs when replica B (whose clock
// is an hour ahead: A's lease looks expired to it, as after A was paused
// past its TTL) takes the run over and finishes it. When A's model call
// then returns, A delivers none of that stale step: its events are
// refused by the event log's fence, so its client's stream ends ABORTED,
// LEASE_LOST, naming the last sequence it delivered, and a re-Attach on B
// after it sees B's events, each sequence once, with one meaning.
func TestFencedReplicaDeliversNothingMore(t *testing.T) {
	st := sharedPostgres(t)
	cfg := longLease()
	a := newEnv(t, withShared(st, "replica-a"), cfg)
	gate, openGate := newGate(t)
	a.srv.Script("main",
		modeltest.Calls(call("c1", "counter", `{}`)),
		gated(gate, modeltest.Turn{Text: []string{"stale ", "answer from A"}}),
	)
	s, err := a.c.Run(a.ctx(), runReq("", "count"))
	if err != nil {
		t.Fatal(err)
	}
	head := recvUntil(t, s, "run_started")
	thread := head[0].GetThreadId()
	waitFor(t, "step 2's model call on replica A", func() bool { return len(a.srv.Requests("main")) == 2 })

	b := newEnv(t, withShared(st, "replica-b"), cfg, withClock(aheadClock{time.Hour}))
	b.srv.Script("main", modeltest.Text("done on b"))
	waitFor(t, "replica B to take the run over", func() bool { return len(b.srv.Requests("main")) == 1 })
	openGate()

	rest, err := recvAll(s)
	evs := append(head, rest...)
	wantStatus(t, err, codes.Aborted, agentsvc.ReasonLeaseLost)
	after := afterSequence(t, err)
	if after != last(t, evs).GetSequence() {
		t.Fatalf("A's stream ended naming after_sequence %d; it delivered up to %d", after, last(t, evs).GetSequence())
	}
	for _, e := range evs {
		if strings.Contains(e.String(), "stale") || terminal(e) {
			t.Fatalf("the fenced replica delivered %s (%v)", kind(e), e)
		}
	}

	att, err := b.c.Attach(b.ctx(), &plumbv1.AttachRequest{ThreadId: thread, AfterSequence: after})
	if err != nil {
		t.Fatal(err)
	}
	more, err := recvAll(att)
	if err != nil {
		t.Fatalf("re-Attach on replica B: %v (events %v)", err, kinds(more, true))
	}
	checkContinues(t, more, after, "done on b")
	for _, e := range more {
		if strings.Contains(e.String(), "stale") {
			t.Fatalf("re-Attach on B delivered A's stale step: %v", e)
		}
	}
	results, td := toolResults(t, st, thread)
	if td.LastRun.Status != agent.StatusCompleted || results["c1"] != 1 || len(td.Messages) != 4 {
		t.Fatalf("after the takeover: run %s, %d messages, results %v; want COMPLETED, 4, c1 once", td.LastRun.Status, len(td.Messages), results)
	}
	if a.kit.Count() != 1 || b.kit.Count() != 0 {
		t.Fatalf("counter ran %d times on A and %d on B; want once, on A", a.kit.Count(), b.kit.Count())
	}
}

// aheadClock is the real clock plus d.
type aheadClock struct{ d time.Duration }

func (c aheadClock) Now() time.Time { return time.Now().Add(c.d) }

// TestShutdownPastGraceStillHandsOff: when the shutdown grace is over
// before the run reaches a checkpoint (here: at once, while step 2's
// model call hangs on replica A), the run is cut there, yet not
// cancelled: its record stays RUNNING at step 1's checkpoint, its lease
// is handed off, and replica B redoes the uncommitted step 2 and finishes
// the run; the committed step 1 is not repeated.
func TestShutdownPastGraceStillHandsOff(t *testing.T) {
	st := sharedPostgres(t)
	long := longLease()
	a := newEnv(t, withShared(st, "replica-a"), long)
	b := newEnv(t, withShared(st, "replica-b"), long)
	gate, _ := newGate(t)
	a.srv.Script("main",
		modeltest.Calls(call("c1", "counter", `{}`)),
		gated(gate, modeltest.Text("never sent")),
	)
	b.srv.Script("main", modeltest.Text("done on b"))
	s, err := a.c.Run(a.ctx(), runReq("", "count"))
	if err != nil {
		t.Fatal(err)
	}
	head := recvUntil(t, s, "run_started")
	thread := head[0].GetThreadId()
	waitFor(t, "step 2's model call on replica A", func() bool { return len(a.srv.Requests("main")) == 2 })

	over, cancel := context.WithCancel(context.Background())
	cancel() // the grace is over before the step commits
	if err := a.svc.Shutdown(over); err == nil {
		t.Fatal("shutdown past its grace returned nil")
	}
	rest, err := recvAll(s)
	evs := append(head, rest...)
	wantStatus(t, err, codes.Unavailable, agentsvc.ReasonReplicaStopping)
	after := afterSequence(t, err)
	if after != last(t, evs).GetSequence() || slices.ContainsFunc(evs, terminal) {
		t.Fatalf("A's stream ended naming after_sequence %d after %v; want its last sequence, no terminal event", after, kinds(evs, true))
	}
	att, err := b.c.Attach(b.ctx(), &plumbv1.AttachRequest{ThreadId: thread, AfterSequence: after})
	if err != nil {
		t.Fatal(err)
	}
	more, err := recvAll(att)
	if err != nil {
		t.Fatalf("re-Attach on replica B: %v (events %v)", err, kinds(more, true))
	}
	checkContinues(t, more, after, "done on b")
	results, td := toolResults(t, st, thread)
	if td.LastRun.Status != agent.StatusCompleted || results["c1"] != 1 || len(td.Messages) != 4 {
		t.Fatalf("after the hand-off: run %s, %d messages, results %v; want COMPLETED, 4, c1 once", td.LastRun.Status, len(td.Messages), results)
	}
	if a.kit.Count() != 1 || b.kit.Count() != 0 {
		t.Fatalf("counter ran %d times on A and %d on B; want once, on A", a.kit.Count(), b.kit.Count())
	}
}

// flakyLog is a shared store whose event log fails (not fenced: a
// database hiccup) while down is set; fails counts the refused appends.
type flakyLog struct {
	*sqlite.Store
	down  atomic.Bool
	fails atomic.Int64
}

func (f *flakyLog) AppendEvents(ctx context.Context, id string, fence *agent.Fence, evs []store.Event) error {
	if f.down.Load() {
		f.fails.Add(1)
		return errors.New("event log unreachable")
	}
	return f.Store.AppendEvents(ctx, id, fence, evs)
}

// TestEventsReachClientsOnlyOnceStored: while the event log cannot be
// written, a run's client receives nothing (not even run_started); once
// the log is back, it receives every event, each once and in order, and
// the log holds all of them.
func TestEventsReachClientsOnlyOnceStored(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "shared.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	flaky := &flakyLog{Store: st}
	e := newEnv(t, withShared(flaky, "replica-a"), withService(func(c *agentsvc.Config) { c.EventInterval = 5 * time.Millisecond }))
	e.srv.Script("main", modeltest.Calls(call("c1", "counter", `{}`)), modeltest.Text("done"))

	flaky.down.Store(true)
	s, err := e.c.Run(e.ctx(), runReq("", "count"))
	if err != nil {
		t.Fatal(err)
	}
	type recvd struct {
		evs []*plumbv1.Event
		err error
	}
	got := make(chan *plumbv1.Event, 100)
	end := make(chan recvd, 1)
	go func() {
		var r recvd
		for {
			m, err := s.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					r.err = err
				}
				end <- r
				return
			}
			r.evs = append(r.evs, m.GetEvent())
			got <- m.GetEvent()
		}
	}()
	waitFor(t, "appends to fail (or an event to arrive)", func() bool { return flaky.fails.Load() >= 3 || len(got) > 0 })
	select {
	case ev := <-got:
		t.Fatalf("the client received %s (sequence %d) while the event log could not store it", kind(ev), ev.GetSequence())
	default:
	}
	flaky.down.Store(false)
	r := <-end
	if r.err != nil {
		t.Fatalf("run stream: %v", r.err)
	}
	checkStream(t, r.evs, 1)
	if f := last(t, r.evs).GetRunFinished(); f.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("run ended with %v", last(t, r.evs))
	}
	page, err := st.ReadEvents(context.Background(), r.evs[0].GetThreadId(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var stored []uint64
	for _, ev := range page.Events {
		stored = append(stored, ev.Sequence)
	}
	if !slices.Equal(stored, seqs(r.evs)) {
		t.Fatalf("the event log holds %v; the client received %v", stored, seqs(r.evs))
	}
}

// longLease is the service option of the hand-off tests: a lease that
// outlives the test (10 minutes), so that only a hand-off, not its
// expiry, lets another replica take a run over, with fast event and
// takeover loops.
func longLease() option {
	return withService(func(c *agentsvc.Config) {
		c.LeaseTTL, c.EventInterval, c.TakeoverInterval = 10*time.Minute, 20*time.Millisecond, 20*time.Millisecond
	})
}
