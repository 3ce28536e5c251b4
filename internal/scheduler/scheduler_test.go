package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/plumbhq/plumb/internal/scheduler"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/postgres"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// clock is a settable clock shared by the schedulers of a test.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// starts records the runs a Starter was asked for; err, when set, is
// what it answers.
type starts struct {
	mu   sync.Mutex
	runs []string // schedule id @ replica
	err  error
}

func (s *starts) starter(replica string) scheduler.Starter {
	return func(_ context.Context, sc store.Schedule) (scheduler.Started, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.err != nil {
			return scheduler.Started{}, s.err
		}
		s.runs = append(s.runs, sc.ID+"@"+replica)
		return scheduler.Started{RunID: fmt.Sprintf("run%d", len(s.runs)), ThreadID: "th-" + sc.ID}, nil
	}
}

func (s *starts) count() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.runs) }

func sqliteStore(t *testing.T) store.Schedules {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agentd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func postgresStore(t *testing.T) store.Schedules {
	s, err := postgres.Open(context.Background(), pgtest.New(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newScheduler(t *testing.T, st store.Schedules, c *clock, replica string, start scheduler.Starter) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(scheduler.Config{Store: st, Start: start, Replica: replica},
		scheduler.WithClock(c), scheduler.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func create(t *testing.T, st store.Schedules, sc store.Schedule) {
	t.Helper()
	sc.Tenant, sc.Created, sc.Updated = "acme", t0, t0
	sc.Run = store.ScheduleRun{Input: []string{"tick"}}
	if err := st.CreateSchedule(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
}

func fires(t *testing.T, st store.Schedules, id string) []store.ScheduleFire {
	t.Helper()
	list, _, err := st.ListScheduleFires(context.Background(), id, 500, "")
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// TestCatchUpAfterDowntime: a schedule found due long after its tick
// fires once for the latest missed tick (fire_once) or records the tick
// as skipped (skip), and goes on from the next tick after now.
func TestCatchUpAfterDowntime(t *testing.T) {
	cases := []struct {
		name    string
		sc      store.Schedule
		down    time.Duration
		status  store.FireStatus
		tick    time.Time
		missed  int
		next    time.Time
		started int
	}{
		{"interval fire once", store.Schedule{ID: "a", Interval: 10 * time.Second, CatchUp: "fire_once", NextFire: t0.Add(10 * time.Second)},
			time.Hour + 3*time.Second, store.FireStarted, t0.Add(time.Hour), 359, t0.Add(time.Hour + 10*time.Second), 1},
		{"cron skip", store.Schedule{ID: "b", Cron: "0 * * * *", CatchUp: "skip", NextFire: t0.Add(time.Hour)},
			3*time.Hour + 30*time.Minute, store.FireSkipped, t0.Add(3 * time.Hour), 2, t0.Add(4 * time.Hour), 0},
		{"cron on time", store.Schedule{ID: "c", Cron: "0 * * * *", CatchUp: "skip", NextFire: t0.Add(time.Hour)},
			time.Hour + 20*time.Second, store.FireStarted, t0.Add(time.Hour), 0, t0.Add(2 * time.Hour), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, c, rec := sqliteStore(t), &clock{now: t0}, &starts{}
			create(t, st, tc.sc)
			s := newScheduler(t, st, c, "r1", rec.starter("r1"))
			if n, err := s.Pass(context.Background()); err != nil || n != 0 {
				t.Fatalf("a pass before the tick claimed %d, %v", n, err)
			}
			c.Set(t0.Add(tc.down))
			if n, err := s.Pass(context.Background()); err != nil || n != 1 {
				t.Fatalf("the pass after downtime claimed %d, %v; want 1", n, err)
			}
			if n, err := s.Pass(context.Background()); err != nil || n != 0 {
				t.Fatalf("a second pass at the same time claimed %d, %v", n, err)
			}
			got := fires(t, st, tc.sc.ID)
			if len(got) != 1 || got[0].Status != tc.status || !got[0].Tick.Equal(tc.tick) || got[0].Missed != tc.missed {
				t.Fatalf("fires %+v; want one %s for %s with %d missed", got, tc.status, tc.tick, tc.missed)
			}
			if rec.count() != tc.started {
				t.Fatalf("%d runs started; want %d", rec.count(), tc.started)
			}
			sc, _ := st.Schedule(context.Background(), tc.sc.ID)
			if !sc.NextFire.Equal(tc.next) {
				t.Fatalf("next fire %s; want %s", sc.NextFire, tc.next)
			}
		})
	}
}

// TestOutcomes: a busy thread skips the tick, another error fails it;
// both are recorded on the fire and as the schedule's last error.
func TestOutcomes(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		status store.FireStatus
	}{
		{"busy", fmt.Errorf("%w: thread th has an active run", scheduler.ErrBusy), store.FireSkipped},
		{"failed", errors.New("thread th: thread not found"), store.FireFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, c, rec := sqliteStore(t), &clock{now: t0.Add(time.Second)}, &starts{err: tc.err}
			create(t, st, store.Schedule{ID: "a", Interval: time.Second, NextFire: t0.Add(time.Second)})
			if _, err := newScheduler(t, st, c, "r1", rec.starter("r1")).Pass(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := fires(t, st, "a")
			if len(got) != 1 || got[0].Status != tc.status || got[0].Reason != tc.err.Error() {
				t.Fatalf("fires %+v; want one %s", got, tc.status)
			}
			if sc, _ := st.Schedule(context.Background(), "a"); sc.LastError != tc.err.Error() || sc.LastRunID != "" {
				t.Fatalf("schedule reads %+v", sc)
			}
		})
	}
}

// TestOncePerTickAcrossReplicas: several schedulers on one store, passing
// at the same instants, fire every tick of every schedule exactly once.
func TestOncePerTickAcrossReplicas(t *testing.T) {
	stores := []struct {
		name string
		open func(*testing.T) store.Schedules
	}{{"sqlite", sqliteStore}, {"postgres", postgresStore}}
	for _, sto := range stores {
		t.Run(sto.name, func(t *testing.T) {
			st, c, rec := sto.open(t), &clock{now: t0}, &starts{}
			const schedules, ticks, replicas = 3, 5, 4
			for i := range schedules {
				create(t, st, store.Schedule{ID: fmt.Sprintf("s%d", i), Interval: time.Second, NextFire: t0.Add(time.Second)})
			}
			var ss []*scheduler.Scheduler
			for r := range replicas {
				name := fmt.Sprintf("r%d", r)
				ss = append(ss, newScheduler(t, st, c, name, rec.starter(name)))
			}
			for k := 1; k <= ticks; k++ {
				c.Set(t0.Add(time.Duration(k) * time.Second))
				var wg sync.WaitGroup
				for _, s := range ss {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if _, err := s.Pass(context.Background()); err != nil && !errors.Is(err, store.ErrBusy) {
							t.Error(err)
						}
					}()
				}
				wg.Wait()
			}
			if got := rec.count(); got != schedules*ticks {
				t.Fatalf("%d runs started; want %d", got, schedules*ticks)
			}
			for i := range schedules {
				got := fires(t, st, fmt.Sprintf("s%d", i))
				if len(got) != ticks {
					t.Fatalf("schedule s%d has %d fires; want %d", i, len(got), ticks)
				}
				for j, f := range got {
					if want := t0.Add(time.Duration(ticks-j) * time.Second); !f.Tick.Equal(want) || f.Status != store.FireStarted {
						t.Fatalf("fire %d of s%d: %+v; want started for %s", j, i, f, want)
					}
				}
			}
		})
	}
}

// TestStartStop: the loop fires on its own and Stop ends it.
func TestStartStop(t *testing.T) {
	st, rec := sqliteStore(t), &starts{}
	now := time.Now()
	create(t, st, store.Schedule{ID: "a", Interval: time.Second, NextFire: now})
	s, err := scheduler.New(scheduler.Config{Store: st, Start: rec.starter("r1"), Poll: 10 * time.Millisecond}, scheduler.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer s.Stop()
	deadline := time.Now().Add(2 * time.Minute)
	for rec.count() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the loop never fired a due schedule")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Stop()
	s.Stop()
}

// TestStalePendingFire: a fire whose replica stopped between the claim
// and the run's start is failed by another replica's pass once stale.
func TestStalePendingFire(t *testing.T) {
	st, c, rec := sqliteStore(t), &clock{now: t0.Add(time.Second)}, &starts{}
	create(t, st, store.Schedule{ID: "a", Interval: time.Hour, NextFire: t0.Add(time.Second)})
	// The dead replica's claim: recorded, never finished.
	if _, err := st.ClaimFire(context.Background(), store.ScheduleFire{ScheduleID: "a", Tick: t0.Add(time.Second), FiredAt: t0.Add(time.Second), Replica: "dead"},
		t0.Add(time.Second), t0.Add(time.Hour+time.Second)); err != nil {
		t.Fatal(err)
	}
	s := newScheduler(t, st, c, "r1", rec.starter("r1"))
	if _, err := s.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f := fires(t, st, "a"); f[0].Status != store.FirePending {
		t.Fatalf("a fresh pending fire was failed: %+v", f)
	}
	c.Set(t0.Add(10 * time.Minute))
	if _, err := s.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f := fires(t, st, "a"); f[0].Status != store.FireFailed || f[0].Reason == "" {
		t.Fatalf("a stale pending fire reads %+v; want failed with a reason", f)
	}
	if rec.count() != 0 {
		t.Fatal("the sweep started a run")
	}
}
