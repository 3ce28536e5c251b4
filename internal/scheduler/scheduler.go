package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/internal/loop"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/schedule"
	"github.com/plumbhq/plumb/pkg/store"
)

// DefaultPoll is how often a scheduler looks for due schedules: ticks
// fire up to this late.
const DefaultPoll = time.Second

// startTimeout bounds the start of one scheduled run (the thread, its
// lease, run_started); the run itself is detached.
const startTimeout = time.Minute

// A fire still pending staleAfter after its claim lost its replica
// between the claim and the run's start: a pass every sweepEvery marks
// such fires failed, so that none stays pending forever. (A replica that
// was only slow records its outcome over it.)
const (
	staleAfter = 2 * startTimeout
	sweepEvery = time.Minute
)

// ErrBusy is what a Starter's error matches when the schedule's thread
// cannot take a run now (another run holds it, or it waits for an
// interrupt's answer): the fire is recorded as skipped, not failed.
//
// Double-texting (issue 20 item 4) hooks in here: a Starter that
// enqueues or interrupts instead returns no error for a busy thread.
var ErrBusy = errors.New("thread busy")

// Started names the run a fire started.
type Started struct {
	RunID    string
	ThreadID string
}

// Starter starts sc's run, detached, as sc's tenant, and returns once it
// has started. Errors are about the start: ErrBusy for a busy thread,
// anything else fails the fire.
type Starter func(ctx context.Context, sc store.Schedule) (Started, error)

// Config configures a Scheduler.
type Config struct {
	// Store holds the schedules. Required.
	Store store.Schedules
	// Start starts a fire's run. Required.
	Start Starter
	// Replica names this agentd in fire records.
	Replica string
	// Poll is how often due schedules are looked for (DefaultPoll).
	Poll time.Duration
	// Batch bounds the schedules handled per poll (default 64).
	Batch int
}

// Option adjusts a Scheduler (test seams).
type Option func(*Scheduler)

// WithLogger sets the logger (nil = nop).
func WithLogger(lg *zap.Logger) Option { return func(s *Scheduler) { s.lg = lg } }

// WithClock sets the clock deciding what is due.
func WithClock(c agent.Clock) Option { return func(s *Scheduler) { s.clock = c } }

// Scheduler fires due schedules (see the package doc).
type Scheduler struct {
	cfg   Config
	lg    *zap.Logger
	clock agent.Clock

	loop *loop.Loop

	mu        sync.Mutex
	lastSweep time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// New returns a scheduler; Start begins its loop.
func New(cfg Config, opts ...Option) (*Scheduler, error) {
	if cfg.Store == nil || cfg.Start == nil {
		return nil, errors.New("scheduler: a store and a starter are required")
	}
	if cfg.Poll < 0 || cfg.Batch < 0 {
		return nil, errors.New("scheduler: poll and batch must not be negative")
	}
	if cfg.Poll == 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Batch == 0 {
		cfg.Batch = 64
	}
	if cfg.Replica == "" {
		cfg.Replica = "agentd"
	}
	s := &Scheduler{cfg: cfg}
	for _, o := range opts {
		o(s)
	}
	if s.lg == nil {
		s.lg = zap.NewNop()
	}
	if s.clock == nil {
		s.clock = realClock{}
	}
	return s, nil
}

// Start begins polling in a goroutine of its own; Stop ends it.
func (s *Scheduler) Start() {
	s.loop = loop.Start(s.cfg.Poll, func(ctx context.Context) {
		if _, err := s.Pass(ctx); err != nil && ctx.Err() == nil {
			s.lg.Warn("schedule pass failed", zap.Error(err))
		}
	})
}

// Stop ends the loop and waits for a pass in flight (the start of a run
// in flight completes; the run goes on). Stop without Start is fine.
func (s *Scheduler) Stop() { s.loop.Stop() }

// Pass fires the schedules due now, once: it returns how many fires this
// replica claimed. Start calls it every Poll; tests call it with an
// injected clock.
func (s *Scheduler) Pass(ctx context.Context) (int, error) {
	now := s.clock.Now()
	due, err := s.cfg.Store.DueSchedules(ctx, now, s.cfg.Batch)
	if err != nil {
		return 0, fmt.Errorf("due schedules: %w", err)
	}
	s.sweep(ctx, now)
	claimed := 0
	for _, sc := range due {
		if ctx.Err() != nil {
			break
		}
		ok, err := s.fire(ctx, sc, now)
		if err != nil {
			s.lg.Warn("schedule fire failed", zap.String("schedule-id", sc.ID), zap.Error(err))
		}
		if ok {
			claimed++
		}
	}
	return claimed, nil
}

// sweep fails the fires left pending by a replica that stopped between
// claim and start, at most every sweepEvery.
func (s *Scheduler) sweep(ctx context.Context, now time.Time) {
	s.mu.Lock()
	if now.Sub(s.lastSweep) < sweepEvery {
		s.mu.Unlock()
		return
	}
	s.lastSweep = now
	s.mu.Unlock()
	n, err := s.cfg.Store.FailPendingFires(ctx, now.Add(-staleAfter), "the replica that claimed the tick stopped before starting its run")
	switch {
	case err != nil:
		s.lg.Warn("failing stale schedule fires", zap.Error(err))
	case n > 0:
		s.lg.Warn("schedule fires left pending by a stopped replica marked failed", zap.Int("fires", n))
	}
}

// fire claims sc's due tick and, when this replica won it, starts the
// run and records the outcome.
func (s *Scheduler) fire(ctx context.Context, sc store.Schedule, now time.Time) (bool, error) {
	lg := s.lg.With(zap.String("schedule-id", sc.ID), zap.String("tenant", sc.Tenant))
	spec, err := schedule.Parse(sc.Cron, sc.TimeZone, sc.Interval)
	if err != nil {
		return false, err // validated on write; a bad record waits for an update
	}
	policy, err := schedule.ParseCatchUp(sc.CatchUp)
	if err != nil {
		return false, err
	}
	plan := spec.Plan(sc.NextFire, now, policy)
	f := store.ScheduleFire{ScheduleID: sc.ID, Tick: plan.Tick, FiredAt: now, Replica: s.cfg.Replica, Missed: plan.Missed}
	if !plan.Fire {
		f.Status, f.Reason = store.FireSkipped, fmt.Sprintf("tick %s was %s late (catch_up skip)", plan.Tick.Format(time.RFC3339), now.Sub(plan.Tick).Round(time.Second))
	}
	claimed, err := s.cfg.Store.ClaimFire(ctx, f, sc.NextFire, plan.Next)
	if errors.Is(err, store.ErrFireLost) {
		return false, nil // another replica fired it, or the schedule changed
	}
	if err != nil {
		return false, fmt.Errorf("claim tick %s: %w", plan.Tick.Format(time.RFC3339Nano), err)
	}
	// The rest finishes even when Stop comes: the tick is ours.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	if plan.Fire {
		started, err := s.cfg.Start(ctx, claimed)
		switch {
		case err == nil:
			f.Status, f.RunID, f.ThreadID = store.FireStarted, started.RunID, started.ThreadID
			lg.Info("schedule fired", zap.Time("tick", plan.Tick), zap.String("run-id", started.RunID),
				zap.String("thread-id", started.ThreadID), zap.Int("missed", plan.Missed))
		case errors.Is(err, ErrBusy):
			f.Status, f.Reason = store.FireSkipped, err.Error()
			lg.Info("schedule tick skipped: its thread is busy", zap.Time("tick", plan.Tick), zap.Error(err))
		default:
			f.Status, f.Reason = store.FireFailed, err.Error()
			lg.Warn("scheduled run did not start", zap.Time("tick", plan.Tick), zap.Error(err))
		}
	}
	if err := s.cfg.Store.FinishFire(ctx, f); err != nil {
		return true, fmt.Errorf("record fire of tick %s: %w", plan.Tick.Format(time.RFC3339Nano), err)
	}
	return true, nil
}
