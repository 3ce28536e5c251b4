package agentsvc_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
)

// runEnds records what OnRunEnd is told.
type runEnds struct {
	mu   sync.Mutex
	ends []runhost.RunEnd
}

func (r *runEnds) record(_ context.Context, e runhost.RunEnd) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ends = append(r.ends, e)
	return nil
}

func (r *runEnds) all() []runhost.RunEnd {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runhost.RunEnd(nil), r.ends...)
}

// TestRunEndReported: OnRunEnd hears of a run's end once, from the
// replica that ran it; and when that replica dies after the run's end but
// before its report (and before releasing the lease), the replica that
// settles the expired lease reports the end as stored.
func TestRunEndReported(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "shared.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	short := withService(func(c *agentsvc.Config) {
		c.LeaseTTL, c.EventInterval = 300*time.Millisecond, 20*time.Millisecond
	})
	viewA := &crashable{sharedStore: st}
	var onA, onB runEnds
	a := newEnv(t, withShared(viewA, "replica-a"), short, withService(func(c *agentsvc.Config) {
		c.TakeoverInterval = -1
		c.OnRunEnd = func(ctx context.Context, e runhost.RunEnd) error {
			_ = onA.record(ctx, e)
			if len(onA.all()) == 2 {
				viewA.crashed.Store(true) // dies before its second report counts and before the release
			}
			return nil
		}
	}))
	newEnv(t, withShared(st, "replica-b"), short, withService(func(c *agentsvc.Config) { c.OnRunEnd = onB.record }))
	a.srv.Script("main", modeltest.Text("one"), modeltest.Text("two"))

	run := func() string {
		s, err := a.c.Run(a.ctx(), &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "hi"}}})
		if err != nil {
			t.Fatal(err)
		}
		evs, err := recvAll(s)
		if err != nil || last(t, evs).GetRunFinished().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
			t.Fatalf("run: %v %v", evs, err)
		}
		return evs[0].GetRunId()
	}
	first := run()
	if ends := onA.all(); len(ends) != 1 || ends[0].RunID != first || ends[0].Payload.(agent.RunFinished).Status != agent.StatusCompleted || ends[0].Thread != nil {
		t.Fatalf("replica a reported %+v; want run %s COMPLETED once", ends, first)
	}
	second := run() // replica a "dies" while reporting it: its lease stays unreleased
	waitFor(t, "replica b to settle the dead replica's lease", func() bool { return len(onB.all()) > 0 })
	ends := onB.all()
	if len(ends) != 1 || ends[0].RunID != second || ends[0].Thread == nil {
		t.Fatalf("replica b reported %+v; want run %s as stored", ends, second)
	}
	if f, ok := ends[0].Payload.(agent.RunFinished); !ok || f.Status != agent.StatusCompleted || f.FinalText != "two" {
		t.Fatalf("settled end %+v; want run_finished{COMPLETED, two}", ends[0].Payload)
	}
}
