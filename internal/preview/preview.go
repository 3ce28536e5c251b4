package preview

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// Defaults and bounds.
const (
	DefaultTTL = time.Hour
	MaxTTL     = 24 * time.Hour
	// MaxPerThread bounds a thread's live (unexpired, unrevoked) previews.
	MaxPerThread = 8
	// DefaultRecheck is how often an open connection's preview is read
	// again, so that a revocation on any replica closes it.
	DefaultRecheck = 10 * time.Second
)

// Errors of the preview service.
var (
	// ErrNoSandbox: the thread has no sandbox to preview (none created
	// yet, or it was deleted).
	ErrNoSandbox = errors.New("the thread has no sandbox")
	// ErrOff: agentd serves no previews (no preview listener or key).
	ErrOff = errors.New("agentd serves no previews: start it with --preview-addr, --preview-url and --preview-key-file")
)

// Store is what previews read and write of the thread store.
type Store interface {
	store.Previews
	// Thread returns a thread's record (its tenant and sandbox id), or
	// agent.ErrThreadNotFound.
	Thread(ctx context.Context, id string) (agent.Thread, error)
}

// Dialer connects to 127.0.0.1:port inside sandbox sandboxID, calling its
// worker for tenant (the sandbox's owner).
type Dialer func(ctx context.Context, tenant, sandboxID string, port int) (net.Conn, error)

// Config configures a Service.
type Config struct {
	// Store keeps the records. Required.
	Store Store
	// Keys sign the tokens. Required.
	Keys Keys
	// BaseURL is the public URL of the preview listener (scheme, host,
	// optional path), e.g. https://preview.example.com. Required.
	BaseURL string
	// Dial reaches the boxes. Required.
	Dial Dialer
	// Recheck is how often an open connection's record is re-read
	// (DefaultRecheck).
	Recheck time.Duration
	// Now is the clock (time.Now).
	Now func() time.Time
	// Logger logs (nil = nop); never a token.
	Logger *zap.Logger
}

// Service creates, lists and revokes previews and serves them (Handler).
type Service struct {
	cfg Config
	lg  *zap.Logger
}

// New checks cfg and returns a Service.
func New(cfg Config) (*Service, error) {
	switch {
	case cfg.Store == nil, cfg.Dial == nil:
		return nil, errors.New("preview: a store and a dialer are required")
	case cfg.Keys.current == nil:
		return nil, errors.New("preview: a signing key is required")
	case !strings.HasPrefix(cfg.BaseURL, "http://") && !strings.HasPrefix(cfg.BaseURL, "https://"):
		return nil, fmt.Errorf("preview: base URL %q must start with http:// or https://", cfg.BaseURL)
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if cfg.Recheck <= 0 {
		cfg.Recheck = DefaultRecheck
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	return &Service{cfg: cfg, lg: lg.Named("preview")}, nil
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

// Create makes port of the thread's sandbox reachable for ttl (0 =
// DefaultTTL; the caller checks the bounds) and returns the record and
// its URL.
func (s *Service) Create(ctx context.Context, threadID string, port int, ttl time.Duration) (store.Preview, string, error) {
	t, err := s.owned(ctx, threadID)
	if err != nil {
		return store.Preview{}, "", err
	}
	if t.SandboxID == "" {
		return store.Preview{}, "", fmt.Errorf("preview of thread %s: %w; run it with a sandbox backend first", threadID, ErrNoSandbox)
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	now := s.cfg.Now().UTC()
	raw := make([]byte, idBytes)
	_, _ = rand.Read(raw)
	p := store.Preview{
		ID: hex.EncodeToString(raw), ThreadID: threadID, Tenant: tenant.Norm(t.Tenant), Port: port,
		// Whole seconds: the token carries the expiry in seconds.
		Created: now, Expires: now.Add(ttl).Truncate(time.Second),
	}
	tok, err := s.cfg.Keys.Sign(p.ID, p.Expires)
	if err != nil {
		return store.Preview{}, "", err
	}
	if err := s.cfg.Store.AddPreview(ctx, p, MaxPerThread, now); err != nil {
		return store.Preview{}, "", err
	}
	s.lg.Info("preview created", zap.String("preview-id", p.ID), zap.String("thread-id", threadID), zap.Int("port", port), zap.Time("expires", p.Expires))
	return p, s.cfg.BaseURL + "/p/" + tok + "/", nil
}

// List returns the thread's unexpired previews, newest first.
func (s *Service) List(ctx context.Context, threadID string) ([]store.Preview, error) {
	if _, err := s.owned(ctx, threadID); err != nil {
		return nil, err
	}
	return s.cfg.Store.ListPreviews(ctx, threadID, s.cfg.Now())
}

// Revoke ends preview id; another tenant's preview is
// store.ErrPreviewNotFound.
func (s *Service) Revoke(ctx context.Context, id string) error {
	p, err := s.cfg.Store.Preview(ctx, id)
	if err != nil {
		return err
	}
	if p.Tenant != tenant.From(ctx) {
		return fmt.Errorf("preview %s: %w", id, store.ErrPreviewNotFound)
	}
	if err := s.cfg.Store.RevokePreview(ctx, id); err != nil {
		return err
	}
	s.lg.Info("preview revoked", zap.String("preview-id", id), zap.String("thread-id", p.ThreadID))
	return nil
}
