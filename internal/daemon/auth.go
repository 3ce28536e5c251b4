package daemon

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/plumbhq/plumb/internal/grpccreds"
	"github.com/plumbhq/plumb/internal/tenant"
)

// ReadToken reads a bearer token from a file (surrounding whitespace
// dropped). An empty path means no token.
func ReadToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

// Credential is one accepted bearer token: the tenant it acts for and
// whether it may act for others (send plumb-tenant).
type Credential struct {
	// Tenant the caller acts for.
	Tenant string
	// Token is the bearer token.
	Token string
	// Forwarder marks a trusted forwarder (agentd calling sandboxd): its
	// calls may name another tenant in the plumb-tenant header.
	Forwarder bool
	// Operator marks an operator of agentd: besides acting for its own
	// tenant, it may call the operator RPCs (every tenant's sandboxes,
	// docs/security.md "Operators").
	Operator bool
}

// ParseCredentials parses a credentials file: one credential per line,
// "TENANT TOKEN" followed by the flags it has, if any ("forwarder",
// "operator", each at most once), fields separated by blanks;
// blank lines and lines starting with '#' are skipped. Tenants are
// tenant.Valid names; a token may appear once only. Errors name the line.
func ParseCredentials(data []byte) ([]Credential, error) {
	var out []Credential
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 4 {
			return nil, fmt.Errorf("line %d: want \"TENANT TOKEN [forwarder] [operator]\"", n)
		}
		if !tenant.Valid(f[0]) {
			return nil, fmt.Errorf("line %d: tenant %q: use 1 to 63 of a-z, 0-9, '.', '_', '-'", n, f[0])
		}
		c := Credential{Tenant: f[0], Token: f[1]}
		for _, flag := range f[2:] {
			switch {
			case flag == "forwarder" && !c.Forwarder:
				c.Forwarder = true
			case flag == "operator" && !c.Operator:
				c.Operator = true
			case flag == "forwarder" || flag == "operator":
				return nil, fmt.Errorf("line %d: flag %s twice", n, flag)
			default:
				return nil, fmt.Errorf("line %d: unknown flag %q (want forwarder or operator)", n, flag)
			}
		}
		if prev, dup := seen[c.Token]; dup {
			return nil, fmt.Errorf("line %d: the token of line %d again", n, prev)
		}
		seen[c.Token] = n
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no credentials")
	}
	return out, nil
}

// Credentials is the set of bearer tokens a daemon accepts: a credentials
// file (reloaded by Watch when it changes) and/or a fixed token.
type Credentials struct {
	path  string
	fixed []Credential

	mu    sync.RWMutex
	file  []Credential
	stamp grpccreds.FileStamp
}

// LoadCredentials reads the credentials file at path (empty = none) and
// adds token (empty = none) as tenant "default", a forwarder when
// tokenForwards is set. It returns nil when neither is given. Errors name
// the file and fit on one line.
func LoadCredentials(path, token string, tokenForwards bool) (*Credentials, error) {
	if path == "" && token == "" {
		return nil, nil
	}
	c := &Credentials{path: path}
	if token != "" {
		c.fixed = []Credential{{Tenant: tenant.Default, Token: token, Forwarder: tokenForwards}}
	}
	if path != "" {
		if _, err := c.reload(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// reload re-reads the file; on error the current set stays.
func (c *Credentials) reload() (bool, error) {
	st, err := grpccreds.StampOf(c.path)
	if err != nil {
		return false, fmt.Errorf("credentials file %s: %w", c.path, err)
	}
	c.mu.RLock()
	same := st == c.stamp && c.file != nil
	c.mu.RUnlock()
	if same {
		return false, nil
	}
	data, err := os.ReadFile(c.path)
	if err != nil {
		return false, fmt.Errorf("credentials file %s: %w", c.path, err)
	}
	creds, err := ParseCredentials(data)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stamp = st // a bad file is reported once, not on every poll
	if err != nil {
		return false, fmt.Errorf("credentials file %s: %w", c.path, err)
	}
	c.file = creds
	return true, nil
}

// Reload re-reads the credentials file now if it changed since it was
// last read. A file that does not parse keeps the current set and is
// returned as an error.
func (c *Credentials) Reload() error {
	if c == nil || c.path == "" {
		return nil
	}
	_, err := c.reload()
	return err
}

// Watch re-reads the credentials file when its modification time or size
// changes (checked every interval) and on SIGHUP, until ctx ends. A reload
// that fails keeps the current set and logs one line.
func (c *Credentials) Watch(ctx context.Context, lg *zap.Logger, interval time.Duration) {
	if c == nil || c.path == "" {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-hup:
			c.mu.Lock()
			c.stamp = grpccreds.FileStamp{} // SIGHUP forces a read
			c.mu.Unlock()
		}
		changed, err := c.reload()
		switch {
		case err != nil:
			lg.Warn("credentials not reloaded; keeping the current set", zap.Error(err))
		case changed:
			lg.Info("credentials reloaded", zap.String("file", c.path), zap.Int("count", c.count()))
		}
	}
}

func (c *Credentials) count() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.file) + len(c.fixed)
}

// Lookup returns the credential whose token is tok. Every token is
// compared, in constant time, whatever matches.
func (c *Credentials) Lookup(tok string) (Credential, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var (
		found Credential
		ok    bool
	)
	for _, set := range [][]Credential{c.fixed, c.file} {
		for _, cr := range set {
			if subtle.ConstantTimeCompare([]byte(tok), []byte(cr.Token)) == 1 && !ok {
				found, ok = cr, true
			}
		}
	}
	return found, ok
}

// publicMethod reports methods that answer without a token: health checks
// (Kubernetes probes carry no credentials).
func publicMethod(full string) bool {
	return strings.HasPrefix(full, "/grpc.health.v1.Health/")
}

// authorize checks one call and returns its context with the caller's
// tenant. Without credentials every caller is trusted (loopback, mTLS
// only, or --insecure) and may name its tenant in plumb-tenant; with
// credentials a call needs a known bearer token, and only a forwarder's
// plumb-tenant is honoured.
func authorize(ctx context.Context, creds *Credentials, method string) (context.Context, error) {
	if publicMethod(method) {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	name, cred, err := callerTenant(md, creds)
	if err != nil {
		return nil, err
	}
	ctx = tenant.With(ctx, name)
	if !cred.Forwarder {
		ctx = tenant.WithOwnScope(ctx)
	}
	if cred.Operator {
		ctx = tenant.WithOperator(ctx)
	}
	return ctx, nil
}

// callerTenant is the one credential check: both the tap handle (before
// the server reads a message) and the interceptors call it. It returns the
// tenant the call acts for, given its request headers md, and the
// caller's credential (without credentials every caller is trusted: a
// forwarder and an operator).
func callerTenant(md metadata.MD, creds *Credentials) (string, Credential, error) {
	cred := Credential{Tenant: tenant.Default, Forwarder: true, Operator: true}
	if creds != nil {
		ok := false
		for _, v := range md.Get("authorization") {
			got, bearer := strings.CutPrefix(v, "Bearer ")
			if !bearer {
				continue
			}
			if cred, ok = creds.Lookup(got); ok {
				break
			}
		}
		if !ok {
			return "", Credential{}, status.Error(codes.Unauthenticated, "missing or wrong bearer token (send \"authorization: Bearer <token>\")")
		}
	}
	name := cred.Tenant
	if fwd := md.Get(tenant.MetadataKey); cred.Forwarder && len(fwd) > 0 {
		if len(fwd) > 1 || !tenant.Valid(fwd[0]) {
			return "", Credential{}, status.Errorf(codes.InvalidArgument, "%s header: want one tenant name of 1 to 63 of a-z, 0-9, '.', '_', '-'", tenant.MetadataKey)
		}
		name = fwd[0]
	}
	cred.Token = ""
	return name, cred, nil
}

// authTap refuses a call that authorize would refuse from its headers
// alone, before the server reads any of its messages: gRPC reads a unary
// request (up to the receive limit) before any interceptor runs, so
// without it an unauthenticated client could make the server buffer a
// message per stream. refused, if set, is told of each refusal.
func authTap(creds *Credentials, refused func(error)) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if publicMethod(info.FullMethodName) {
			return ctx, nil
		}
		if _, _, err := callerTenant(info.Header, creds); err != nil {
			if refused != nil {
				refused(err)
			}
			return nil, err
		}
		return ctx, nil
	}
}

// ServerAuth are the server options that check calls against creds (nil:
// every caller is trusted and may name its tenant in plumb-tenant), refuse
// a call before any of its messages is read, and put the caller's tenant
// in each handler's context. Serve installs the same checks. They set the
// server's tap handle, which a server can have only one of.
func ServerAuth(creds *Credentials) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InTapHandle(authTap(creds, nil)), grpc.ChainUnaryInterceptor(authUnary(creds)), grpc.ChainStreamInterceptor(authStream(creds))}
}

func authUnary(creds *Credentials) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, err := authorize(ctx, creds, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

func authStream(creds *Credentials) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		ctx, err := authorize(ss.Context(), creds, info.FullMethod)
		if err != nil {
			return err
		}
		return h(srv, &tenantStream{ServerStream: ss, ctx: ctx})
	}
}

type tenantStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *tenantStream) Context() context.Context { return s.ctx }

// tokenAuth authenticates an HTTP caller's bearer token as authorize does
// a gRPC call's authorization header; every caller is refused when refuse
// says why (httpRefusal).
func tokenAuth(creds *Credentials, refuse string) TokenAuth {
	return func(ctx context.Context, token string) (context.Context, error) {
		if refuse != "" {
			return nil, status.Error(codes.Unauthenticated, refuse)
		}
		md := metadata.MD{}
		if token != "" {
			md.Set("authorization", "Bearer "+token)
		}
		return authorize(metadata.NewIncomingContext(ctx, md), creds, "")
	}
}
