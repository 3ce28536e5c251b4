package agentsvc

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"go.uber.org/zap"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost/runs"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/store"
)

// Runtime is the agent core the service drives. *deep.Runtime implements
// it.
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
	// ListAgents describes every primary agent and subagent, built-ins
	// included.
	ListAgents() []profile.Info
	// ServerToolNames are the names a client tool must not take.
	ServerToolNames() []string
	// Continue takes over a run whose record is RUNNING although no
	// process runs it (see agent.Runner.Continue).
	Continue(ctx context.Context, in agent.ContinueInput, sink agent.Sink) (*agent.RunResult, error)
}

// Threads is the thread store as the service reads and deletes it (runs
// write through the Runtime's own store). DurableThreads and MemoryThreads
// adapt the durable and the memory stores; each must be the store the
// Runtime was built with.
type Threads interface {
	// CreateThread stores a new, empty thread.
	CreateThread(ctx context.Context, t agent.Thread) error
	// LoadThread returns a thread with its log and state, or an error
	// matching agent.ErrThreadNotFound.
	LoadThread(ctx context.Context, id string) (*agent.ThreadData, error)
	// ListThreads returns one page of threads, newest UpdatedAt first,
	// and the next page's token ("" at the end). A page token it did not
	// issue is an error matching agent.ErrInvalidInput.
	ListThreads(ctx context.Context, q ThreadQuery) ([]ListedThread, string, error)
	// DeleteThread removes a thread and everything stored with it, or
	// returns an error matching agent.ErrThreadNotFound.
	DeleteThread(ctx context.Context, id string) error
}

// ThreadQuery selects a page of threads.
type ThreadQuery struct {
	// Tenant, if set, keeps only that tenant's threads.
	Tenant string
	// Labels must all be present with these values.
	Labels map[string]string
	// Status filters by derived status ("" = any).
	Status agent.ThreadStatus
	// PageSize is 1..MaxPageSize (the service applies the default).
	PageSize int
	// PageToken continues a previous listing.
	PageToken string
}

// ListedThread is a listed thread: its record and state (the message log
// may be left out) and the log's length.
type ListedThread struct {
	*agent.ThreadData
	// MessageCount is the length of the message log.
	MessageCount int
}

// BulkMethods are the methods whose requests may take the server's
// largest message: Run carries the caller's input and state files. Every
// other request is small (daemon.Options.BulkMethods).
var BulkMethods = []string{plumbv1.AgentService_Run_FullMethodName}

// ListThreads page sizes (agent.md §1.1).
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// Config is what cmd/agentd wires into the service: the agent core, the
// thread store and the `server:` settings.
type Config struct {
	// Runtime runs the agents. Required.
	Runtime Runtime
	// Threads is the thread store. Required.
	Threads Threads
	// OnDeleteThread, if set, is called by DeleteThread after any active
	// run has ended and before the thread is removed from the store,
	// with the thread as stored (Thread.SandboxID names its sandbox). An
	// error fails the RPC and keeps the thread. agentd deletes the
	// thread's sandbox here.
	OnDeleteThread func(ctx context.Context, td *agent.ThreadData) error
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
	// ends with RESOURCE_EXHAUSTED (STREAM_LAGGING) instead of holding the
	// events in memory.
	ReplayMaxEvents int
	ReplayMaxBytes  int
	// MaxIterations and RunTimeout are limits.max_iterations and
	// limits.run_timeout: a request asking for more is INVALID_ARGUMENT.
	// 0 means the runtime's defaults (agent.DefaultMaxIterations,
	// agent.DefaultRunTimeout), so the caps exist without a limits block.
	MaxIterations int
	RunTimeout    time.Duration
	// Models are the configured model keys, listed when a request names
	// an unknown one; nil leaves the check to the runtime.
	Models []string
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
}

// Option adjusts a Service (test seams).
type Option func(*Service)

// WithLogger sets the logger (nil = nop).
func WithLogger(lg *zap.Logger) Option { return func(s *Service) { s.lg = lg } }

// WithClock sets the clock of thread creation and replay retention.
func WithClock(c agent.Clock) Option { return func(s *Service) { s.clock = c } }

// WithIDs sets the generator of CreateThread ids (default ULIDs).
func WithIDs(f func() string) Option { return func(s *Service) { s.newID = f } }

// Service implements plumbv1.AgentServiceServer over a Runtime and a
// thread store. It owns the run registry: active runs by thread, their
// replay logs, run slots and shutdown.
type Service struct {
	plumbv1.UnimplementedAgentServiceServer

	cfg     Config
	rt      Runtime
	threads Threads
	reg     *runs.Registry
	lg      *zap.Logger
	clock   agent.Clock
	newID   func() string
	wg      sync.WaitGroup // run goroutines
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

var _ plumbv1.AgentServiceServer = (*Service)(nil)

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// New returns the service. Call Shutdown before the process exits: runs
// execute in goroutines of their own (a detached run outlives its
// stream).
func New(cfg Config, opts ...Option) (*Service, error) {
	if cfg.Runtime == nil {
		return nil, errors.New("agentsvc: a runtime is required")
	}
	if cfg.Threads == nil {
		return nil, errors.New("agentsvc: a thread store is required")
	}
	if cfg.MaxConcurrentRuns < 0 || cfg.ReplayRetention < 0 || cfg.ReplayMaxEvents < 0 || cfg.ReplayMaxBytes < 0 || cfg.MaxIterations < 0 || cfg.RunTimeout < 0 {
		return nil, errors.New("agentsvc: limits must not be negative")
	}
	if cfg.Leases != nil && cfg.ReplicaID == "" {
		return nil, errors.New("agentsvc: leases need a replica id")
	}
	if cfg.Events != nil && cfg.Leases == nil {
		return nil, errors.New("agentsvc: an event log needs leases")
	}
	if cfg.MaxIterations == 0 {
		cfg.MaxIterations = agent.DefaultMaxIterations
	}
	if cfg.RunTimeout == 0 {
		cfg.RunTimeout = agent.DefaultRunTimeout
	}
	s := &Service{cfg: cfg, rt: cfg.Runtime, threads: cfg.Threads}
	for _, o := range opts {
		o(s)
	}
	if s.lg == nil {
		s.lg = zap.NewNop()
	}
	s.lg = s.lg.Named("agentsvc")
	if s.clock == nil {
		s.clock = realClock{}
	}
	if s.newID == nil {
		s.newID = func() string { return ulid.Make().String() }
	}
	s.reg = runs.New(runs.Options{
		MaxRuns: cfg.MaxConcurrentRuns, Retention: cfg.ReplayRetention, MaxEvents: cfg.ReplayMaxEvents,
		MaxBytes: cfg.ReplayMaxBytes, Now: s.clock.Now, Replicated: cfg.Leases != nil,
	})
	s.handOff = make(chan struct{})
	s.hardStop, s.stopHardNow = context.WithCancelCause(context.Background())
	s.stopTakeover = func() {}
	s.startTakeover()
	s.startCancelPoll()
	return s, nil
}

// Shutdown stops accepting runs (Run and Resume answer UNAVAILABLE) and
// waits for the active ones to end. cmd/agentd calls it on SIGTERM with a
// server.shutdown_grace deadline, before stopping the gRPC server.
//
// Without leases (one replica), when ctx ends first it cancels the runs
// (each then ends with run_finished{CANCELLED} within the runtime's
// cancel grace), waits for them and returns ctx's error.
//
// With leases (replicas on a shared store), the runs are handed off
// instead: the replica stops taking new runs (REPLICA_STOPPING) and runs
// of dead replicas, asks each of its runs to stop at its next checkpoint
// (the step in flight finishes and commits) and, when ctx ends first,
// stops the rest at once (their uncommitted step is redone elsewhere).
// Either way a run's record stays RUNNING, its events are flushed to the
// event log and its lease is handed off, so that another replica's next
// takeover scan continues it; the run's client streams end with
// UNAVAILABLE, REPLICA_STOPPING and the sequence to re-Attach after.
func (s *Service) Shutdown(ctx context.Context) error {
	s.stopTakeover()
	if s.cfg.Leases != nil {
		// Before the drain: a request refused with REPLICA_STOPPING
		// implies that every run here is asked to stop.
		s.handOffOnce.Do(func() {
			s.lg.Info("stopping: handing runs off at their next checkpoint", zap.Int("runs", s.reg.Live()))
			close(s.handOff)
		})
	}
	s.reg.Drain()
	err := s.reg.Wait(ctx)
	if err != nil {
		if s.cfg.Leases != nil {
			s.lg.Warn("shutdown grace over; handing runs off at once", zap.Int("runs", s.reg.Live()))
			s.stopHardNow(agent.ErrHandedOff)
		} else {
			s.lg.Warn("shutdown grace over; cancelling runs", zap.Int("runs", s.reg.Live()))
			s.reg.CancelAll()
		}
	}
	s.wg.Wait()
	return err
}
