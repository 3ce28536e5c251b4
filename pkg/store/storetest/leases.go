package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/store"
)

// LeaseStore is a durable store with leases.
type LeaseStore interface {
	store.Threads
	store.LeaseStore
}

// RunLeases runs the store.Leases contract against a fresh store from
// newStore: one live holder at a time, renewal and release by the holder
// only, a new epoch for every new claim, expiry without release listed
// for takeover, and concurrent acquisitions of which exactly one wins.
func RunLeases(t *testing.T, newStore func(t *testing.T) LeaseStore) {
	t.Helper()
	const ttl = 15 * time.Second
	thread := func(t *testing.T, s LeaseStore, id string) {
		t.Helper()
		if err := s.CreateThread(ctx(), agent.Thread{ID: id, CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("OneHolder", func(t *testing.T) {
		s := newStore(t)
		thread(t, s, "th")
		a, err := s.AcquireLease(ctx(), "th", "replica-a", t0, ttl)
		if err != nil || a.Epoch != 1 || a.Holder != "replica-a" || !a.Expires.Equal(t0.Add(ttl)) {
			t.Fatalf("first acquire: %+v, %v", a, err)
		}
		var held *store.HeldError
		if _, err := s.AcquireLease(ctx(), "th", "replica-b", t0.Add(ttl/2), ttl); !errors.As(err, &held) || held.Lease.Holder != "replica-a" {
			t.Fatalf("acquire of a live lease by another holder: %v, want HeldError naming replica-a", err)
		}
		again, err := s.AcquireLease(ctx(), "th", "replica-a", t0.Add(ttl/2), ttl)
		if err != nil || again.Epoch != a.Epoch || !again.Expires.Equal(t0.Add(ttl/2+ttl)) {
			t.Fatalf("re-acquire by the holder: %+v, %v (want the same epoch, extended)", again, err)
		}
		if _, err := s.AcquireLease(ctx(), "missing", "replica-a", t0, ttl); !errors.Is(err, agent.ErrThreadNotFound) {
			t.Fatalf("lease of a missing thread: %v", err)
		}
	})

	t.Run("RenewAndRelease", func(t *testing.T) {
		s := newStore(t)
		thread(t, s, "th")
		a, err := s.AcquireLease(ctx(), "th", "replica-a", t0, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if a, err = s.RenewLease(ctx(), a, t0.Add(10*time.Second), ttl); err != nil || !a.Expires.Equal(t0.Add(25*time.Second)) {
			t.Fatalf("renew: %+v, %v", a, err)
		}
		if err := s.ReleaseLease(ctx(), a); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RenewLease(ctx(), a, t0.Add(11*time.Second), ttl); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("renew after release: %v, want ErrLeaseLost", err)
		}
		b, err := s.AcquireLease(ctx(), "th", "replica-b", t0.Add(12*time.Second), ttl)
		if err != nil || b.Epoch != a.Epoch+1 {
			t.Fatalf("acquire after release: %+v, %v (want epoch %d)", b, err, a.Epoch+1)
		}
		if err := s.ReleaseLease(ctx(), a); err != nil {
			t.Fatalf("release of a superseded lease: %v", err)
		}
		if _, err := s.RenewLease(ctx(), b, t0.Add(13*time.Second), ttl); err != nil {
			t.Fatalf("b's lease after a's late release: %v", err)
		}
	})

	t.Run("ExpiryAndTakeover", func(t *testing.T) {
		s := newStore(t)
		thread(t, s, "dead")
		thread(t, s, "alive")
		thread(t, s, "done")
		dead, err := s.AcquireLease(ctx(), "dead", "replica-a", t0, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireLease(ctx(), "alive", "replica-b", t0.Add(10*time.Second), ttl); err != nil {
			t.Fatal(err)
		}
		done, err := s.AcquireLease(ctx(), "done", "replica-a", t0, ttl)
		if err != nil || s.ReleaseLease(ctx(), done) != nil {
			t.Fatalf("done: %v", err)
		}
		at := t0.Add(ttl + time.Second)
		expired, err := s.ExpiredLeases(ctx(), at)
		if err != nil || len(expired) != 1 || expired[0].ThreadID != "dead" || expired[0].Holder != "replica-a" || expired[0].Epoch != dead.Epoch {
			t.Fatalf("expired leases: %+v, %v; want only dead's", expired, err)
		}
		if _, err := s.RenewLease(ctx(), dead, at, ttl); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("renew of an expired lease: %v, want ErrLeaseLost", err)
		}
		taken, err := s.AcquireLease(ctx(), "dead", "replica-b", at, ttl)
		if err != nil || taken.Epoch != dead.Epoch+1 {
			t.Fatalf("takeover: %+v, %v", taken, err)
		}
		if expired, err := s.ExpiredLeases(ctx(), at); err != nil || len(expired) != 0 {
			t.Fatalf("expired after takeover: %+v, %v", expired, err)
		}
	})

	t.Run("HandOff", func(t *testing.T) {
		s := newStore(t)
		thread(t, s, "th")
		thread(t, s, "other")
		a, err := s.AcquireLease(ctx(), "th", "replica-a", t0, ttl)
		if err != nil {
			t.Fatal(err)
		}
		other, err := s.AcquireLease(ctx(), "other", "replica-a", t0, ttl)
		if err != nil {
			t.Fatal(err)
		}
		at := t0.Add(time.Second) // long before the TTL
		if err := s.HandOffLease(ctx(), a, at); err != nil {
			t.Fatalf("hand off: %v", err)
		}
		expired, err := s.ExpiredLeases(ctx(), at)
		if err != nil || len(expired) != 1 || expired[0].ThreadID != "th" || expired[0].Holder != "replica-a" || expired[0].Epoch != a.Epoch {
			t.Fatalf("expired leases right after a hand-off: %+v, %v; want th's only", expired, err)
		}
		// Until another holder takes it, the handed-off lease still fences
		// its holder's commits (the events flushed last).
		cp := &agent.Checkpoint{ThreadID: "th", Phase: agent.PhaseModel, Append: []agent.Message{msg(model.RoleAssistant, "a1")},
			Run: run("r-th", agent.StatusRunning), Fence: a.Fence(), CreatedAt: at}
		if err := s.SaveCheckpoint(ctx(), cp); err != nil {
			t.Fatalf("checkpoint under a handed-off lease nobody took: %v", err)
		}
		b, err := s.AcquireLease(ctx(), "th", "replica-b", at, ttl)
		if err != nil || b.Epoch != a.Epoch+1 {
			t.Fatalf("takeover of a handed-off lease: %+v, %v (want epoch %d)", b, err, a.Epoch+1)
		}
		if err := s.HandOffLease(ctx(), a, at); err != nil {
			t.Fatalf("hand-off of a superseded lease: %v", err)
		}
		if _, err := s.RenewLease(ctx(), b, at.Add(time.Second), ttl); err != nil {
			t.Fatalf("b's lease after a's late hand-off: %v", err)
		}
		if err := s.ReleaseLease(ctx(), b); err != nil {
			t.Fatal(err)
		}
		if err := s.HandOffLease(ctx(), b, at.Add(2*time.Second)); err != nil {
			t.Fatal(err)
		}
		if expired, err := s.ExpiredLeases(ctx(), at.Add(2*time.Second)); err != nil || len(expired) != 0 {
			t.Fatalf("a released lease handed off: listed %+v, %v; want nothing", expired, err)
		}
		if _, err := s.RenewLease(ctx(), other, at, ttl); err != nil {
			t.Fatalf("another thread's lease after the hand-off: %v", err)
		}
	})

	t.Run("Fencing", func(t *testing.T) {
		s := newStore(t)
		thread(t, s, "th")
		thread(t, s, "free")
		cp := func(id string, base int, f *agent.Fence, text string) error {
			return s.SaveCheckpoint(ctx(), &agent.Checkpoint{
				ThreadID: id, Phase: agent.PhaseModel, Base: base, Append: []agent.Message{msg(model.RoleAssistant, text)},
				Run: run("r-"+id, agent.StatusRunning), Fence: f, CreatedAt: t0,
			})
		}
		if err := cp("free", 0, &agent.Fence{Holder: "replica-a", Epoch: 1}, "x"); !errors.Is(err, store.ErrLeaseLost) || !errors.Is(err, agent.ErrLeaseLost) {
			t.Fatalf("fenced checkpoint of a thread without a lease: %v, want ErrLeaseLost", err)
		}
		if err := cp("free", 0, nil, "x"); err != nil {
			t.Fatalf("unfenced checkpoint: %v", err)
		}
		a, err := s.AcquireLease(ctx(), "th", "replica-a", t0, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := cp("th", 0, a.Fence(), "a1"); err != nil {
			t.Fatalf("checkpoint under the live lease: %v", err)
		}
		// Expired but not taken over: the holder is still the only writer.
		if err := cp("th", 1, a.Fence(), "a2"); err != nil {
			t.Fatalf("checkpoint under an expired lease nobody took: %v", err)
		}
		b, err := s.AcquireLease(ctx(), "th", "replica-b", t0.Add(ttl+time.Second), ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := cp("th", 2, a.Fence(), "a3"); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("checkpoint under a superseded lease: %v, want ErrLeaseLost", err)
		}
		if err := cp("th", 2, &agent.Fence{Holder: "replica-a", Epoch: b.Epoch}, "a3"); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("checkpoint naming the current epoch under another holder: %v, want ErrLeaseLost", err)
		}
		d, err := s.LoadThread(ctx(), "th")
		if err != nil || len(d.Messages) != 2 || d.Messages[1].Content != "a2" {
			t.Fatalf("after refused checkpoints: %+v, %v; want a1, a2 only", d, err)
		}
		if err := cp("th", 2, b.Fence(), "b1"); err != nil {
			t.Fatalf("checkpoint under the new lease: %v", err)
		}
		if err := s.ReleaseLease(ctx(), b); err != nil {
			t.Fatal(err)
		}
		if err := cp("th", 3, b.Fence(), "b2"); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("checkpoint under a released lease: %v, want ErrLeaseLost", err)
		}
	})

	t.Run("FencingRacesTakeover", func(t *testing.T) {
		// A holder commits as fast as it can while another takes the
		// thread over: once the takeover is in, no commit of the old
		// holder may land, so the new holder's first commit, built on
		// what it loaded after acquiring, never conflicts.
		s := newStore(t)
		for round := range 5 {
			id := "race-" + string(rune('a'+round))
			thread(t, s, id)
			a, err := s.AcquireLease(ctx(), id, "replica-a", t0, ttl)
			if err != nil {
				t.Fatal(err)
			}
			quit, stop := make(chan struct{}), make(chan error, 1)
			go func() {
				for i := 0; ; i++ {
					select {
					case <-quit:
						stop <- nil
						return
					default:
					}
					err := s.SaveCheckpoint(ctx(), &agent.Checkpoint{
						ThreadID: id, Phase: agent.PhaseTools, Base: i, Append: []agent.Message{msg(model.RoleTool, "a")},
						Run: run("r-"+id, agent.StatusRunning), Fence: a.Fence(), CreatedAt: t0,
					})
					if errors.Is(err, store.ErrBusy) {
						i--
						continue
					}
					if err != nil {
						stop <- err
						return
					}
				}
			}()
			retry := func(f func() error) error {
				for {
					if err := f(); !errors.Is(err, store.ErrBusy) {
						return err
					}
				}
			}
			var b store.Lease
			if err := retry(func() (err error) {
				b, err = s.AcquireLease(ctx(), id, "replica-b", t0.Add(ttl+time.Second), ttl)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			var d *agent.ThreadData
			if err := retry(func() (err error) { d, err = s.LoadThread(ctx(), id); return err }); err != nil {
				t.Fatal(err)
			}
			err = retry(func() error {
				return s.SaveCheckpoint(ctx(), &agent.Checkpoint{
					ThreadID: id, Phase: agent.PhaseTools, Base: len(d.Messages), Append: []agent.Message{msg(model.RoleTool, "b")},
					Run: run("r-"+id, agent.StatusRunning), Fence: b.Fence(), CreatedAt: t0,
				})
			})
			close(quit)
			if werr := <-stop; werr != nil && !errors.Is(werr, store.ErrLeaseLost) {
				t.Fatalf("round %d: the old holder's commits ended with %v, want ErrLeaseLost", round, werr)
			}
			if err != nil {
				t.Fatalf("round %d: the new holder's first commit: %v (a commit of the old holder landed after the takeover)", round, err)
			}
			if err := retry(func() (err error) { d, err = s.LoadThread(ctx(), id); return err }); err != nil {
				t.Fatal(err)
			}
			if last := d.Messages[len(d.Messages)-1]; last.Content != "b" {
				t.Fatalf("round %d: the log ends with %q after the new holder's commit: the old holder committed after the takeover", round, last.Content)
			}
		}
	})

	t.Run("RunEvents", func(t *testing.T) {
		s := newStore(t)
		thread(t, s, "th")
		thread(t, s, "quiet")
		ev := func(run string, seq uint64, start, term bool) store.Event {
			return store.Event{RunID: run, Sequence: seq, Start: start, Terminal: term, Body: []byte(fmt.Sprintf("%s/%d", run, seq))}
		}
		seqs := func(p store.EventPage) []uint64 {
			var out []uint64
			for _, e := range p.Events {
				if string(e.Body) != fmt.Sprintf("%s/%d", e.RunID, e.Sequence) {
					t.Errorf("event %s/%d has body %q", e.RunID, e.Sequence, e.Body)
				}
				out = append(out, e.Sequence)
			}
			return out
		}
		a, err := s.AcquireLease(ctx(), "th", "replica-a", t0, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AppendEvents(ctx(), "th", a.Fence(), []store.Event{ev("r1", 1, true, false), ev("r1", 2, false, false), ev("r1", 3, false, true)}); err != nil {
			t.Fatal(err)
		}
		if p, err := s.ReadEvents(ctx(), "th", 0, 100); err != nil || p.RunID != "r1" || !slices.Equal(seqs(p), []uint64{1, 2, 3}) || !p.Events[0].Start || !p.Events[2].Terminal {
			t.Fatalf("read from the start: %+v, %v", p, err)
		}
		if p, err := s.ReadEvents(ctx(), "th", 1, 1); err != nil || !slices.Equal(seqs(p), []uint64{2}) {
			t.Fatalf("read after 1, limit 1: %+v, %v", p, err)
		}
		dup := ev("r1", 2, false, false)
		dup.Body = []byte("other")
		if err := s.AppendEvents(ctx(), "th", a.Fence(), []store.Event{dup, ev("r1", 4, true, false), ev("r1", 5, false, false)}); err != nil {
			t.Fatal(err)
		}
		if p, err := s.ReadEvents(ctx(), "th", 0, 100); err != nil || !slices.Equal(seqs(p), []uint64{1, 2, 3, 4, 5}) {
			t.Fatalf("read from the start of the run: %+v, %v; want every segment", p, err)
		}
		if p, err := s.ReadEvents(ctx(), "th", 1, 100); err != nil || !slices.Equal(seqs(p), []uint64{2, 3, 4, 5}) {
			t.Fatalf("read after 1 (the stored event 2 kept): %+v, %v", p, err)
		}
		b, err := s.AcquireLease(ctx(), "th", "replica-b", t0.Add(ttl+time.Second), ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AppendEvents(ctx(), "th", a.Fence(), []store.Event{ev("r1", 6, false, false)}); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("append under a superseded lease: %v, want ErrLeaseLost", err)
		}
		if n, err := s.LastSequence(ctx(), "r1"); err != nil || n != 5 {
			t.Fatalf("last sequence: %d, %v; want 5", n, err)
		}
		if err := s.AppendEvents(ctx(), "th", b.Fence(), []store.Event{ev("r1", 6, false, false)}); err != nil {
			t.Fatal(err)
		}
		if p, err := s.ReadEvents(ctx(), "th", 0, 100); err != nil || p.RunID != "r1" || !slices.Equal(seqs(p), []uint64{1, 2, 3, 4, 5, 6}) {
			t.Fatalf("read from the start after another replica continued the run: %+v, %v; want every segment", p, err)
		}
		if err := s.AppendEvents(ctx(), "th", b.Fence(), []store.Event{ev("r2", 1, true, false)}); err != nil {
			t.Fatal(err)
		}
		if p, err := s.ReadEvents(ctx(), "th", 0, 100); err != nil || p.RunID != "r2" || !slices.Equal(seqs(p), []uint64{1}) {
			t.Fatalf("read after a new run began: %+v, %v", p, err)
		}
		if n, err := s.LastSequence(ctx(), "r1"); err != nil || n != 0 {
			t.Fatalf("the older run's events are kept: last sequence %d, %v", n, err)
		}
		if p, err := s.ReadEvents(ctx(), "quiet", 0, 100); err != nil || p.RunID != "" || len(p.Events) != 0 {
			t.Fatalf("read of a thread without runs: %+v, %v", p, err)
		}
		if _, err := s.ReadEvents(ctx(), "missing", 0, 100); !errors.Is(err, agent.ErrThreadNotFound) {
			t.Fatalf("read of a missing thread: %v", err)
		}
	})

	t.Run("FailUnleasedRuns", func(t *testing.T) {
		s := newStore(t)
		for _, id := range []string{"none", "released", "live", "expired", "cancelling"} {
			thread(t, s, id)
			if err := s.SaveCheckpoint(ctx(), &agent.Checkpoint{ThreadID: id, Phase: agent.PhaseInput, Run: run("r-"+id, agent.StatusRunning), CreatedAt: t0}); err != nil {
				t.Fatal(err)
			}
		}
		rel, err := s.AcquireLease(ctx(), "released", "replica-a", t0, ttl)
		if err != nil || s.ReleaseLease(ctx(), rel) != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireLease(ctx(), "live", "replica-a", time.Now(), time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireLease(ctx(), "expired", "replica-a", t0, ttl); err != nil {
			t.Fatal(err)
		}
		// A cancel request does not end a run: its replica (or the one
		// that takes it over) does.
		if _, err := s.AcquireLease(ctx(), "cancelling", "replica-a", time.Now(), time.Hour); err != nil {
			t.Fatal(err)
		}
		if l, err := s.RequestCancel(ctx(), "cancelling"); err != nil || l == nil {
			t.Fatalf("cancel request: %+v, %v", l, err)
		}
		n, err := s.FailUnleasedRuns(ctx(), "agentd restarted")
		if err != nil || n != 2 {
			t.Fatalf("FailUnleasedRuns: %d, %v; want 2", n, err)
		}
		for id, want := range map[string]agent.RunStatus{"none": agent.StatusFailed, "released": agent.StatusFailed, "live": agent.StatusRunning, "expired": agent.StatusRunning, "cancelling": agent.StatusRunning} {
			d, err := s.LoadThread(ctx(), id)
			if err != nil {
				t.Fatal(err)
			}
			if d.LastRun.Status != want {
				t.Errorf("%s: run %s, want %s", id, d.LastRun.Status, want)
			}
		}
	})

	t.Run("CancelRequests", func(t *testing.T) {
		s := newStore(t)
		thread(t, s, "th")
		thread(t, s, "free")
		thread(t, s, "other")
		if l, err := s.RequestCancel(ctx(), "free"); err != nil || l != nil {
			t.Fatalf("cancel request on a thread without a lease: %+v, %v; want none", l, err)
		}
		a, err := s.AcquireLease(ctx(), "th", "replica-a", t0, ttl)
		if err != nil || a.CancelRequested {
			t.Fatalf("acquire: %+v, %v", a, err)
		}
		if _, err := s.AcquireLease(ctx(), "other", "replica-a", t0, ttl); err != nil {
			t.Fatal(err)
		}
		l, err := s.RequestCancel(ctx(), "th")
		if err != nil || l == nil || !l.CancelRequested || l.Holder != "replica-a" || l.Epoch != a.Epoch {
			t.Fatalf("cancel request on a held lease: %+v, %v; want replica-a's lease, marked", l, err)
		}
		held := func(holder string) []string {
			t.Helper()
			ls, err := s.CancelRequests(ctx(), holder)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, l := range ls {
				if !l.CancelRequested || l.Holder != holder {
					t.Errorf("listed lease %+v", l)
				}
				ids = append(ids, l.ThreadID)
			}
			return ids
		}
		if ids := held("replica-a"); !slices.Equal(ids, []string{"th"}) {
			t.Fatalf("replica-a's cancel requests: %v, want [th]", ids)
		}
		if ids := held("replica-b"); len(ids) != 0 {
			t.Fatalf("replica-b's cancel requests: %v, want none", ids)
		}
		ls, err := s.ThreadLeases(ctx(), []string{"th", "free", "missing", "other"})
		if err != nil || len(ls) != 2 || ls[0].ThreadID != "other" || ls[0].CancelRequested || ls[1].ThreadID != "th" || !ls[1].CancelRequested || ls[1].Holder != "replica-a" {
			t.Fatalf("thread leases: %+v, %v; want other's and th's (marked)", ls, err)
		}
		// The owner dies: the request outlives the takeover.
		at := t0.Add(ttl + time.Second)
		if exp, err := s.ExpiredLeases(ctx(), at); err != nil || len(exp) != 2 || exp[1].ThreadID != "th" {
			t.Fatalf("expired leases: %+v, %v; want other's and th's", exp, err)
		}
		b, err := s.AcquireLease(ctx(), "th", "replica-b", at, ttl)
		if err != nil || !b.CancelRequested || b.Epoch != a.Epoch+1 {
			t.Fatalf("takeover of a lease with a cancel request: %+v, %v; want it marked", b, err)
		}
		if ids := held("replica-b"); !slices.Equal(ids, []string{"th"}) {
			t.Fatalf("replica-b's cancel requests after the takeover: %v, want [th]", ids)
		}
		if ids := held("replica-a"); len(ids) != 0 {
			t.Fatalf("replica-a's cancel requests after the takeover: %v, want none", ids)
		}
		// Its release ends the request: the next run is not cancelled.
		if err := s.ReleaseLease(ctx(), b); err != nil {
			t.Fatal(err)
		}
		if ls, err := s.ThreadLeases(ctx(), []string{"th"}); err != nil || len(ls) != 1 || !ls[0].Released || ls[0].CancelRequested {
			t.Fatalf("lease after the release: %+v, %v; want released, without a cancel request", ls, err)
		}
		if l, err := s.RequestCancel(ctx(), "th"); err != nil || l != nil {
			t.Fatalf("cancel request on a released lease: %+v, %v; want none", l, err)
		}
		c, err := s.AcquireLease(ctx(), "th", "replica-a", at, ttl)
		if err != nil || c.CancelRequested {
			t.Fatalf("acquire after the release: %+v, %v; want no cancel request", c, err)
		}
		if ids := held("replica-a"); len(ids) != 0 {
			t.Fatalf("cancel requests after a new acquisition: %v, want none", ids)
		}
		if ls, err := s.ThreadLeases(ctx(), nil); err != nil || len(ls) != 0 {
			t.Fatalf("thread leases of no threads: %+v, %v", ls, err)
		}
	})

	t.Run("StopRequests", func(t *testing.T) {
		s := newStore(t)
		thread(t, s, "th")
		thread(t, s, "free")
		if l, err := s.RequestStop(ctx(), "free", store.StopInterrupt); err != nil || l != nil {
			t.Fatalf("stop request on a thread without a lease: %+v, %v; want none", l, err)
		}
		if _, err := s.RequestStop(ctx(), "th", "later"); err == nil {
			t.Fatal("stop request with an unknown mode: no error")
		}
		a, err := s.AcquireLease(ctx(), "th", "replica-a", t0, ttl)
		if err != nil || a.StopRequested != "" {
			t.Fatalf("acquire: %+v, %v", a, err)
		}
		l, err := s.RequestStop(ctx(), "th", store.StopInterrupt)
		if err != nil || l == nil || l.StopRequested != store.StopInterrupt || l.CancelRequested || l.Holder != "replica-a" || l.Epoch != a.Epoch {
			t.Fatalf("interrupt request on a held lease: %+v, %v; want replica-a's lease, marked interrupt", l, err)
		}
		ls, err := s.CancelRequests(ctx(), "replica-a")
		if err != nil || len(ls) != 1 || ls[0].ThreadID != "th" || ls[0].StopRequested != store.StopInterrupt || ls[0].CancelRequested {
			t.Fatalf("replica-a's requests: %+v, %v; want th's interrupt request", ls, err)
		}
		// A rollback is stronger than an interrupt, and stays.
		if l, err := s.RequestStop(ctx(), "th", store.StopRollback); err != nil || l == nil || l.StopRequested != store.StopRollback {
			t.Fatalf("rollback request: %+v, %v", l, err)
		}
		if l, err := s.RequestStop(ctx(), "th", store.StopInterrupt); err != nil || l == nil || l.StopRequested != store.StopRollback {
			t.Fatalf("interrupt request after a rollback request: %+v, %v; want rollback kept", l, err)
		}
		// The owner dies: the request outlives the takeover.
		at := t0.Add(ttl + time.Second)
		b, err := s.AcquireLease(ctx(), "th", "replica-b", at, ttl)
		if err != nil || b.StopRequested != store.StopRollback || b.Epoch != a.Epoch+1 {
			t.Fatalf("takeover of a lease with a stop request: %+v, %v; want it marked", b, err)
		}
		if ls, err := s.CancelRequests(ctx(), "replica-b"); err != nil || len(ls) != 1 || ls[0].StopRequested != store.StopRollback {
			t.Fatalf("replica-b's requests after the takeover: %+v, %v", ls, err)
		}
		// Its release ends the request.
		if err := s.ReleaseLease(ctx(), b); err != nil {
			t.Fatal(err)
		}
		if ls, err := s.ThreadLeases(ctx(), []string{"th"}); err != nil || len(ls) != 1 || ls[0].StopRequested != "" {
			t.Fatalf("lease after the release: %+v, %v; want no stop request", ls, err)
		}
		if l, err := s.RequestStop(ctx(), "th", store.StopInterrupt); err != nil || l != nil {
			t.Fatalf("stop request on a released lease: %+v, %v; want none", l, err)
		}
		c, err := s.AcquireLease(ctx(), "th", "replica-a", at, ttl)
		if err != nil || c.StopRequested != "" {
			t.Fatalf("acquire after the release: %+v, %v; want no stop request", c, err)
		}
		if ls, err := s.CancelRequests(ctx(), "replica-a"); err != nil || len(ls) != 0 {
			t.Fatalf("requests after a new acquisition: %+v, %v; want none", ls, err)
		}
	})

	t.Run("ConcurrentAcquire", func(t *testing.T) {
		s := newStore(t)
		thread(t, s, "th")
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = s.AcquireLease(ctx(), "th", "replica-"+string(rune('a'+i)), t0, ttl)
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			var held *store.HeldError
			switch {
			case err == nil:
				won++
			case errors.As(err, &held), errors.Is(err, store.ErrBusy):
			default:
				t.Errorf("acquire: %v", err)
			}
		}
		if won != 1 {
			t.Fatalf("%d replicas acquired the lease at once, want 1 (%v)", won, errs)
		}
	})
}
