package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/backend/sandboxclient"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// maxMessageBytes matches the daemons' gRPC message bound.
const maxMessageBytes = 16 << 20

// Defaults of Config.
const (
	DefaultRefresh  = 10 * time.Second
	DefaultDeadline = 10 * time.Second
)

// Config is how a Pool finds and reaches its workers.
type Config struct {
	// Targets are "host:port" and "dns:///name:port" entries (see
	// ParseTargets).
	Targets []string
	// Refresh is how often DNS targets are re-resolved and every worker
	// described (DefaultRefresh when 0; negative: never in the
	// background, only on demand).
	Refresh time.Duration
	// Deadline bounds how long a call waits for an unreachable worker
	// before it fails with UNAVAILABLE, and every DescribeWorker (default
	// DefaultDeadline).
	Deadline time.Duration
	// Resolver resolves DNS targets (net.DefaultResolver when nil).
	Resolver *net.Resolver
	// Logger logs fleet changes (no logging when nil).
	Logger *zap.Logger
}

// Pool is the fleet: one connection per worker address, and the workers'
// names, loads and health as last described.
type Pool struct {
	cfg     Config
	targets []target
	opts    []grpc.DialOption
	lg      *zap.Logger

	refreshMu sync.Mutex // one refresh at a time

	mu      sync.RWMutex
	members map[string]*member                          // by address
	byName  map[string]*member                          // worker name → its member
	known   map[string]bool                             // every worker name ever described
	loads   map[*member]*plumbv1.DescribeWorkerResponse // last answer; absent: unreachable
	healthy map[*member]bool

	stop context.CancelFunc
	done chan struct{}
}

// Dial builds a pool of the given targets with default settings. extra
// options are appended to the defaults (insecure transport, 16 MiB
// messages); connections are lazy, so an unreachable worker does not fail
// Dial.
func Dial(addrs []string, lg *zap.Logger, extra ...grpc.DialOption) (*Pool, error) {
	return New(Config{Targets: addrs, Logger: lg}, extra...)
}

// New builds a pool and starts its background refresh (stopped by Close).
// extra dial options are appended to the defaults.
func New(cfg Config, extra ...grpc.DialOption) (*Pool, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Deadline <= 0 {
		cfg.Deadline = DefaultDeadline
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if len(cfg.Targets) == 0 {
		return nil, errors.New("no sandboxd worker addresses")
	}
	p := &Pool{
		cfg: cfg, lg: cfg.Logger.Named("workers"),
		members: map[string]*member{}, byName: map[string]*member{}, known: map[string]bool{},
		loads: map[*member]*plumbv1.DescribeWorkerResponse{}, healthy: map[*member]bool{},
		done: make(chan struct{}),
	}
	for _, s := range cfg.Targets {
		t, err := parseTarget(s)
		if err != nil {
			return nil, err
		}
		p.targets = append(p.targets, t)
	}
	p.opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)),
	}, extra...)
	// Static addresses are members from the start.
	for _, t := range p.targets {
		if t.addr != "" {
			if _, err := p.add(t.addr); err != nil {
				p.closeMembers()
				return nil, err
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	go p.loop(ctx)
	return p, nil
}

// add dials a new member (the pool lock must not be held).
func (p *Pool) add(addr string) (*member, error) {
	m := &member{addr: addr, deadline: p.cfg.Deadline}
	opts := append(slices.Clone(p.opts), grpc.WithUnaryInterceptor(m.unary), grpc.WithStreamInterceptor(m.stream))
	// passthrough: the address is already resolved (or static), and
	// re-resolution is this pool's job.
	c, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("sandboxd %s: %w", addr, err)
	}
	m.conn = c
	p.mu.Lock()
	p.members[addr] = m
	p.mu.Unlock()
	return m, nil
}

func (p *Pool) loop(ctx context.Context) {
	defer close(p.done)
	p.Refresh(ctx)
	if p.cfg.Refresh < 0 {
		return
	}
	t := time.NewTicker(p.cfg.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.Refresh(ctx)
		}
	}
}

// Close stops the background refresh and closes every connection.
func (p *Pool) Close() {
	p.stop()
	<-p.done
	p.closeMembers()
}

func (p *Pool) closeMembers() {
	p.mu.Lock()
	ms := make([]*member, 0, len(p.members))
	for _, m := range p.members {
		ms = append(ms, m)
	}
	p.members = map[string]*member{}
	p.mu.Unlock()
	for _, m := range ms {
		m.mu.Lock()
		closed := m.closed
		m.closed = true
		m.mu.Unlock()
		if !closed {
			m.conn.Close()
		}
	}
}

// Refresh re-resolves the DNS targets (adding a connection per new address
// and retiring the addresses that disappeared) and describes every
// member. It reports whether every member answered.
func (p *Pool) Refresh(ctx context.Context) bool {
	p.refreshMu.Lock()
	defer p.refreshMu.Unlock()
	p.resolve(ctx)
	return p.describe(ctx)
}

// resolve updates the members from DNS. A name that fails to resolve
// keeps its current addresses (a DNS hiccup must not drop the fleet).
func (p *Pool) resolve(ctx context.Context) {
	want := map[string]bool{}
	failed := false
	for _, t := range p.targets {
		if t.addr != "" {
			want[t.addr] = true
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, p.cfg.Deadline)
		ips, err := p.cfg.Resolver.LookupHost(rctx, t.host)
		cancel()
		if err != nil {
			p.lg.Warn("resolve sandboxd workers", zap.String("target", t.String()), zap.Error(err))
			failed = true
			continue
		}
		for _, ip := range ips {
			want[net.JoinHostPort(ip, t.port)] = true
		}
	}
	p.mu.RLock()
	var gone []*member
	for a, m := range p.members {
		if !want[a] && !failed {
			gone = append(gone, m)
		}
	}
	var fresh []string
	for a := range want {
		if _, ok := p.members[a]; !ok {
			fresh = append(fresh, a)
		}
	}
	p.mu.RUnlock()
	sort.Strings(fresh)
	for _, a := range fresh {
		if _, err := p.add(a); err != nil {
			p.lg.Warn("dial sandboxd worker", zap.String("addr", a), zap.Error(err))
			continue
		}
		p.lg.Info("sandboxd worker address added", zap.String("addr", a))
	}
	for _, m := range gone {
		p.mu.Lock()
		delete(p.members, m.addr)
		delete(p.loads, m)
		delete(p.healthy, m)
		name := m.name
		if name != "" && p.byName[name] == m {
			delete(p.byName, name)
		}
		p.mu.Unlock()
		p.lg.Info("sandboxd worker address removed", zap.String("addr", m.addr), zap.String("worker", name))
		m.retire()
	}
}

// describe asks every member for its name, load and health. It reports
// whether every member answered.
func (p *Pool) describe(ctx context.Context) bool {
	p.mu.RLock()
	ms := make([]*member, 0, len(p.members))
	for _, m := range p.members {
		ms = append(ms, m)
	}
	p.mu.RUnlock()
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		all = true
	)
	for _, m := range ms {
		wg.Go(func() {
			info, healthy, err := p.describeOne(ctx, m)
			p.mu.Lock()
			defer p.mu.Unlock()
			if _, ok := p.members[m.addr]; !ok || p.members[m.addr] != m {
				return // retired meanwhile
			}
			if err != nil {
				if p.loads[m] != nil {
					p.lg.Warn("sandboxd worker unreachable", zap.String("addr", m.addr), zap.String("worker", m.name), zap.Error(err))
				}
				delete(p.loads, m)
				delete(p.healthy, m)
				mu.Lock()
				all = false
				mu.Unlock()
				return
			}
			name := info.GetName()
			m.mu.Lock()
			old := m.name
			m.name = name
			m.mu.Unlock()
			if old != "" && old != name && p.byName[old] == m {
				delete(p.byName, old)
			}
			if prev := p.byName[name]; prev != m {
				if prev != nil {
					p.lg.Warn("sandboxd worker name moved to another address", zap.String("worker", name), zap.String("from", prev.addr), zap.String("to", m.addr))
				} else {
					p.lg.Info("sandboxd worker joined", zap.String("worker", name), zap.String("addr", m.addr))
				}
				p.byName[name] = m
			}
			p.known[name] = true
			p.loads[m] = info
			p.healthy[m] = healthy
		})
	}
	wg.Wait()
	return all
}

// describeOne calls DescribeWorker and the gRPC health check (a worker
// without the health service counts as healthy).
func (p *Pool) describeOne(ctx context.Context, m *member) (*plumbv1.DescribeWorkerResponse, bool, error) {
	// A connection whose last attempt failed stays in TRANSIENT_FAILURE
	// until an attempt succeeds: waiting for it would hold every placement
	// for the whole deadline. Skip it now and retry it at once, so a worker
	// that is back is seen by the next placement or refresh.
	if m.conn.GetState() == connectivity.TransientFailure {
		m.conn.ResetConnectBackoff()
		return nil, false, status.Errorf(codes.Unavailable, "%s is unreachable (its last connection attempt failed)", m.label())
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Deadline)
	defer cancel()
	info, err := plumbv1.NewSandboxServiceClient(m.conn).DescribeWorker(cctx, &plumbv1.DescribeWorkerRequest{})
	if err != nil {
		return nil, false, err
	}
	if info.GetName() == "" {
		return nil, false, fmt.Errorf("sandboxd at %s reported no worker name", m.addr)
	}
	h, err := healthpb.NewHealthClient(m.conn).Check(cctx, &healthpb.HealthCheckRequest{})
	switch {
	case status.Code(err) == codes.Unimplemented:
		return info, true, nil
	case err != nil:
		return nil, false, err
	}
	return info, h.GetStatus() == healthpb.HealthCheckResponse_SERVING, nil
}

// free is a worker's headroom as a fraction of its quota (1 when unlimited).
func free(w *plumbv1.DescribeWorkerResponse) float64 {
	f := 1.0
	if m := w.GetMaxSandboxes(); m > 0 {
		f = min(f, 1-float64(w.GetSandboxes())/float64(m))
	}
	if m := w.GetMaxMemoryBytes(); m > 0 {
		f = min(f, 1-float64(w.GetMemoryReservedBytes())/float64(m))
	}
	return f
}

type load struct {
	m    *member
	info *plumbv1.DescribeWorkerResponse
}

// placements lists the healthy, reachable members, least loaded first.
func (p *Pool) placements() []load {
	p.mu.RLock()
	var out []load
	for m, info := range p.loads {
		if p.healthy[m] {
			out = append(out, load{m, info})
		}
	}
	p.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		fi, fj := free(out[i].info), free(out[j].info)
		if fi != fj {
			return fi > fj
		}
		if out[i].info.GetSandboxes() != out[j].info.GetSandboxes() {
			return out[i].info.GetSandboxes() < out[j].info.GetSandboxes()
		}
		return out[i].m.addr < out[j].m.addr
	})
	return out
}

// Create places a sandbox on the healthy worker with the most free
// capacity, trying the next one when a worker is full or fails to answer.
// With no healthy worker it re-resolves the fleet once first.
func (p *Pool) Create(ctx context.Context, req *plumbv1.CreateSandboxRequest) (*plumbv1.Sandbox, error) {
	return p.CreatePreferring(ctx, req, "")
}

// CreatePreferring is Create trying worker first when it is healthy (a
// restore from a snapshot that worker's local store holds); "" prefers
// none.
func (p *Pool) CreatePreferring(ctx context.Context, req *plumbv1.CreateSandboxRequest, worker string) (*plumbv1.Sandbox, error) {
	if sb, routed, err := p.createWithVolumes(ctx, req); routed {
		return sb, err
	}
	p.refreshMu.Lock()
	p.describe(ctx) // loads change with every placement
	p.refreshMu.Unlock()
	loads := p.placements()
	if len(loads) == 0 {
		p.Refresh(ctx)
		loads = p.placements()
	}
	if len(loads) == 0 {
		return nil, status.Errorf(codes.Unavailable, "no healthy sandboxd worker is reachable (%s)", p.targetList())
	}
	if i := slices.IndexFunc(loads, func(l load) bool { return l.info.GetName() == worker }); i > 0 {
		loads = append(append([]load{loads[i]}, loads[:i]...), loads[i+1:]...)
	}
	var last error
	for _, l := range loads {
		resp, err := plumbv1.NewSandboxServiceClient(l.m.conn).CreateSandbox(ctx, req)
		if err == nil {
			return resp.GetSandbox(), nil
		}
		last = err
		if c := status.Code(err); c != codes.ResourceExhausted && c != codes.Unavailable {
			return nil, err
		}
	}
	return nil, last
}

// createWithVolumes creates a sandbox that mounts named volumes by id on
// the worker that holds them (a volume lives on one worker; volumes named
// by name are looked up on the worker placement picks). routed is false
// when req names no volume by id: placement decides.
func (p *Pool) createWithVolumes(ctx context.Context, req *plumbv1.CreateSandboxRequest) (_ *plumbv1.Sandbox, routed bool, _ error) {
	name, what, err := volumesWorker(req)
	if err != nil || name == "" {
		return nil, err != nil, err
	}
	m, err := p.worker(ctx, name, what)
	if err != nil {
		return nil, true, err
	}
	resp, err := plumbv1.NewSandboxServiceClient(m.conn).CreateSandbox(ctx, req)
	if err != nil {
		return nil, true, err
	}
	return resp.GetSandbox(), true, nil
}

// volumesWorker returns the worker of the volumes req mounts by id ("" if
// none), and refuses volumes of two workers.
func volumesWorker(req *plumbv1.CreateSandboxRequest) (name, what string, err error) {
	for i, vm := range req.GetVolumes() {
		w := sandboxapi.VolumeWorkerOf(vm.GetName())
		switch {
		case w == "":
		case name == "":
			name, what = w, "volume "+vm.GetName()
		case w != name:
			return "", "", status.Errorf(codes.InvalidArgument, "volumes[%d].name: volume %s is on worker %s, %s on worker %s: a sandbox mounts volumes of one worker", i, vm.GetName(), w, what, name)
		}
	}
	return name, what, nil
}

func (p *Pool) targetList() string {
	s := make([]string, len(p.targets))
	for i, t := range p.targets {
		s[i] = t.String()
	}
	return strings.Join(s, ", ")
}

// Workers lists the names of the workers that answered the last describe,
// sorted.
func (p *Pool) Workers() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var out []string
	for m := range p.loads {
		out = append(out, m.name)
	}
	sort.Strings(out)
	return out
}

// Healthy returns a client of each healthy, reachable worker by name.
func (p *Pool) Healthy() map[string]plumbv1.SandboxServiceClient {
	out := map[string]plumbv1.SandboxServiceClient{}
	for _, l := range p.placements() {
		out[l.info.GetName()] = plumbv1.NewSandboxServiceClient(l.m.conn)
	}
	return out
}

// ErrUnknownWorker matches the error of a sandbox id whose worker no
// member of the fleet claims (every member answered). Its gRPC code is
// NOT_FOUND.
var ErrUnknownWorker = errors.New("the sandbox's worker is not part of the fleet")

type unknownWorker struct{ st *status.Status }

func (e unknownWorker) Error() string              { return e.st.Err().Error() }
func (e unknownWorker) GRPCStatus() *status.Status { return e.st }
func (unknownWorker) Is(target error) bool         { return target == ErrUnknownWorker }

// owner returns the member of the worker that owns sandbox id: a map
// lookup, except for a name not seen yet, which refreshes the fleet once.
func (p *Pool) owner(ctx context.Context, id string) (*member, error) {
	name := sandboxapi.WorkerOf(id)
	if name == "" {
		return nil, status.Errorf(codes.InvalidArgument, "%q is not a sandbox id", id)
	}
	return p.worker(ctx, name, "sandbox "+id)
}

// worker returns the member of worker name, which holds what (for
// errors: "sandbox sbx-…", "volume vol-…").
func (p *Pool) worker(ctx context.Context, name, what string) (*member, error) {
	p.mu.RLock()
	m, ok := p.byName[name]
	known := p.known[name]
	p.mu.RUnlock()
	if ok {
		return m, nil
	}
	if known {
		// It was a member and its address is gone (pod deleted or
		// rescheduled): it may come back under a new address.
		p.Refresh(ctx)
		p.mu.RLock()
		m, ok = p.byName[name]
		p.mu.RUnlock()
		if ok {
			return m, nil
		}
		return nil, status.Errorf(codes.Unavailable, "sandboxd worker %s of %s is unreachable (no longer resolved)", name, what)
	}
	all := p.Refresh(ctx)
	p.mu.RLock()
	m, ok = p.byName[name]
	p.mu.RUnlock()
	switch {
	case ok:
		return m, nil
	case all:
		return nil, unknownWorker{status.Newf(codes.NotFound, "%s: worker %s is not part of the fleet", what, name)}
	}
	return nil, status.Errorf(codes.Unavailable, "sandboxd worker %s of %s is unknown while some workers are unreachable", name, what)
}

// Conn returns the connection of the worker that owns sandbox id.
func (p *Pool) Conn(ctx context.Context, id string) (grpc.ClientConnInterface, error) {
	m, err := p.owner(ctx, id)
	if err != nil {
		return nil, err
	}
	return m.conn, nil
}

// Client returns a SandboxService client of the worker that owns id.
func (p *Pool) Client(ctx context.Context, id string) (plumbv1.SandboxServiceClient, error) {
	c, err := p.Conn(ctx, id)
	if err != nil {
		return nil, err
	}
	return plumbv1.NewSandboxServiceClient(c), nil
}

// Backend returns the file/exec backend of sandbox id; home is its working
// dir.
func (p *Pool) Backend(ctx context.Context, id, home string) (*sandboxclient.Backend, error) {
	c, err := p.Conn(ctx, id)
	if err != nil {
		return nil, err
	}
	return sandboxclient.New(c, id, home), nil
}

// Delete removes sandbox id from its worker; an unknown sandbox is not an
// error.
func (p *Pool) Delete(ctx context.Context, id string) error {
	c, err := p.Client(ctx, id)
	if errors.Is(err, ErrUnknownWorker) {
		return nil // nothing of it is left anywhere this pool can reach
	}
	if err != nil {
		return err
	}
	_, err = c.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: id})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	return err
}

// Down reports whether the worker of sandbox id is out of reach as far as
// the pool knows, without any RPC: not a current member, or its connection
// is not ready. Callers use it to tell a lost worker from other failures.
func (p *Pool) Down(id string) bool {
	p.mu.RLock()
	m, ok := p.byName[sandboxapi.WorkerOf(id)]
	p.mu.RUnlock()
	return !ok || m.conn.GetState() != connectivity.Ready
}
