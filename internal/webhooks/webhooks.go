package webhooks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/secrets"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/webhook"
)

// Defaults of Config.
const (
	DefaultRetryFor     = 24 * time.Hour
	DefaultTimeout      = 10 * time.Second
	DefaultMaxAttempts  = 30
	DefaultConcurrency  = 8
	DefaultPollInterval = time.Second
	DefaultKeyGrace     = 24 * time.Hour
)

// Target is a URL an agent's runs report to, and the events it wants
// (none: all).
type Target struct {
	URL    string
	Events []webhook.EventType
}

func (t Target) wants(e webhook.EventType) bool {
	return len(t.Events) == 0 || slices.Contains(t.Events, e)
}

// Threads reads a thread with its last run and pending interrupt.
type Threads interface {
	LoadThread(ctx context.Context, id string) (*agent.ThreadData, error)
}

// Config is agentd's webhook setup.
type Config struct {
	// Store keeps the keys and the delivery log (the thread store).
	// Required.
	Store store.Webhooks
	// Threads reads a run's thread when it ends. Required.
	Threads Threads
	// Sealer seals the signing keys at rest (the secrets key). Without
	// an enabled one, keys cannot be made or read: webhooks are off
	// (ErrNoKey from every call).
	Sealer *secrets.Sealer
	// Policy is where deliveries may go.
	Policy webhook.Policy
	// Agents are the per-agent targets (agents.<name>.webhooks).
	Agents map[string][]Target
	// DefaultAgent is the agent of a run whose spec names none.
	DefaultAgent string
	// RetryFor bounds how long a delivery is retried (DefaultRetryFor).
	RetryFor time.Duration
	// Timeout bounds one attempt (DefaultTimeout).
	Timeout time.Duration
	// MaxAttempts bounds the attempts (DefaultMaxAttempts).
	MaxAttempts int
	// Concurrency bounds the attempts in flight on this replica
	// (DefaultConcurrency).
	Concurrency int
	// PollInterval is how often the store is asked for due deliveries
	// (DefaultPollInterval).
	PollInterval time.Duration
	// KeyGrace is how long a rotated-out key keeps signing
	// (DefaultKeyGrace).
	KeyGrace time.Duration
	// Holder names this replica in claims. Required.
	Holder string
}

// Option adjusts a Service (test seams).
type Option func(*Service)

// WithLogger sets the logger (nil = nop).
func WithLogger(lg *zap.Logger) Option { return func(s *Service) { s.lg = lg } }

// WithClock sets the clock.
func WithClock(now func() time.Time) Option { return func(s *Service) { s.now = now } }

// WithResolver sets the resolver of the early URL check and of dials.
func WithResolver(r *net.Resolver) Option { return func(s *Service) { s.resolver = r } }

// WithBackoff sets the first and the largest delay between attempts
// (webhook.FirstRetry, webhook.MaxRetry).
func WithBackoff(first, max time.Duration) Option {
	return func(s *Service) { s.firstRetry, s.maxRetry = first, max }
}

// Service records, delivers and lists webhooks.
type Service struct {
	cfg                  Config
	lg                   *zap.Logger
	now                  func() time.Time
	resolver             *net.Resolver
	client               *http.Client
	firstRetry, maxRetry time.Duration
	// wake tells Run that this replica recorded a delivery, so it claims
	// at once instead of at its next poll.
	wake chan struct{}
}

// New returns the service; Run delivers.
func New(cfg Config, opts ...Option) (*Service, error) {
	if cfg.Store == nil || cfg.Threads == nil {
		return nil, errors.New("webhooks: a store is required")
	}
	if cfg.Holder == "" {
		return nil, errors.New("webhooks: a holder name is required")
	}
	for name, ts := range cfg.Agents {
		for _, t := range ts {
			if _, err := cfg.Policy.CheckURL(t.URL); err != nil {
				return nil, fmt.Errorf("agents.%s.webhooks: %w", name, err)
			}
		}
	}
	cfg.RetryFor = cmpOr(cfg.RetryFor, DefaultRetryFor)
	cfg.Timeout = cmpOr(cfg.Timeout, DefaultTimeout)
	cfg.MaxAttempts = cmpOr(cfg.MaxAttempts, DefaultMaxAttempts)
	cfg.Concurrency = cmpOr(cfg.Concurrency, DefaultConcurrency)
	cfg.PollInterval = cmpOr(cfg.PollInterval, DefaultPollInterval)
	cfg.KeyGrace = cmpOr(cfg.KeyGrace, DefaultKeyGrace)
	s := &Service{cfg: cfg, now: time.Now, firstRetry: webhook.FirstRetry, maxRetry: webhook.MaxRetry, wake: make(chan struct{}, 1)}
	for _, o := range opts {
		o(s)
	}
	if s.lg == nil {
		s.lg = zap.NewNop()
	}
	s.client = cfg.Policy.Client(cfg.Timeout, s.resolver)
	return s, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Enabled reports whether webhooks work here (a secrets key is set).
func (s *Service) Enabled() bool { return s != nil && s.cfg.Sealer.Enabled() }

func (s *Service) enabled() error {
	if !s.Enabled() {
		return fmt.Errorf("webhooks need a secrets key to seal their signing keys: %w", secrets.ErrNoKey)
	}
	return nil
}

// keyName is the name a signing key is sealed under (bound to it).
func keyName(id string) string { return "webhook-key." + id }

// CheckURL checks a URL a request names for tenant: the policy (also
// after resolving its host), and that the tenant has a signing key
// (store.ErrNoWebhookKey otherwise: RotateKey makes the first).
func (s *Service) CheckURL(ctx context.Context, tenantID, raw string) error {
	if err := s.enabled(); err != nil {
		return err
	}
	u, err := s.cfg.Policy.CheckURL(raw)
	if err != nil {
		return err
	}
	if err := s.cfg.Policy.Resolve(ctx, s.resolver, u); err != nil {
		return err
	}
	keys, err := s.cfg.Store.WebhookKeys(ctx, tenant.Norm(tenantID), s.now())
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return fmt.Errorf("tenant %s has no webhook signing key; call RotateWebhookKey first: %w", tenant.Norm(tenantID), store.ErrNoWebhookKey)
	}
	return nil
}

// NewKey is a rotation's answer.
type NewKey struct {
	ID      string
	Secret  string
	Created time.Time
	// PreviousExpire is when the keys it replaced stop signing.
	PreviousExpire time.Time
}

// RotateKey makes a new signing key for tenant, current from now on; the
// current ones keep signing for grace (Config.KeyGrace when 0; negative:
// not at all). The key is returned once and stored only sealed.
func (s *Service) RotateKey(ctx context.Context, tenantID string, grace time.Duration) (NewKey, error) {
	if err := s.enabled(); err != nil {
		return NewKey{}, err
	}
	t := tenant.Norm(tenantID)
	secret, err := webhook.NewKey()
	if err != nil {
		return NewKey{}, err
	}
	now := s.now()
	if grace == 0 {
		grace = s.cfg.KeyGrace
	}
	grace = max(grace, 0)
	k := NewKey{ID: "whk_" + ulid.Make().String(), Secret: secret, Created: now, PreviousExpire: now.Add(grace)}
	sealed, err := s.cfg.Sealer.Seal(t, keyName(k.ID), []byte(secret))
	if err != nil {
		return NewKey{}, err
	}
	if err := s.cfg.Store.RotateWebhookKey(ctx, store.WebhookKey{Tenant: t, ID: k.ID, Sealed: sealed, Created: now}, k.PreviousExpire); err != nil {
		return NewKey{}, err
	}
	s.lg.Info("webhook signing key rotated", zap.String("tenant", t), zap.String("key-id", k.ID))
	return k, nil
}

// List returns a page of the tenant's deliveries (q.Tenant is set here).
func (s *Service) List(ctx context.Context, tenantID string, q store.DeliveryQuery) ([]store.Delivery, string, error) {
	q.Tenant = tenant.Norm(tenantID)
	return s.cfg.Store.ListDeliveries(ctx, q)
}

// DeliveryID is the id of the delivery of event to url for a run: the
// same however often the event is recorded, so it is recorded once.
func DeliveryID(runID string, e webhook.EventType, interruptID, url string) string {
	h := sha256.Sum256([]byte(runID + "\x00" + string(e) + "\x00" + interruptID + "\x00" + url))
	return "whd_" + hex.EncodeToString(h[:16])
}

// OnRunEnd records the deliveries of a run's end (runhost.Config.OnRunEnd):
// one per target that wants the event — the agent's webhooks and the
// run's own webhook_url. It only writes the store.
func (s *Service) OnRunEnd(ctx context.Context, end runhost.RunEnd) error {
	if !s.Enabled() {
		return nil
	}
	td := end.Thread
	if td == nil {
		var err error
		if td, err = s.cfg.Threads.LoadThread(ctx, end.ThreadID); err != nil {
			return fmt.Errorf("load the thread of run %s: %w", end.RunID, err)
		}
	}
	agentName := s.cfg.DefaultAgent
	var spec agent.RunSpec
	if td.LastRun != nil && td.LastRun.RunID == end.RunID {
		spec = td.LastRun.Spec
		if spec.Agent != "" {
			agentName = spec.Agent
		}
	}
	p := payload(end, td, agentName)
	var targets []Target
	targets = append(targets, s.cfg.Agents[agentName]...)
	if spec.WebhookURL != "" {
		targets = append(targets, Target{URL: spec.WebhookURL})
	}
	interruptID := ""
	if p.Interrupt != nil {
		interruptID = p.Interrupt.ID
	}
	seen := map[string]bool{}
	for _, t := range targets {
		if seen[t.URL] || !t.wants(p.Type) {
			continue
		}
		seen[t.URL] = true
		p.ID = DeliveryID(end.RunID, p.Type, interruptID, t.URL)
		body, err := json.Marshal(p)
		if err != nil {
			return err
		}
		now := s.now()
		d := store.Delivery{
			ID: p.ID, Tenant: tenant.Norm(td.Thread.Tenant), ThreadID: end.ThreadID, RunID: end.RunID, Agent: agentName, Event: string(p.Type), URL: t.URL,
			Payload: body, NextAttempt: now, GiveUp: now.Add(s.cfg.RetryFor), Created: now,
		}
		created, err := s.cfg.Store.EnqueueDelivery(ctx, d)
		if err != nil {
			return err
		}
		if created {
			s.lg.Debug("webhook delivery recorded", zap.String("delivery-id", d.ID), zap.String("run-id", d.RunID), zap.String("event", d.Event))
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
	return nil
}

// payload builds the body of end's event (ID is set per target).
func payload(end runhost.RunEnd, td *agent.ThreadData, agentName string) *webhook.Payload {
	p := &webhook.Payload{CreatedAt: end.Time.UTC(), ThreadID: end.ThreadID, RunID: end.RunID, Agent: agentName}
	if p.CreatedAt.IsZero() {
		p.CreatedAt = time.Now().UTC()
	}
	if lr := td.LastRun; lr != nil && lr.RunID == end.RunID {
		if !lr.StartedAt.IsZero() {
			st := lr.StartedAt.UTC()
			p.StartedAt = &st
		}
		p.Usage = usage(lr.Usage.Prompt, lr.Usage.Completion, lr.Usage.Total, lr.Usage.Cached, lr.Usage.Reasoning)
	}
	fin := p.CreatedAt
	switch e := end.Payload.(type) {
	case agent.Interrupted:
		p.Type, p.Status = webhook.RunInterrupted, string(agent.StatusInterrupted)
		in := &webhook.Interrupt{ID: e.InterruptID, Requests: []webhook.InterruptRequest{}}
		for _, r := range e.Requests {
			args := json.RawMessage(r.Args)
			if !json.Valid(args) {
				b, _ := json.Marshal(r.Args)
				args = b
			}
			allowed := make([]string, len(r.Allowed))
			for i, a := range r.Allowed {
				allowed[i] = string(a)
			}
			in.Requests = append(in.Requests, webhook.InterruptRequest{
				ToolCallID: r.ToolCallID, AgentPath: r.AgentPath, ParentToolCallID: r.ParentToolCallID, Kind: string(r.Kind),
				ToolName: r.ToolName, Args: args, Description: r.Description, AllowedDecisions: allowed,
			})
		}
		p.Interrupt = in
	case agent.RunError:
		p.Type, p.Status = webhook.RunFailed, string(agent.StatusFailed)
		p.Error = &webhook.Error{Code: e.Code, Message: e.Message, Retryable: e.Retryable}
		p.FinishedAt = &fin
	case agent.RunFinished:
		p.Status = string(e.Status)
		switch e.Status {
		case agent.StatusCompleted:
			p.Type = webhook.RunSucceeded
		case agent.StatusCancelled:
			p.Type = webhook.RunCancelled
		default:
			p.Type = webhook.RunFailed
		}
		if u := usage(e.Usage.Prompt, e.Usage.Completion, e.Usage.Total, e.Usage.Cached, e.Usage.Reasoning); u != nil {
			p.Usage = u
		}
		p.FinishedAt = &fin
	}
	return p
}

func usage(prompt, completion, total, cached, reasoning int) *webhook.Usage {
	if prompt == 0 && completion == 0 && total == 0 {
		return nil
	}
	return &webhook.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: total, CachedTokens: cached, ReasoningTokens: reasoning}
}

// jitter is the random source of the backoff.
func jitter() float64 { return rand.Float64() }
