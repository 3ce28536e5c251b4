package egressapproval

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/store"
)

// Bounds.
const (
	// DefaultTimeout is how long a connection waits for a decision when
	// the config names no timeout.
	DefaultTimeout = 5 * time.Minute
	// MinTimeout and MaxTimeout bound the timeout (those of sandboxd).
	MinTimeout = time.Second
	MaxTimeout = 24 * time.Hour
	// MaxReason bounds a rejection's reason (sandboxd's bound).
	MaxReason = 1024
	// readyWait bounds how long a tool call waits for its box's worker
	// to confirm the watch before it runs anyway.
	readyWait = 30 * time.Second
)

// Errors of the service.
var (
	// ErrOff: agentd's config does not enable egress approval.
	ErrOff = errors.New("egress approval is off: set sandbox.template.egress_approval.enabled in agentd's config")
	// ErrGone: the decision is recorded, but the connection no longer
	// waits (it timed out or its tool call ended first).
	ErrGone = errors.New("the connection no longer waits for a decision")
)

// Store is what the service reads and writes of the thread store.
type Store interface {
	store.EgressRecords
	// Thread returns a thread's record (tenant, sandbox), or
	// agent.ErrThreadNotFound.
	Thread(ctx context.Context, id string) (agent.Thread, error)
}

// Workers reaches the sandboxd worker that owns a sandbox (*fleet.Pool).
type Workers interface {
	Client(ctx context.Context, sandboxID string) (plumbv1.SandboxServiceClient, error)
}

// Config configures a Service.
type Config struct {
	// Store keeps the records. Required.
	Store Store
	// Workers reach the boxes. Required.
	Workers Workers
	// Timeout is how long a connection waits (DefaultTimeout when 0).
	Timeout time.Duration
	// Now is the clock (time.Now).
	Now func() time.Time
	// Logger logs (nil = nop).
	Logger *zap.Logger
}

// Service watches boxes during tool calls, decides asks and hands stored
// grants to new boxes.
type Service struct {
	cfg Config
	lg  *zap.Logger

	mu      sync.Mutex
	watches map[string]*watch // by sandbox id
	closed  bool
	wg      sync.WaitGroup
}

// New checks cfg and returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Workers == nil {
		return nil, errors.New("egressapproval: a store and workers are required")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Timeout < MinTimeout || cfg.Timeout > MaxTimeout {
		return nil, fmt.Errorf("egressapproval: timeout %s out of range %s..%s", cfg.Timeout, MinTimeout, MaxTimeout)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	return &Service{cfg: cfg, lg: lg.Named("egress-approval"), watches: map[string]*watch{}}, nil
}

// Close ends every watch and waits for them.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	for _, w := range s.watches {
		w.stop()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// owned returns thread id's record when it belongs to ctx's tenant;
// another tenant's thread is agent.ErrThreadNotFound.
func (s *Service) owned(ctx context.Context, id string) (agent.Thread, error) {
	t, err := s.cfg.Store.Thread(ctx, id)
	if err != nil {
		return agent.Thread{}, err
	}
	if tenant.Norm(t.Tenant) != tenant.From(ctx) {
		return agent.Thread{}, fmt.Errorf("thread %s: %w", id, agent.ErrThreadNotFound)
	}
	return t, nil
}

// Decision is a human's answer to a pending request.
type Decision struct {
	ThreadID, RequestID string
	Allow               bool
	// Scope of an approval ("" = RUN); rejections have none.
	Scope store.EgressScope
	// Reason is appended to a rejection's 403.
	Reason string
	// By names the caller (tenant and credential subject).
	By string
}

// Decide records d for ctx's tenant's thread and passes it to the box's
// worker, so that the waiting connection proceeds or is refused at once.
// The record is written first (it is the one place two deciders race);
// ErrGone when the connection stopped waiting before the worker got the
// decision (it stays recorded: a THREAD or AGENT grant applies to later
// boxes all the same).
func (s *Service) Decide(ctx context.Context, d Decision) (store.EgressRecord, error) {
	th, err := s.owned(ctx, d.ThreadID)
	if err != nil {
		return store.EgressRecord{}, err
	}
	r, err := s.cfg.Store.EgressRequest(ctx, d.ThreadID, d.RequestID)
	if err != nil {
		return store.EgressRecord{}, err
	}
	if r.Tenant != tenant.Norm(th.Tenant) {
		return store.EgressRecord{}, fmt.Errorf("egress request %s: %w", d.RequestID, store.ErrEgressNotFound)
	}
	dec := store.EgressDecision{Status: store.EgressRejected, DecidedBy: d.By, Decided: s.cfg.Now(), Reason: d.Reason}
	if d.Allow {
		dec.Status, dec.Scope, dec.Reason = store.EgressApproved, d.Scope, ""
		if dec.Scope == "" {
			dec.Scope = store.EgressScopeRun
		}
	}
	if r, err = s.cfg.Store.DecideEgressRequest(ctx, d.ThreadID, d.RequestID, dec); err != nil {
		return store.EgressRecord{}, err
	}
	s.lg.Info("egress decided", zap.String("thread-id", r.ThreadID), zap.String("request-id", r.RequestID), zap.String("host", r.Host),
		zap.Int("port", r.Port), zap.String("status", string(r.Status)), zap.String("scope", string(r.Scope)), zap.String("by", d.By),
		zap.String("tool-call-id", r.ToolCallID))
	if err := s.deliver(ctx, r, d.Reason); err != nil {
		return r, err
	}
	return r, nil
}

// deliver passes a recorded decision to the box's worker. THREAD and
// AGENT approvals also admit the destination for the rest of the box's
// life; RUN approvals let the waiting connections through (later asks of
// the same run are approved by the watch, from the record).
func (s *Service) deliver(ctx context.Context, r store.EgressRecord, reason string) error {
	ctx = tenant.With(ctx, r.Tenant)
	c, err := s.cfg.Workers.Client(ctx, r.SandboxID)
	if err != nil {
		return fmt.Errorf("reach the worker of sandbox %s: %w", r.SandboxID, err)
	}
	scope := plumbv1.EgressScope_EGRESS_SCOPE_ONCE
	if r.Scope == store.EgressScopeThread || r.Scope == store.EgressScopeAgent {
		scope = plumbv1.EgressScope_EGRESS_SCOPE_SANDBOX
	}
	_, err = c.DecideEgress(ctx, &plumbv1.DecideEgressRequest{SandboxId: r.SandboxID, RequestId: r.RequestID,
		Allow: r.Status == store.EgressApproved, Scope: scope, Reason: reason})
	switch status.Code(err) {
	case codes.OK:
		return nil
	case codes.NotFound:
		return fmt.Errorf("egress request %s of thread %s: %w", r.RequestID, r.ThreadID, ErrGone)
	}
	return fmt.Errorf("decide egress request %s on the worker of sandbox %s: %w", r.RequestID, r.SandboxID, err)
}

// Pending returns the pending requests of ctx's tenant's thread.
func (s *Service) Pending(ctx context.Context, threadID string) ([]store.EgressRecord, error) {
	if _, err := s.owned(ctx, threadID); err != nil {
		return nil, err
	}
	return s.cfg.Store.PendingEgress(ctx, threadID)
}

// List returns a page of approvals of ctx's tenant's thread (q.ThreadID)
// or agent (q.Agent).
func (s *Service) List(ctx context.Context, q store.EgressQuery) ([]store.EgressRecord, string, error) {
	if q.ThreadID != "" {
		if _, err := s.owned(ctx, q.ThreadID); err != nil {
			return nil, "", err
		}
	}
	q.Tenant = tenant.From(ctx)
	return s.cfg.Store.ListEgressGrants(ctx, q)
}

// Revoke marks an approval of ctx's tenant's thread revoked: boxes created
// from now on no longer get it.
func (s *Service) Revoke(ctx context.Context, threadID, requestID string) error {
	if _, err := s.owned(ctx, threadID); err != nil {
		return err
	}
	return s.cfg.Store.RevokeEgressGrant(ctx, threadID, requestID)
}

// GrantNewBox gives a box just created for threadID (of tenant, run by
// agent) the stored THREAD and AGENT grants that apply to it, for its
// life. A grant the worker refuses is logged and skipped: the box asks
// again for it.
func (s *Service) GrantNewBox(ctx context.Context, tenantName, agentName, threadID, sandboxID string) {
	tenantName = tenant.Norm(tenantName)
	grants, err := s.cfg.Store.EgressGrants(ctx, tenantName, agentName, threadID)
	if err != nil || len(grants) == 0 {
		if err != nil {
			s.lg.Warn("read the egress grants of a new box", zap.String("thread-id", threadID), zap.Error(err))
		}
		return
	}
	ctx = tenant.With(ctx, tenantName)
	c, err := s.cfg.Workers.Client(ctx, sandboxID)
	if err != nil {
		s.lg.Warn("reach the worker of a new box", zap.String("sandbox-id", sandboxID), zap.Error(err))
		return
	}
	seen := map[string]bool{}
	for _, g := range grants {
		key := fmt.Sprintf("%s:%d", g.Host, g.Port)
		if seen[key] {
			continue
		}
		seen[key] = true
		if _, err := c.DecideEgress(ctx, &plumbv1.DecideEgressRequest{SandboxId: sandboxID, Host: g.Host, Port: uint32(g.Port), //nolint:gosec // 1-65535
			Allow: true, Scope: plumbv1.EgressScope_EGRESS_SCOPE_SANDBOX}); err != nil {
			s.lg.Warn("give a new box an egress grant", zap.String("sandbox-id", sandboxID), zap.String("grant", key), zap.Error(err))
			continue
		}
		s.lg.Info("egress grant given to a new box", zap.String("thread-id", threadID), zap.String("sandbox-id", sandboxID),
			zap.String("grant", key), zap.String("scope", string(g.Scope)), zap.String("granted-by", g.DecidedBy), zap.String("request-id", g.RequestID))
	}
}

// Spec names what a watch is for.
type Spec struct {
	Tenant, ThreadID, SandboxID string
	// Agent is the run's primary agent.
	Agent string
	// Call is the tool call running in the box.
	Call *backend.EgressCall
}

// Watch makes the box of spec ask about its connections to destinations
// off its allow-list while the returned stop has not been called, and
// reports them as events of spec.Call. It returns once the box's worker
// has the watch (or could not take it: then the box refuses as without
// approval). Concurrent calls of one box share one watch; an ask goes to
// the oldest call still running.
func (s *Service) Watch(ctx context.Context, spec Spec) (stop func()) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return func() {}
	}
	w := s.watches[spec.SandboxID]
	if w == nil {
		w = s.startWatch(ctx, spec)
		s.watches[spec.SandboxID] = w
	}
	ref := &callRef{spec: spec}
	w.mu.Lock()
	w.calls = append(w.calls, ref)
	w.mu.Unlock()
	s.mu.Unlock()
	t := time.NewTimer(readyWait)
	defer t.Stop()
	select {
	case <-w.ready:
	case <-t.C: // a worker that never says: the box refuses until it asks
		s.lg.Warn("the box's worker did not confirm the egress watch; going on", zap.String("sandbox-id", spec.SandboxID))
	case <-ctx.Done():
	}
	return func() { s.release(w, ref) }
}

// release drops a call from its watch; the last one ends the watch (the
// box's proxy stops asking and refuses what is pending).
func (s *Service) release(w *watch, ref *callRef) {
	s.mu.Lock()
	w.mu.Lock()
	for i, c := range w.calls {
		if c == ref {
			w.calls = append(w.calls[:i], w.calls[i+1:]...)
			break
		}
	}
	last := len(w.calls) == 0
	w.mu.Unlock()
	if last && s.watches[w.sandboxID] == w {
		delete(s.watches, w.sandboxID)
	}
	s.mu.Unlock()
	if last {
		w.stop()
		<-w.done
	}
}
