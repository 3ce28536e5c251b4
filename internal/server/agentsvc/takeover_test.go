package agentsvc_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
)

// crashable is a replica's view of the shared store that goes dark at
// once when the replica "crashes": every write fails afterwards, so the
// replica neither commits, renews nor releases anything, as a killed
// process would not.
type crashable struct {
	sharedStore
	crashed atomic.Bool
}

var errCrashed = errors.New("replica crashed")

func (c *crashable) SaveCheckpoint(ctx context.Context, cp *agent.Checkpoint) error {
	if c.crashed.Load() {
		return errCrashed
	}
	return c.sharedStore.SaveCheckpoint(ctx, cp)
}

func (c *crashable) RenewLease(ctx context.Context, l store.Lease, now time.Time, ttl time.Duration) (store.Lease, error) {
	if c.crashed.Load() {
		return l, errCrashed
	}
	return c.sharedStore.RenewLease(ctx, l, now, ttl)
}

func (c *crashable) ReleaseLease(ctx context.Context, l store.Lease) error {
	if c.crashed.Load() {
		return errCrashed
	}
	return c.sharedStore.ReleaseLease(ctx, l)
}

func (c *crashable) AppendEvents(ctx context.Context, id string, f *agent.Fence, evs []store.Event) error {
	if c.crashed.Load() {
		return errCrashed
	}
	return c.sharedStore.AppendEvents(ctx, id, f, evs)
}

func (c *crashable) CancelRequests(ctx context.Context, holder string) ([]store.Lease, error) {
	if c.crashed.Load() {
		return nil, errCrashed
	}
	return c.sharedStore.CancelRequests(ctx, holder)
}

func (c *crashable) ExpiredLeases(ctx context.Context, now time.Time) ([]store.Lease, error) {
	if c.crashed.Load() {
		return nil, errCrashed
	}
	return c.sharedStore.ExpiredLeases(ctx, now)
}

// TestTakeoverAndCrossReplicaAttach: two replicas share a store. A run on
// replica A commits step 1 (a counter call) and hangs in step 2's model
// call when A crashes. A client of replica B Attaches to the thread and
// follows the run from the shared event log; once A's lease expires, B
// takes the run over from its last checkpoint and finishes it. The
// committed step is neither lost nor done again: the counter ran once
// (on A), the log has one result for it, and the Attach stream shows A's
// segment, then B's resumed one, to run_finished.
func TestTakeoverAndCrossReplicaAttach(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "shared.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	short := withService(func(c *agentsvc.Config) {
		c.LeaseTTL, c.EventInterval = 300*time.Millisecond, 20*time.Millisecond
	})
	viewA := &crashable{sharedStore: st}
	a := newEnv(t, withShared(viewA, "replica-a"), short, withService(func(c *agentsvc.Config) { c.TakeoverInterval = -1 }))
	b := newEnv(t, withShared(st, "replica-b"), short)

	a.srv.Script("main",
		modeltest.Calls(call("c1", "counter", `{}`)),
		modeltest.Turn{FirstByteDelay: time.Hour, Text: []string{"never"}},
	)
	b.srv.Script("main", modeltest.Text("done on b"))
	runCtx, stopClient := context.WithCancel(a.ctx())
	defer stopClient()
	s, err := a.c.Run(runCtx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "count"}}, Detach: true})
	if err != nil {
		t.Fatal(err)
	}
	thread := recvUntil(t, s, "run_started")[0].GetThreadId()
	// Step 2's model call is under way: step 1 is committed.
	waitFor(t, "step 2's model call on replica A", func() bool { return len(a.srv.Requests("main")) == 2 })
	viewA.crashed.Store(true)
	stopClient()

	att, err := b.c.Attach(b.ctx(), &plumbv1.AttachRequest{ThreadId: thread})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := recvAll(att)
	if err != nil {
		t.Fatalf("attach on replica B: %v (events %v)", err, evs)
	}
	var prev uint64
	resumed := 0
	for _, e := range evs {
		if e.GetSequence() <= prev {
			t.Errorf("sequence %d after %d", e.GetSequence(), prev)
		}
		prev = e.GetSequence()
		if rs := e.GetRunStarted(); rs != nil && rs.GetResumed() {
			resumed++
		}
	}
	if f := last(t, evs).GetRunFinished(); f.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || f.GetFinalText() != "done on b" || resumed != 1 || evs[0].GetRunStarted() == nil {
		t.Fatalf("attach on replica B saw %v; want A's segment, then one resumed segment to COMPLETED", evs)
	}
	td, err := st.LoadThread(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	results := 0
	for _, m := range td.Messages {
		if m.ToolCallID == "c1" {
			results++
		}
	}
	if td.LastRun.Status != agent.StatusCompleted || len(td.Messages) != 4 || results != 1 {
		t.Fatalf("after the takeover: run %s, %d messages, %d results of c1; want COMPLETED, 4, 1", td.LastRun.Status, len(td.Messages), results)
	}
	if a.kit.Count() != 1 || b.kit.Count() != 0 {
		t.Fatalf("counter ran %d times on A and %d on B; want once, on A", a.kit.Count(), b.kit.Count())
	}
}

// waitFor polls cond (a hang guard, not a performance bound).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
