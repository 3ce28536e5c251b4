package runhost

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/internal/runhost/runs"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// Runtime is the agent core the host runs. *deep.Runtime implements it.
//
// Run and Resume follow agent.Runner's contract: errors before run_started
// are returned (agent.ErrInvalidInput, agent.ErrThreadBusy,
// *agent.PendingInterruptError, agent.ErrNoPendingInterrupt,
// *agent.StaleInterruptError, *agent.DecisionError,
// agent.ErrThreadNotFound, ...); afterwards every failure is an error
// event, the last event is terminal and the returned error is nil. Events
// reach sink in sequence order. The runtime enforces the run's deadline
// (limits.run_timeout, RunRequest.timeout) on the context it is given.
type Runtime interface {
	// Run appends input to a thread (a new one when in.ThreadID is "")
	// and runs the agent.
	Run(ctx context.Context, in agent.RunInput, sink agent.Sink) (*agent.RunResult, error)
	// Resume continues an interrupted run with decisions.
	Resume(ctx context.Context, in agent.ResumeInput, sink agent.Sink) (*agent.RunResult, error)
	// Continue takes over a run whose record is RUNNING although no
	// process runs it (see agent.Runner.Continue).
	Continue(ctx context.Context, in agent.ContinueInput, sink agent.Sink) (*agent.RunResult, error)
}

// Config is the run host's part of the `server:` settings, and the
// shared store of a replicated agentd.
type Config struct {
	// Threads is the thread store. Required.
	Threads Threads
	// OnDeleteThread, if set, is called by DeleteThread after any active
	// run has ended and before the thread is removed from the store,
	// with the thread as stored (Thread.SandboxID names its sandbox). An
	// error fails the deletion and keeps the thread. agentd deletes the
	// thread's sandbox here.
	OnDeleteThread func(ctx context.Context, td *agent.ThreadData) error
	// OnRunEnd, if set, is told when a run segment this replica holds
	// reaches its end (run_finished, or a run error) or pauses on an
	// interrupt, after that event and before the thread's lease is
	// released; and, when a takeover finds the lease of a run that had
	// already ended (its replica died before releasing it), the end as
	// stored. So a run's end may be reported twice: OnRunEnd must be
	// idempotent. It runs on the run's goroutine: it must be quick (agentd
	// records webhook deliveries here, a store insert, and never calls a
	// receiver). An error is logged.
	OnRunEnd func(ctx context.Context, end RunEnd) error
	// OnUsage, if set, is told of every model call of a run segment this
	// replica holds (each usage event, subagents' included), on the run's
	// goroutine after the event: agentd appends it to the usage ledger
	// there. It must be quick; an error is logged.
	OnUsage func(ctx context.Context, u UsageCall) error
	// Admit, if set, is asked before a Run, a Resume or a queued run is
	// accepted, with the caller's tenant and the thread ("" = a new
	// one): an error refuses the request before anything starts (agentd
	// checks the tenant's quotas here, internal/quota). Takeovers are
	// not asked again: they continue a run that started.
	Admit func(ctx context.Context, tenant, threadID string) error
	// AdmitQueued, if set, is asked before a queued run starts, with
	// its thread's tenant and the thread. An error whose chain has a
	// QueueWaits() bool method answering true keeps the run QUEUED: the
	// queue scan (QueueInterval) tries again, in the thread's order. Any
	// other error ends the run FAILED with agent.ErrorInfo of it before
	// it starts, and the thread's next queued run is tried (agentd
	// checks the tenant's quotas here, quota.Checker.AdmitQueued).
	AdmitQueued func(ctx context.Context, tenant, threadID string) error
	// MaxConcurrentRuns is server.max_concurrent_runs (0 = 64).
	MaxConcurrentRuns int
	// DetachOnDisconnect is server.detach_on_disconnect: runs keep going
	// when their client disconnects even without RunRequest.detach.
	DetachOnDisconnect bool
	// ReplayRetention is server.replay_retention (0 = 5m).
	ReplayRetention time.Duration
	// ReplayMaxEvents and ReplayMaxBytes (encoded size) cap each run's
	// replay log (server.replay_max_events, server.replay_max_bytes; 0 =
	// 10,000 events, 16 MiB). A stream that falls further behind its run
	// ends with runs.ErrLagging (RESOURCE_EXHAUSTED, STREAM_LAGGING)
	// instead of holding the events in memory.
	ReplayMaxEvents int
	ReplayMaxBytes  int
	// Leases, when set, is the store shared by several agentd replicas:
	// a run holds its thread's lease there for its whole length, so a
	// thread runs on one replica at a time (see leased). Nil: one
	// replica, no leases.
	Leases store.Leases
	// ReplicaID names this replica as a lease holder (required with
	// Leases).
	ReplicaID string
	// LeaseTTL is how long a lease lasts unrenewed (DefaultLeaseTTL).
	LeaseTTL time.Duration
	// TakeoverInterval is how often a replica with Leases looks for runs
	// whose replica died or handed them off (an expired, unreleased
	// lease) and continues them from their last checkpoint (0 =
	// LeaseTTL/2, at most 7.5 s; negative = never).
	TakeoverInterval time.Duration
	// Events, when set (with Leases), is the shared run event log: runs
	// append their events to it before any client receives them, and
	// Attach on a replica that does not run the thread follows the run
	// there.
	Events store.RunEvents
	// EventInterval is how often such an Attach reads Events, and how
	// long a failed append waits before it is retried
	// (DefaultEventInterval).
	EventInterval time.Duration
	// Runs, when set, keeps run records as resources (GetRun, ListRuns,
	// WaitRun) and the threads' run queues (RunWith with OnBusyEnqueue).
	// agentd sets it to its durable store.
	Runs store.Runs
	// Steers, when set, keeps the steers of running runs (RunWith with
	// OnBusySteer): the runtime delivers them at the run's next model call
	// (agent.SteerStore) on whichever replica runs it. agentd sets it to
	// its durable store.
	Steers store.Steers
	// QueueInterval is how often the host looks for queued runs that
	// nobody starts (0 = DefaultQueueInterval; negative = never).
	QueueInterval time.Duration
	// WaitInterval is how often WaitRun reads a run's record (0 =
	// DefaultWaitInterval).
	WaitInterval time.Duration
	// Snapshots, when set, are the threads' workspace snapshots:
	// ForkThread gives a fork the snapshot of its checkpoint. agentd
	// sets it to its durable store.
	Snapshots store.ThreadSnapshots
}

// Option adjusts a Host (test seams).
type Option func(*Host)

// WithLogger sets the logger (nil = nop).
func WithLogger(lg *zap.Logger) Option { return func(h *Host) { h.lg = lg } }

// WithClock sets the clock of thread creation, leases and replay
// retention.
func WithClock(c agent.Clock) Option { return func(h *Host) { h.clock = c } }

// WithIDs sets the generator of new thread ids (default ULIDs).
func WithIDs(f func() string) Option { return func(h *Host) { h.newID = f } }

// Host runs agents on threads for the streams that ask: it owns the run
// registry (active runs by thread, their replay logs, run slots and
// shutdown) and, with Config.Leases, this replica's share of the fleet
// (leases, takeover, remote cancels, the shared event log, hand-off).
type Host struct {
	cfg     Config
	rt      Runtime
	threads Threads
	reg     *runs.Registry
	lg      *zap.Logger
	clock   agent.Clock
	newID   func() string
	wg      sync.WaitGroup // run goroutines
	stops   stops          // the stop signals of the segments going on here
	// stopTakeover ends the takeover loop and the cancel poll (a no-op
	// without them).
	stopTakeover func()
	// handOff is closed when Shutdown starts, with leases: runs stop at
	// their next checkpoint and are handed to other replicas.
	handOff     chan struct{}
	handOffOnce sync.Once
	// hardStop is cancelled, with cause agent.ErrHandedOff, when the
	// shutdown grace is over: runs with leases stop at once.
	hardStop    context.Context
	stopHardNow context.CancelCauseFunc
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// New returns the host, its takeover and cancel loops started (with
// Config.Leases). Call Shutdown before the process exits: runs execute in
// goroutines of their own (a detached run outlives its stream).
func New(rt Runtime, cfg Config, opts ...Option) (*Host, error) {
	if rt == nil {
		return nil, errors.New("runhost: a runtime is required")
	}
	if cfg.Threads == nil {
		return nil, errors.New("runhost: a thread store is required")
	}
	if cfg.MaxConcurrentRuns < 0 || cfg.ReplayRetention < 0 || cfg.ReplayMaxEvents < 0 || cfg.ReplayMaxBytes < 0 {
		return nil, errors.New("runhost: limits must not be negative")
	}
	if cfg.Leases != nil && cfg.ReplicaID == "" {
		return nil, errors.New("runhost: leases need a replica id")
	}
	if cfg.Events != nil && cfg.Leases == nil {
		return nil, errors.New("runhost: an event log needs leases")
	}
	h := &Host{cfg: cfg, rt: rt, threads: cfg.Threads}
	for _, o := range opts {
		o(h)
	}
	if h.lg == nil {
		h.lg = zap.NewNop()
	}
	if h.clock == nil {
		h.clock = realClock{}
	}
	if h.newID == nil {
		h.newID = func() string { return ulid.Make().String() }
	}
	h.reg = runs.New(runs.Options{
		MaxRuns: cfg.MaxConcurrentRuns, Retention: cfg.ReplayRetention, MaxEvents: cfg.ReplayMaxEvents,
		MaxBytes: cfg.ReplayMaxBytes, Now: h.clock.Now, Replicated: cfg.Leases != nil,
	})
	h.handOff = make(chan struct{})
	h.hardStop, h.stopHardNow = context.WithCancelCause(context.Background())
	h.stopTakeover = func() {}
	h.startTakeover()
	h.startCancelPoll()
	stopQueues, stopRest := h.startQueueScan(), h.stopTakeover
	h.stopTakeover = func() {
		stopQueues()
		stopRest()
	}
	return h, nil
}

// Shutdown stops accepting runs (Run and Resume fail with
// runs.ErrShuttingDown) and waits for the active ones to end. cmd/agentd
// calls it on SIGTERM with a server.shutdown_grace deadline, before
// stopping the gRPC server.
//
// Without leases (one replica), when ctx ends first it cancels the runs
// (each then ends with run_finished{CANCELLED} within the runtime's
// cancel grace), waits for them and returns ctx's error.
//
// With leases (replicas on a shared store), the runs are handed off
// instead: the replica stops taking new runs (runs.ErrReplicaStopping)
// and runs of dead replicas, asks each of its runs to stop at its next
// checkpoint (the step in flight finishes and commits) and, when ctx ends
// first, stops the rest at once (their uncommitted step is redone
// elsewhere). Either way a run's record stays RUNNING, its events are
// flushed to the event log and its lease is handed off, so that another
// replica's next takeover scan continues it; the run's streams end with a
// *runs.CutError (runs.ErrReplicaStopping) naming the sequence to
// re-Attach after.
func (h *Host) Shutdown(ctx context.Context) error {
	h.stopTakeover()
	if h.cfg.Leases != nil {
		// Before the drain: a request refused with REPLICA_STOPPING
		// implies that every run here is asked to stop.
		h.handOffOnce.Do(func() {
			h.lg.Info("stopping: handing runs off at their next checkpoint", zap.Int("runs", h.reg.Live()))
			close(h.handOff)
		})
	}
	h.reg.Drain()
	err := h.reg.Wait(ctx)
	if err != nil {
		if h.cfg.Leases != nil {
			h.lg.Warn("shutdown grace over; handing runs off at once", zap.Int("runs", h.reg.Live()))
			h.stopHardNow(agent.ErrHandedOff)
		} else {
			h.lg.Warn("shutdown grace over; cancelling runs", zap.Int("runs", h.reg.Live()))
			h.reg.CancelAll()
		}
	}
	h.wg.Wait()
	return err
}
