package retention

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/internal/loop"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// Defaults of Config.
const (
	DefaultInterval = 10 * time.Minute
	DefaultBatch    = 100
	// maxBatches bounds the batches of one kind per pass, so that a pass
	// ends and the next one starts from a fresh listing.
	maxBatches = 100
)

// ErrKept is what a Deleter's error matches when it left a thread alone
// on purpose (it runs, another replica deletes it, it was used again):
// the sweeper counts it as skipped, not as a failure.
var ErrKept = errors.New("thread kept")

// Deleter deletes thread id, its sandbox and its snapshots, unless it was
// updated at or after idleBefore or is running (then an error matching
// ErrKept). A thread already gone is agent.ErrThreadNotFound.
type Deleter func(ctx context.Context, id string, idleBefore time.Time) error

// Rules are the TTLs of one scope; 0 keeps forever.
type Rules struct {
	// ThreadsIdle deletes threads not updated for this long.
	ThreadsIdle time.Duration
	// WebhookDeliveries deletes deliveries finished this long ago.
	WebhookDeliveries time.Duration
	// RunEvents deletes the shared event log of a thread's last run once
	// it ended and the thread was not updated for this long.
	RunEvents time.Duration
}

// Policy is the default Rules and the tenants' own (which replace the
// default entirely for that tenant), and the agents' own TTLs, which
// override both for what belongs to the agent ("" = a run that named no
// agent, which agentd maps to the default agent; 0 keeps forever; an
// agent not in a map inherits): Agents for the threads whose last run was
// the agent's, AgentRunEvents for their run event logs, and
// AgentWebhookDeliveries for the deliveries of the agent's runs. (An
// agent's checkpoints_keep is the stores' AgentCheckpointRetention,
// applied at every checkpoint.)
type Policy struct {
	Default Rules
	Tenants map[string]Rules
	Agents  map[string]time.Duration
	// AgentRunEvents are the agents' run_events TTLs.
	AgentRunEvents map[string]time.Duration
	// AgentWebhookDeliveries are the agents' webhook_deliveries TTLs.
	AgentWebhookDeliveries map[string]time.Duration
	// StoreItems deletes the files of store routes (every namespace) not
	// modified for this long; 0 keeps them.
	StoreItems time.Duration
}

// Items is the store routes' file store (storefs.DB).
type Items interface {
	DeleteModifiedBefore(ctx context.Context, before time.Time, limit int) (int, error)
}

// Snapshots deletes the workspace snapshots queued for deletion (threads
// deleted, snapshots pruned with their checkpoints) from the sandboxd
// workers: up to limit, returning how many it deleted. One that fails
// stays queued for the next pass. agentd's ThreadBackends implements it.
type Snapshots interface {
	DeleteQueuedSnapshots(ctx context.Context, limit int) (int, error)
}

// Sessions deletes the browser sessions of the HTTP API (store.Sessions)
// that expired by now: up to limit, returning how many.
type Sessions interface {
	DeleteExpiredSessions(ctx context.Context, now time.Time, limit int) (int, error)
}

// ThreadInfo tells a thread's agent (its last run's) and when it was last
// updated.
type ThreadInfo func(ctx context.Context, id string) (agent string, updated time.Time, err error)

// Config configures a Sweeper.
type Config struct {
	// Store lists and deletes. Required.
	Store store.Retention
	// Delete deletes one thread. Required.
	Delete Deleter
	// Policy is the TTLs.
	Policy Policy
	// Interval is the time between passes (DefaultInterval).
	Interval time.Duration
	// Batch bounds each store call (DefaultBatch).
	Batch int
	// Metrics, if set, registers the sweeper's counters.
	Metrics prometheus.Registerer
	// ThreadInfo is required with Policy.Agents.
	ThreadInfo ThreadInfo
	// Items, if set, is swept by Policy.StoreItems.
	Items Items
	// Snapshots, if set, has its queued snapshot deletions retried every
	// pass, after the threads (whose deletion queues theirs).
	Snapshots Snapshots
	// Sessions, if set, has its expired browser sessions deleted every
	// pass (whatever the TTLs: a session's expiry is its own).
	Sessions Sessions
}

// Counts is what a pass deleted and skipped.
type Counts struct {
	Threads    int
	Skipped    int
	Failed     int
	Deliveries int
	// RunEvents is how many run events were deleted.
	RunEvents int
	// StoreItems is how many store-route files were deleted.
	StoreItems int
	// Snapshots is how many queued workspace snapshots were deleted.
	Snapshots int
	// Sessions is how many expired browser sessions were deleted.
	Sessions int
}

// Option adjusts a Sweeper (test seams).
type Option func(*Sweeper)

// WithLogger sets the logger (nil = nop).
func WithLogger(lg *zap.Logger) Option { return func(s *Sweeper) { s.lg = lg } }

// WithClock sets the clock the TTLs count from.
func WithClock(c agent.Clock) Option { return func(s *Sweeper) { s.clock = c } }

// Sweeper deletes what is past its TTL (see the package doc).
type Sweeper struct {
	cfg     Config
	lg      *zap.Logger
	clock   agent.Clock
	deleted *prometheus.CounterVec

	loop *loop.Loop
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// New returns a sweeper; Start begins its loop.
func New(cfg Config, opts ...Option) (*Sweeper, error) {
	if cfg.Store == nil || cfg.Delete == nil {
		return nil, errors.New("retention: a store and a deleter are required")
	}
	if cfg.Interval < 0 || cfg.Batch < 0 {
		return nil, errors.New("retention: interval and batch must not be negative")
	}
	for _, r := range append([]Rules{cfg.Policy.Default}, slices.Collect(maps.Values(cfg.Policy.Tenants))...) {
		if r.ThreadsIdle < 0 || r.WebhookDeliveries < 0 || r.RunEvents < 0 {
			return nil, errors.New("retention: TTLs must not be negative")
		}
	}
	agentTTLs := slices.Concat(slices.Collect(maps.Values(cfg.Policy.Agents)), slices.Collect(maps.Values(cfg.Policy.AgentRunEvents)),
		slices.Collect(maps.Values(cfg.Policy.AgentWebhookDeliveries)))
	for _, d := range append(agentTTLs, cfg.Policy.StoreItems) {
		if d < 0 {
			return nil, errors.New("retention: TTLs must not be negative")
		}
	}
	if len(cfg.Policy.Agents) > 0 && cfg.ThreadInfo == nil {
		return nil, errors.New("retention: agents' TTLs need ThreadInfo")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	s := &Sweeper{cfg: cfg, deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "plumb_retention_deleted_total",
		Help: "What the retention sweeper deleted (threads, webhook_deliveries, run_events, store_items, snapshots, http_sessions) or left (threads_skipped, threads_failed).",
	}, []string{"kind"})}
	for _, o := range opts {
		o(s)
	}
	if s.lg == nil {
		s.lg = zap.NewNop()
	}
	if s.clock == nil {
		s.clock = realClock{}
	}
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(s.deleted); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Start begins the passes in a goroutine of its own; Stop ends it.
func (s *Sweeper) Start() {
	s.loop = loop.Start(s.cfg.Interval, func(ctx context.Context) {
		if _, err := s.Pass(ctx); err != nil && ctx.Err() == nil {
			s.lg.Warn("retention pass failed", zap.Error(err))
		}
	})
}

// Stop ends the loop and waits for a pass in flight. Stop without Start
// is fine.
func (s *Sweeper) Stop() { s.loop.Stop() }

// scopes are the (tenant, rules) pairs of a pass: each tenant with rules
// of its own, then the default for every other tenant.
func (s *Sweeper) scopes() (tenants []string, rules []Rules) {
	own := slices.Sorted(maps.Keys(s.cfg.Policy.Tenants))
	for _, t := range own {
		tenants, rules = append(tenants, t), append(rules, s.cfg.Policy.Tenants[t])
	}
	return append(tenants, ""), append(rules, s.cfg.Policy.Default)
}

// Pass deletes one round of what is past its TTL and returns the counts.
func (s *Sweeper) Pass(ctx context.Context) (Counts, error) {
	var c Counts
	now := s.clock.Now()
	tenants, rules := s.scopes()
	except := tenants[:len(tenants)-1]
	ownDeliveries := slices.Sorted(maps.Keys(s.cfg.Policy.AgentWebhookDeliveries))
	ownEvents := slices.Sorted(maps.Keys(s.cfg.Policy.AgentRunEvents))
	var errs []error
	for i, tenant := range tenants {
		r := rules[i]
		if list := s.listTTL(r.ThreadsIdle); list > 0 {
			errs = append(errs, s.threads(ctx, store.IdleQuery{Before: now.Add(-list), Tenant: tenant, Except: except, Limit: s.cfg.Batch}, now, r.ThreadsIdle, &c))
		}
		// The scope's TTLs apply to the agents without TTLs of their own.
		if r.WebhookDeliveries > 0 {
			q := store.ExpiredDeliveries{Before: now.Add(-r.WebhookDeliveries), Tenant: tenant, Except: except, ExceptAgents: ownDeliveries, Limit: s.cfg.Batch}
			errs = append(errs, s.deliveries(ctx, q, &c))
		}
		if r.RunEvents > 0 {
			q := store.ExpiredDeliveries{Before: now.Add(-r.RunEvents), Tenant: tenant, Except: except, ExceptAgents: ownEvents, Limit: s.cfg.Batch}
			errs = append(errs, s.runEvents(ctx, q, &c))
		}
	}
	// An agent's own TTLs apply to its items of every tenant.
	for _, name := range ownDeliveries {
		if d := s.cfg.Policy.AgentWebhookDeliveries[name]; d > 0 {
			errs = append(errs, s.deliveries(ctx, store.ExpiredDeliveries{Before: now.Add(-d), Agents: []string{name}, Limit: s.cfg.Batch}, &c))
		}
	}
	for _, name := range ownEvents {
		if d := s.cfg.Policy.AgentRunEvents[name]; d > 0 {
			errs = append(errs, s.runEvents(ctx, store.ExpiredDeliveries{Before: now.Add(-d), Agents: []string{name}, Limit: s.cfg.Batch}, &c))
		}
	}
	s.deleted.WithLabelValues("threads").Add(float64(c.Threads))
	s.deleted.WithLabelValues("threads_skipped").Add(float64(c.Skipped))
	s.deleted.WithLabelValues("threads_failed").Add(float64(c.Failed))
	s.deleted.WithLabelValues("webhook_deliveries").Add(float64(c.Deliveries))
	if s.cfg.Items != nil && s.cfg.Policy.StoreItems > 0 {
		for range maxBatches {
			n, err := s.cfg.Items.DeleteModifiedBefore(ctx, now.Add(-s.cfg.Policy.StoreItems), s.cfg.Batch)
			c.StoreItems += n
			if err != nil {
				errs = append(errs, err)
			}
			if err != nil || n < s.cfg.Batch {
				break
			}
		}
	}
	if s.cfg.Snapshots != nil {
		for range maxBatches {
			n, err := s.cfg.Snapshots.DeleteQueuedSnapshots(ctx, s.cfg.Batch)
			c.Snapshots += n
			if err != nil {
				errs = append(errs, err)
			}
			// A batch with a failure is retried by the next pass, not
			// in a loop now.
			if err != nil || n < s.cfg.Batch {
				break
			}
		}
	}
	if s.cfg.Sessions != nil {
		for range maxBatches {
			n, err := s.cfg.Sessions.DeleteExpiredSessions(ctx, now, s.cfg.Batch)
			c.Sessions += n
			if err != nil {
				errs = append(errs, err)
			}
			if err != nil || n < s.cfg.Batch {
				break
			}
		}
	}
	s.deleted.WithLabelValues("snapshots").Add(float64(c.Snapshots))
	s.deleted.WithLabelValues("http_sessions").Add(float64(c.Sessions))
	s.deleted.WithLabelValues("run_events").Add(float64(c.RunEvents))
	s.deleted.WithLabelValues("store_items").Add(float64(c.StoreItems))
	if c != (Counts{}) {
		s.lg.Info("retention pass", zap.Int("threads-deleted", c.Threads), zap.Int("threads-skipped", c.Skipped),
			zap.Int("threads-failed", c.Failed), zap.Int("webhook-deliveries-deleted", c.Deliveries), zap.Int("run-events-deleted", c.RunEvents), zap.Int("store-items-deleted", c.StoreItems), zap.Int("snapshots-deleted", c.Snapshots), zap.Int("http-sessions-deleted", c.Sessions))
	}
	return c, errors.Join(errs...)
}

// deliveries deletes the finished deliveries q selects, batch after
// batch.
func (s *Sweeper) deliveries(ctx context.Context, q store.ExpiredDeliveries, c *Counts) error {
	for range maxBatches {
		n, err := s.cfg.Store.DeleteFinishedDeliveries(ctx, q)
		c.Deliveries += n
		if err != nil || n < q.Limit {
			return err
		}
	}
	return nil
}

// runEvents deletes the run event logs q selects, batch after batch (n
// counts events, not threads: a batch that deleted none is the last).
func (s *Sweeper) runEvents(ctx context.Context, q store.ExpiredDeliveries, c *Counts) error {
	for range maxBatches {
		n, err := s.cfg.Store.DeleteExpiredRunEvents(ctx, q)
		c.RunEvents += n
		if err != nil || n == 0 {
			return err
		}
	}
	return nil
}

// listTTL is the idle time threads of a scope whose TTL is ttl are
// listed after: the shortest positive one of ttl and the agents' (0:
// nothing to list).
func (s *Sweeper) listTTL(ttl time.Duration) time.Duration {
	out := ttl
	for _, d := range s.cfg.Policy.Agents {
		if d > 0 && (out == 0 || d < out) {
			out = d
		}
	}
	return out
}

// cutoff is the time thread id must be idle since, under ttl or its
// agent's TTL; ok is false for a thread to keep (TTL 0, or used since).
func (s *Sweeper) cutoff(ctx context.Context, id string, now time.Time, ttl time.Duration, listed time.Time) (before time.Time, ok bool, err error) {
	if len(s.cfg.Policy.Agents) == 0 {
		return listed, true, nil
	}
	agentName, updated, err := s.cfg.ThreadInfo(ctx, id)
	if err != nil {
		return time.Time{}, false, err
	}
	if d, own := s.cfg.Policy.Agents[agentName]; own {
		ttl = d
	}
	if ttl <= 0 {
		return time.Time{}, false, nil
	}
	before = now.Add(-ttl)
	return before, updated.Before(before), nil
}

// threads deletes the idle threads q selects, batch after batch, each
// under its TTL (ttl, or its agent's); a thread it could not delete is
// not asked for again in this pass.
func (s *Sweeper) threads(ctx context.Context, q store.IdleQuery, now time.Time, ttl time.Duration, c *Counts) error {
	seen := map[string]bool{}
	for range maxBatches {
		limit := q.Limit + len(seen) // the kept ones are listed again
		ids, err := s.cfg.Store.IdleThreads(ctx, store.IdleQuery{Before: q.Before, Tenant: q.Tenant, Except: q.Except, Limit: limit})
		if err != nil {
			return err
		}
		fresh := 0
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			fresh++
			before, ok, err := s.cutoff(ctx, id, now, ttl, q.Before)
			if errors.Is(err, agent.ErrThreadNotFound) {
				continue
			}
			if err != nil {
				c.Failed++
				s.lg.Warn("retention: thread's agent unknown", zap.String("thread-id", id), zap.Error(err))
				continue
			}
			if !ok {
				continue // its agent keeps it longer
			}
			err = s.cfg.Delete(ctx, id, before)
			switch {
			case err == nil:
				c.Threads++
			case errors.Is(err, agent.ErrThreadNotFound):
				// another replica deleted it
			case errors.Is(err, ErrKept):
				c.Skipped++
			case ctx.Err() != nil:
				return ctx.Err()
			default:
				c.Failed++
				s.lg.Warn("retention: thread not deleted", zap.String("thread-id", id), zap.Error(err))
			}
		}
		if fresh == 0 || len(ids) < limit {
			return nil
		}
	}
	return nil
}
