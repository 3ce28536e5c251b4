package agentsvc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/retention"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/runhost/runs"
	"github.com/plumbhq/plumb/internal/scheduler"
	"github.com/plumbhq/plumb/internal/webhooks"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/secrets"
	"github.com/plumbhq/plumb/pkg/store"
)

// Runtime is the agent core the service drives: the run host runs it,
// the service lists its agents and validates requests against its tools.
// *deep.Runtime implements it.
type Runtime interface {
	runhost.Runtime
	// ListAgents describes every primary agent and subagent, built-ins
	// included.
	ListAgents() []profile.Info
	// ServerToolNames are the names a client tool must not take.
	ServerToolNames() []string
}

// BulkMethods are the methods whose requests may take the server's
// largest message: Run carries the caller's input and state files. Every
// other request is small (daemon.Options.BulkMethods).
var BulkMethods = []string{plumbv1.AgentService_Run_FullMethodName}

// Config is what cmd/agentd wires into the service: the agent core, the
// run host's settings (the thread store and the `server:` settings) and
// the request limits.
type Config struct {
	// Runtime runs the agents. Required.
	Runtime Runtime
	// Config configures the run host: the thread store (Threads,
	// required), thread cleanup, run slots, replay logs and, with
	// several replicas, the shared leases and event log.
	runhost.Config
	// MaxIterations and RunTimeout are limits.max_iterations and
	// limits.run_timeout: a request asking for more is INVALID_ARGUMENT.
	// 0 means the runtime's defaults (agent.DefaultMaxIterations,
	// agent.DefaultRunTimeout), so the caps exist without a limits block.
	MaxIterations int
	RunTimeout    time.Duration
	// Models are the configured model keys, listed when a request names
	// an unknown one; nil leaves the check to the runtime.
	Models []string
	// Secrets is the tenants' secret store (nil: the secret RPCs answer
	// FAILED_PRECONDITION).
	Secrets *secrets.Vault
	// Skills is the tenants' skill store (nil: the skill RPCs answer
	// FAILED_PRECONDITION).
	Skills store.Skills
	// Previews, when set, serves CreatePreview, ListPreviews and
	// RevokePreview; nil: they are FAILED_PRECONDITION (PREVIEWS_OFF).
	Previews Previews
	// Schedules, when set, serves the schedule RPCs and runs this
	// replica's scheduler (internal/scheduler) over it; nil: they are
	// FAILED_PRECONDITION (SCHEDULES_OFF).
	Schedules store.Schedules
	// SchedulePoll is server.schedule_poll: how often the scheduler looks
	// for due schedules (0 = scheduler.DefaultPoll; negative = this
	// replica fires none, it only serves the RPCs).
	SchedulePoll time.Duration
	// Replica names this agentd in schedule fire records (ReplicaID with
	// leases; "agentd" when empty).
	Replica string
	// OnBusy is the double-texting strategy of a Run that names none
	// (server.on_busy), unless AgentOnBusy has one for its agent (by
	// name; "" is the default agent's).
	OnBusy      runhost.OnBusy
	AgentOnBusy map[string]runhost.OnBusy
	// Egress, when set, serves DecideThreadEgress, ListEgressGrants,
	// RevokeEgressGrant and Thread.pending_egress; nil: the RPCs are
	// FAILED_PRECONDITION (EGRESS_APPROVAL_OFF).
	Egress Egress
	// Webhooks, when enabled (a secrets key is set), serves
	// RunRequest.webhook_url, RotateWebhookKey and ListWebhookDeliveries;
	// otherwise they are FAILED_PRECONDITION (NO_SECRETS_KEY). Wire its
	// OnRunEnd into Config.OnRunEnd.
	Webhooks *webhooks.Service
	// Retention, when set (with its Store), runs this replica's retention
	// sweeper (internal/retention); the service sets its Delete to the
	// run host's DeleteIdleThread.
	Retention *retention.Config
	// Ledger, when set, serves GetUsage from the usage ledger (wire the
	// run host's OnUsage to append to it); nil: GetUsage is
	// FAILED_PRECONDITION (USAGE_OFF).
	Ledger store.Ledger
	// Workspace, when set, serves ListThreadFiles and ReadThreadFile (a
	// thread's sandbox workspace); nil: they are FAILED_PRECONDITION
	// (NO_SANDBOX).
	Workspace Workspace
	// Storage, when set, tells GetUsage what the tenant stores
	// (GetUsageResponse.stored).
	Storage store.StorageMeter
	// Sandboxes, when set, tells GetUsage the sandbox seconds.
	Sandboxes store.SandboxLedger
	// Messages, when set, serves ListMessages page by page from the store
	// (store.MessageRanger); nil: every page loads the whole thread.
	Messages store.MessageRanger
	// Fleet, when set, serves the operator RPCs (ListFleetSandboxes,
	// DeleteFleetSandbox); nil: they are FAILED_PRECONDITION (NO_SANDBOXD)
	// for an operator.
	Fleet Fleet
}

// Option adjusts a Service (test seams).
type Option func(*Service)

// WithLogger sets the logger (nil = nop).
func WithLogger(lg *zap.Logger) Option { return func(s *Service) { s.lg = lg } }

// WithClock sets the clock of thread creation and replay retention.
func WithClock(c agent.Clock) Option {
	return func(s *Service) {
		s.clock = c
		s.hostOpts = append(s.hostOpts, runhost.WithClock(c))
	}
}

// WithIDs sets the generator of new thread ids (default ULIDs).
func WithIDs(f func() string) Option {
	return func(s *Service) { s.hostOpts = append(s.hostOpts, runhost.WithIDs(f)) }
}

// Service implements plumbv1.AgentServiceServer over a run host and a
// thread store: it validates requests, calls the host (runs, streams,
// cancels, deletions) or the store (reads), converts the answers and maps
// errors to status codes.
type Service struct {
	plumbv1.UnimplementedAgentServiceServer

	cfg      Config
	rt       Runtime
	threads  runhost.Threads
	host     *runhost.Host
	lg       *zap.Logger
	hostOpts []runhost.Option
	clock    agent.Clock
	// sched fires due schedules (nil without Config.Schedules or with a
	// negative SchedulePoll).
	sched *scheduler.Scheduler
	// sweeper deletes what is past its TTL (nil without Config.Retention).
	sweeper *retention.Sweeper
}

var _ plumbv1.AgentServiceServer = (*Service)(nil)

// New returns the service over a new run host. Call Shutdown before the
// process exits: runs execute in goroutines of their own (a detached run
// outlives its stream).
func New(cfg Config, opts ...Option) (*Service, error) {
	if cfg.Runtime == nil {
		return nil, errors.New("agentsvc: a runtime is required")
	}
	if cfg.Threads == nil {
		return nil, errors.New("agentsvc: a thread store is required")
	}
	if cfg.MaxIterations < 0 || cfg.RunTimeout < 0 {
		return nil, errors.New("agentsvc: limits must not be negative")
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
	host, err := runhost.New(cfg.Runtime, cfg.Config, append([]runhost.Option{runhost.WithLogger(s.lg.Named("runhost"))}, s.hostOpts...)...)
	if err != nil {
		return nil, err
	}
	s.host, s.lg = host, s.lg.Named("agentsvc")
	if cfg.Schedules != nil && cfg.SchedulePoll >= 0 {
		opts := []scheduler.Option{scheduler.WithLogger(s.lg.Named("scheduler"))}
		if s.clock != nil {
			opts = append(opts, scheduler.WithClock(s.clock))
		}
		s.sched, err = scheduler.New(scheduler.Config{
			Store: cfg.Schedules, Start: s.startScheduled, Replica: cmp.Or(cfg.Replica, cfg.ReplicaID), Poll: cfg.SchedulePoll,
		}, opts...)
		if err != nil {
			_ = host.Shutdown(context.Background())
			return nil, err
		}
		s.sched.Start()
	}
	if rc := cfg.Retention; rc != nil && rc.Store != nil {
		c := *rc
		c.Delete = s.deleteIdleThread
		opts := []retention.Option{retention.WithLogger(s.lg.Named("retention"))}
		if s.clock != nil {
			opts = append(opts, retention.WithClock(s.clock))
		}
		if s.sweeper, err = retention.New(c, opts...); err != nil {
			if s.sched != nil {
				s.sched.Stop()
			}
			_ = host.Shutdown(context.Background())
			return nil, err
		}
		s.sweeper.Start()
	}
	return s, nil
}

// deleteIdleThread is the retention sweeper's Deleter: the run host's
// deletion; a thread running, held or used again is retention.ErrKept.
func (s *Service) deleteIdleThread(ctx context.Context, id string, idleBefore time.Time) error {
	err := s.host.DeleteIdleThread(ctx, id, idleBefore)
	if errors.Is(err, runs.ErrRunning) || errors.Is(err, agent.ErrThreadBusy) || errors.Is(err, runhost.ErrNotIdle) {
		return fmt.Errorf("%w: %w", retention.ErrKept, err)
	}
	return err
}

// SweepRetention runs one retention pass now, besides the sweeper's
// own (tests; an operator's tooling). Without Config.Retention it does
// nothing.
func (s *Service) SweepRetention(ctx context.Context) (retention.Counts, error) {
	if s.sweeper == nil {
		return retention.Counts{}, nil
	}
	return s.sweeper.Pass(ctx)
}

// now is the service's clock.
func (s *Service) now() time.Time {
	if s.clock != nil {
		return s.clock.Now()
	}
	return time.Now()
}

// Shutdown stops accepting runs (Run and Resume answer UNAVAILABLE) and
// waits for the active ones to end, cancelling them or, with leases,
// handing them to other replicas when ctx ends first (runhost.Host.Shutdown).
// cmd/agentd calls it on SIGTERM with a server.shutdown_grace deadline,
// before stopping the gRPC server.
// The scheduler stops first: no fire starts a run on a stopping host.
func (s *Service) Shutdown(ctx context.Context) error {
	if s.sched != nil {
		s.sched.Stop()
	}
	if s.sweeper != nil {
		s.sweeper.Stop()
	}
	return s.host.Shutdown(ctx)
}
