package agentsvc_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/retention"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/store/postgres"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
)

// shiftClock is the real time moved forward by a shift the test sets.
type shiftClock struct {
	mu sync.Mutex
	d  time.Duration
}

func (c *shiftClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return time.Now().Add(c.d) }
func (c *shiftClock) Add(d time.Duration) {
	c.mu.Lock()
	c.d += d
	c.mu.Unlock()
}

func (e *env) newThread(ctx context.Context) string {
	e.t.Helper()
	th, err := e.c.CreateThread(ctx, &plumbv1.CreateThreadRequest{})
	if err != nil {
		e.t.Fatal(err)
	}
	return th.GetThread().GetId()
}

// TestRetentionDeletesIdleThreads: on SQLite, a sweep deletes the threads
// idle past the TTL through the thread deletion (their sandbox cleanup
// ran: OnDeleteThread saw them) and keeps a thread used since, a running
// thread (idle by its times) and the threads of a tenant whose TTL is 0.
func TestRetentionDeletesIdleThreads(t *testing.T) {
	c := &shiftClock{}
	e := newEnv(t, withClock(c), withRetention(retention.Policy{
		Default: retention.Rules{ThreadsIdle: time.Hour},
		Tenants: map[string]retention.Rules{"keeper": {}},
	}))
	idle1, idle2 := e.newThread(e.ctx()), e.newThread(e.ctx())
	kept := e.newThread(as(e.ctx(), "keeper"))
	// The running thread's checkpoints take the runtime's (real) clock:
	// two hours behind the service's once it moves.
	e.srv.Script("main", hang)
	s, err := e.c.Run(e.ctx(), runReq("", "go"))
	if err != nil {
		t.Fatal(err)
	}
	running := recvUntil(t, s, "run_started")[0].GetThreadId()
	waitFor(t, "the model call", func() bool { return len(e.srv.Requests("main")) == 1 })

	c.Add(90 * time.Minute)
	fresh := e.newThread(e.ctx())
	c.Add(30 * time.Minute)

	counts, err := e.svc.SweepRetention(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if counts.Threads != 2 || counts.Skipped != 1 || counts.Failed != 0 {
		t.Fatalf("sweep counts %+v; want 2 deleted, 1 skipped (the running thread)", counts)
	}
	got := e.deletedIDs()
	slices.Sort(got)
	want := []string{idle1, idle2}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("sandbox cleanup ran for %v; want %v", got, want)
	}
	for _, tc := range []struct {
		id   string
		ctx  context.Context
		want codes.Code
	}{
		{idle1, e.ctx(), codes.NotFound},
		{idle2, e.ctx(), codes.NotFound},
		{fresh, e.ctx(), codes.OK},
		{running, e.ctx(), codes.OK},
		{kept, as(e.ctx(), "keeper"), codes.OK},
	} {
		if _, err := e.c.GetThread(tc.ctx, &plumbv1.GetThreadRequest{ThreadId: tc.id}); status.Code(err) != tc.want {
			t.Errorf("GetThread(%s) after the sweep: %v; want %v", tc.id, err, tc.want)
		}
	}
	// A second sweep finds the running thread again and keeps it.
	if counts, err := e.svc.SweepRetention(e.ctx()); err != nil || counts.Threads != 0 || counts.Skipped != 1 {
		t.Fatalf("second sweep: %+v, %v; want only the running thread skipped", counts, err)
	}
}

// TestRetentionTwoReplicasDeleteOnce: two replicas on one PostgreSQL
// database sweep the same idle threads at once; each thread is deleted,
// and its sandbox cleaned up, exactly once.
func TestRetentionTwoReplicasDeleteOnce(t *testing.T) {
	dsn := pgtest.New(t)
	c := &shiftClock{}
	policy := withRetention(retention.Policy{Default: retention.Rules{ThreadsIdle: time.Hour}})
	replica := func(name string) *env {
		st, err := postgres.Open(context.Background(), dsn, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return newEnv(t, withShared(st, name), withClock(c), policy)
	}
	a, b := replica("replica-a"), replica("replica-b")
	const n = 30
	var ids []string
	for range n {
		ids = append(ids, a.newThread(a.ctx()))
	}
	c.Add(2 * time.Hour)

	var wg sync.WaitGroup
	counts := make([]retention.Counts, 2)
	errs := make([]error, 2)
	for i, e := range []*env{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[i], errs[i] = e.svc.SweepRetention(e.ctx())
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil || counts[i].Failed != 0 {
			t.Fatalf("replica %d sweep: %+v, %v", i, counts[i], err)
		}
	}
	// A thread another replica held for its deletion was skipped: the
	// next pass finds it gone.
	for _, e := range []*env{a, b} {
		cs, err := e.svc.SweepRetention(e.ctx())
		if err != nil {
			t.Fatal(err)
		}
		counts = append(counts, cs)
	}
	total := 0
	for _, cs := range counts {
		total += cs.Threads
	}
	deleted := append(a.deletedIDs(), b.deletedIDs()...)
	slices.Sort(deleted)
	slices.Sort(ids)
	if total != n || !slices.Equal(deleted, ids) {
		t.Fatalf("deleted %d threads (counts %+v), cleanup ran for %d ids; want each of %d once", total, counts, len(deleted), n)
	}
	if _, err := a.c.GetThread(a.ctx(), &plumbv1.GetThreadRequest{ThreadId: ids[0]}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetThread of a swept thread: %v", err)
	}
}

// TestRetentionExpiresRunEvents: on two replicas sharing PostgreSQL, once
// a run ended longer ago than run_events, a sweep deletes its shared
// event log: GetRun still answers on the other replica, and Attach there
// with an old cursor is OUT_OF_RANGE, reason EVENTS_EXPIRED.
func TestRetentionExpiresRunEvents(t *testing.T) {
	dsn := pgtest.New(t)
	c := &shiftClock{}
	policy := withRetention(retention.Policy{Default: retention.Rules{RunEvents: time.Hour}})
	replica := func(name string) *env {
		st, err := postgres.Open(context.Background(), dsn, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return newEnv(t, withShared(st, name), withClock(c), policy)
	}
	a, b := replica("replica-a"), replica("replica-b")
	a.srv.Script("main", modeltest.Text("done"))
	s, err := a.c.Run(a.ctx(), runReq("", "go"))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := recvAll(s)
	if err != nil || len(evs) == 0 || evs[len(evs)-1].GetRunFinished() == nil {
		t.Fatalf("run: %v, %v", evs, err)
	}
	thread, runID := evs[0].GetThreadId(), evs[0].GetRunStarted().GetRunId()

	// Before the TTL the log is kept and b replays the run from it.
	if cs, err := b.svc.SweepRetention(b.ctx()); err != nil || cs.RunEvents != 0 {
		t.Fatalf("sweep before the TTL: %+v, %v", cs, err)
	}
	as, err := b.c.Attach(b.ctx(), &plumbv1.AttachRequest{ThreadId: thread, AfterSequence: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := recvAll(as); err != nil || len(got) != len(evs)-1 {
		t.Fatalf("attach before the TTL: %d events, %v; want %d", len(got), err, len(evs)-1)
	}

	c.Add(2 * time.Hour)
	if cs, err := b.svc.SweepRetention(b.ctx()); err != nil || cs.RunEvents != len(evs) {
		t.Fatalf("sweep after the TTL: %+v, %v; want %d run events deleted", cs, err, len(evs))
	}
	run, err := b.c.GetRun(b.ctx(), &plumbv1.GetRunRequest{RunId: runID})
	if err != nil || run.GetRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("GetRun after the events expired: %v, %v", run, err)
	}
	as, err = b.c.Attach(b.ctx(), &plumbv1.AttachRequest{ThreadId: thread, AfterSequence: 1})
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvAll(as)
	if st := status.Convert(err); len(got) != 0 || st.Code() != codes.OutOfRange || pbconv.Reason(err) != agentsvc.ReasonEventsExpired {
		t.Fatalf("attach after the TTL: %d events, %v; want OUT_OF_RANGE %s", len(got), err, agentsvc.ReasonEventsExpired)
	}
}
