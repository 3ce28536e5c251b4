package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/egress"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
	"go.uber.org/zap"
)

// State is a sandbox's lifecycle state.
type State string

// Sandbox states.
const (
	StateRunning  State = "running"
	StateFailed   State = "failed"
	StateDeleting State = "deleting"
)

// Info describes a sandbox.
type Info struct {
	ID            string
	Worker        string
	ContainerID   string
	State         State
	FailureReason string
	Template      string
	Settings      Template
	Labels        map[string]string
	CreatedAt     time.Time
	ExpiresAt     time.Time
	LastUsedAt    time.Time

	// Tenant owns the sandbox (DefaultTenant when created without one).
	Tenant string
}

// CreateSpec is a create request: a template name, or a bare image, with
// overrides. Zero fields mean the template's or the worker's defaults.
type CreateSpec struct {
	Template  string
	Overrides Template
	Labels    map[string]string
	// Tenant owns the new sandbox ("" = DefaultTenant); it is recorded in
	// the LabelTenant label.
	Tenant string

	// Inject are secret injection rules for the box's egress proxy
	// (inject.go). They hold secret values: never log them, never put
	// them in Info. A create with rules never takes a pooled box.
	Inject []egress.InjectRule

	pool string // the pool key of a box made for a warm pool
}

// Config configures a Manager.
type Config struct {
	// Worker names this worker; it is part of every sandbox id.
	Worker string
	// Agent is the static sandbox-agent binary baked into sandbox images.
	Agent []byte
	// Templates are the named templates requests may use.
	Templates map[string]Template
	// Defaults fill unset template fields (DefaultTemplate when zero).
	Defaults Template
	// User is the uid:gid sandboxes run as (DefaultUser when empty).
	User string
	// MaxSandboxes caps live sandboxes (0 = unlimited).
	MaxSandboxes int
	// MaxMemoryBytes caps the sum of sandbox memory limits (0 = unlimited).
	MaxMemoryBytes int64
	// ReapInterval is how often expired sandboxes are removed (default 10 s).
	ReapInterval time.Duration
	// DiskEnforcement is how a sandbox's disk_bytes is enforced:
	// DiskKernel ("" too) gives its workspace a file system of its own,
	// DiskWatchdog measures it (a fallback where loop devices are not
	// available; see docs/security.md, "Workspace disk limit").
	DiskEnforcement string
	// DiskCheckInterval is how often the disk watchdog (CheckDisk) runs
	// under DiskWatchdog (default DefaultDiskCheckInterval), in its own
	// goroutine.
	DiskCheckInterval time.Duration
	// ExtraLabels are added to every container and volume (tests use them
	// to find leftovers).
	ExtraLabels map[string]string
	// ChannelMemoryBytes is the memory all agent channels of the worker
	// may hold together: frames being read plus stream events not yet
	// taken (DefaultChannelMemoryBytes when 0). A channel that cannot get
	// budget is reset and its sandbox charged a violation.
	ChannelMemoryBytes int64
	// ViolationAllowance is how many protocol violations a sandbox's agent
	// channel may commit before the sandbox is failed and its container
	// killed (DefaultViolationAllowance when 0).
	ViolationAllowance int
	// Policy bounds what any sandbox may have; its zero value is already
	// safe (see Policy).
	Policy Policy
	// StateDir is where the worker records each sandbox's expiry, so a
	// restarted worker re-adopts sandboxes with the expiry they had ("" =
	// no record: re-adopted sandboxes expire at their creation time plus
	// TTL, an upper bound no restart can extend). Warm pools need it: it
	// records what each claim gave its pool box.
	StateDir string
	// Pools configures warm pools by template name ("" = requests that
	// name no template, served from Defaults): boxes created, started and
	// greeted ahead of requests, which CreateSandbox claims (see
	// PoolConfig).
	Pools map[string]PoolConfig
	// EgressProxy is the static plumb-egress binary that egress sandboxes'
	// proxies run (nil = network egress is refused; see egress.go).
	EgressProxy []byte
	// EgressUpstreamCA is the PEM bundle an injecting proxy verifies
	// upstream certificates against (nil = the worker's system bundle).
	EgressUpstreamCA []byte
	// Unhardened is for benchmarks only: never in sandboxd. It measures
	// what the hardening costs (bench rows B1-unhardened, B2-unhardened):
	// sandbox containers get the engine's defaults instead of
	// containerSpec's hardening (default capabilities, no
	// no-new-privileges, seccomp unconfined, a writable root, no ulimits)
	// and the agent keeps root's identity for files and commands (no
	// --uid/--gid, agent.Config.User nil). sandboxd's configuration has no
	// field for it, so no config file and no request can set it.
	// NewManager refuses it with Pools.
	Unhardened bool
}

// DefaultViolationAllowance is the default Config.ViolationAllowance.
const DefaultViolationAllowance = 3

// Manager owns the sandboxes of one worker.
type Manager struct {
	api    DockerAPI
	cfg    Config
	lg     *zap.Logger
	images *images
	now    func() time.Time
	budget *memBudget // shared by every agent channel
	bg     sync.WaitGroup
	limits limits // the policy resolved against the host

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	reserved  int64 // memory of live and in-creation sandboxes
	creating  int
	failed    int                  // failed sandboxes whose quota is released but whose record stays
	pending   map[string]bool      // ids of creates in progress (their volumes are not orphans)
	tenantNew map[string]tenantUse // by tenant: what its creates in progress reserve
	evicting  int                  // creates evicting pool boxes (pool refills wait)
	collected time.Time            // last collector round
	closed    bool
	expiry    *expiryStore
	pools     *pools // warm pools, guarded by mu

	stopReaper context.CancelFunc
	reaperDone chan struct{}
	// closing is closed when Close begins: agent channel dials in flight
	// give up, and install no channel.
	closing chan struct{}

	// egressImg is the proxy image of egress sandboxes.
	egressImg helperImage
	// diskImg is the disk helper's image.
	diskImg helperImage
	// ectls are the attached control channels of egress proxies.
	ectls egressCtls
}

// sandbox is the manager's record of one sandbox.
type sandbox struct {
	mu         sync.Mutex // guards info, ch, dialing, busy, violations and released
	info       Info
	ch         *channel
	busy       int // operations in flight; the reaper never takes a busy sandbox
	violations int // protocol violations of its agent channels
	procs      int // interactive processes open (StartProcess)
	conns      int // port forwards open (StartProcess with a port)
	// released: the sandbox's quota was given back (it failed, or is
	// being deleted).
	released bool
	// member: an unclaimed warm-pool box (counted in Manager.pools).
	member bool
	// image is the ID of the image its container runs (pool boxes are
	// replaced when their template's image moves).
	image string
	// baseline is a pool box's workspace listing when this worker first
	// greeted it; a claim hands the box out only if the listing is still
	// the same (see pristine).
	baseline string

	// dialing is the dial of a new ch in flight, or nil.
	dialing *dialing
}

// Option customizes a Manager.
type Option func(*Manager)

// WithLogger sets the logger (default none).
func WithLogger(lg *zap.Logger) Option { return func(m *Manager) { m.lg = lg } }

// WithClock replaces time.Now (tests).
func WithClock(now func() time.Time) Option { return func(m *Manager) { m.now = now } }

// NewManager starts a manager: it re-adopts this worker's running
// containers from their labels, removes the ones it cannot adopt, and
// starts the TTL reaper. Close stops the reaper and leaves sandboxes
// running.
func NewManager(ctx context.Context, api DockerAPI, cfg Config, opts ...Option) (*Manager, error) {
	if cfg.Worker == "" || strings.ContainsAny(cfg.Worker, " /") {
		return nil, fmt.Errorf("sandbox manager: invalid worker name %q", cfg.Worker)
	}
	if len(cfg.Agent) == 0 {
		return nil, errors.New("sandbox manager: no sandbox-agent binary")
	}
	if cfg.User == "" {
		cfg.User = DefaultUser
	}
	if _, _, err := parseUser(cfg.User); err != nil {
		return nil, err
	}
	if err := cfg.Policy.Validate(); err != nil {
		return nil, &ConfigError{Err: err}
	}
	if cfg.Unhardened && len(cfg.Pools) > 0 {
		return nil, &ConfigError{Err: errors.New("unhardened sandboxes (benchmarks only) cannot have warm pools")}
	}
	cfg.Defaults.Runtime = cmpOr(cfg.Defaults.Runtime, cfg.Policy.DefaultRuntime)
	cfg.Defaults = cfg.Defaults.Merge(DefaultTemplate)
	if cfg.Policy.MaxDiskBytes > 0 && cfg.Defaults.DiskBytes == 0 {
		cfg.Defaults.DiskBytes = cfg.Policy.MaxDiskBytes
	}
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = 10 * time.Second
	}
	switch cfg.DiskEnforcement {
	case "":
		cfg.DiskEnforcement = DiskKernel
	case DiskKernel, DiskWatchdog:
	default:
		return nil, &ConfigError{Err: fmt.Errorf("disk enforcement %q is neither %q nor %q", cfg.DiskEnforcement, DiskKernel, DiskWatchdog)}
	}
	if cfg.DiskCheckInterval <= 0 {
		cfg.DiskCheckInterval = DefaultDiskCheckInterval
	}
	if cfg.ChannelMemoryBytes <= 0 {
		cfg.ChannelMemoryBytes = DefaultChannelMemoryBytes
	}
	if cfg.ViolationAllowance <= 0 {
		cfg.ViolationAllowance = DefaultViolationAllowance
	}
	m := &Manager{
		api:       api,
		cfg:       cfg,
		lg:        zap.NewNop(),
		images:    newImages(api, cfg.Agent),
		now:       time.Now,
		sandboxes: map[string]*sandbox{},
		budget:    newMemBudget(cfg.ChannelMemoryBytes),
		pending:   map[string]bool{},
		tenantNew: map[string]tenantUse{},
		closing:   make(chan struct{}),
	}
	for _, o := range opts {
		o(m)
	}
	m.lg = m.lg.Named("sandbox")
	host, err := hostOf(ctx, api)
	if err != nil {
		return nil, fmt.Errorf("sandbox manager: %w", err)
	}
	m.limits = cfg.Policy.resolve(host)
	if err := m.checkTemplates(ctx); err != nil {
		return nil, &ConfigError{Err: err}
	}
	if m.pools, err = m.newPools(); err != nil {
		return nil, &ConfigError{Err: err}
	}
	recorded := map[string]time.Time{}
	if cfg.StateDir != "" {
		if m.expiry, recorded, err = openExpiry(cfg.StateDir); err != nil {
			return nil, err
		}
		if m.pools.claims, err = openClaims(cfg.StateDir); err != nil {
			return nil, err
		}
	}
	if err := m.adopt(ctx, recorded); err != nil {
		return nil, err
	}
	if err := m.pools.claims.keep(func(id string) bool { return m.sandboxes[id] != nil }); err != nil {
		return nil, fmt.Errorf("sandbox claim record: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	m.stopReaper, m.reaperDone = cancel, make(chan struct{})
	go m.reapLoop(rctx)
	if m.cfg.DiskEnforcement == DiskWatchdog {
		m.lg.Warn("workspace disk limits are MEASURED, NOT ENFORCED (disk enforcement: watchdog): a box can write past its disk_bytes and inode ceiling until the next round", zap.Duration("interval", m.cfg.DiskCheckInterval))
		m.bg.Add(1)
		go func() {
			defer m.bg.Done()
			m.diskLoop(rctx)
		}()
	}
	m.startPools()
	return m, nil
}

// Close stops the reaper and the pool loop and closes agent channels.
// Sandboxes and pool boxes keep running so a restarted worker can re-adopt
// them.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	close(m.closing)
	sbs := slicesOf(m.sandboxes)
	m.mu.Unlock()
	m.stopReaper()
	<-m.reaperDone
	m.stopPools()
	m.closeMembers()
	m.stopEgress()
	for _, sb := range sbs {
		sb.mu.Lock()
		if sb.ch != nil {
			sb.ch.close()
		}
		sb.mu.Unlock()
	}
	m.bg.Wait()
}

// DeleteAll removes every sandbox of this worker (used at shutdown when the
// worker is told not to leave sandboxes behind). It stops the warm pools
// for good and removes their boxes: later creates start cold.
func (m *Manager) DeleteAll(ctx context.Context) error {
	m.stopPools()
	m.removeMembers(ctx)
	var errs []error
	for _, info := range m.List(nil) {
		if err := m.Delete(ctx, info.ID); err != nil && CodeOf(err) != CodeNotFound {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func slicesOf(m map[string]*sandbox) []*sandbox {
	out := make([]*sandbox, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// Create starts a sandbox and waits until its agent answers.
func (m *Manager) Create(ctx context.Context, spec CreateSpec) (Info, error) {
	t, err := m.resolve(ctx, spec)
	if err != nil {
		return Info{}, err
	}
	spec.pool = ""
	if err := m.checkInject(t, spec.Inject); err != nil {
		return Info{}, err
	}
	var claimed *sandbox
	if len(spec.Inject) == 0 { // a pooled box has a proxy without them
		if claimed, err = m.claim(spec, t); err != nil {
			return Info{}, err
		}
	}
	if claimed != nil {
		m.lg.Info("sandbox claimed from the warm pool", zap.String("sandbox-id", claimed.info.ID), zap.String("template", spec.Template))
		return m.snapshot(claimed), nil
	}

	tenant := tenantOf(spec.Tenant)
	if err := m.reserveOrEvict(ctx, t, tenant); err != nil {
		return Info{}, err
	}
	reserved := true
	defer func() {
		m.mu.Lock()
		m.creating--
		m.unreserveTenant(tenant, t)
		if reserved {
			m.reserved -= t.MemoryBytes
		}
		m.mu.Unlock()
	}()

	id := newID(m.cfg.Worker)
	m.mu.Lock()
	m.pending[id] = true
	m.mu.Unlock()
	sb, err := m.start(ctx, id, spec, t)
	m.mu.Lock()
	delete(m.pending, id)
	if err != nil {
		m.mu.Unlock()
		return Info{}, err
	}
	m.sandboxes[id] = sb
	reserved = false
	m.mu.Unlock()
	m.saveExpiry()
	m.lg.Info("sandbox created", zap.String("sandbox-id", id), zap.String("image", t.Image), zap.String("container-id", sb.info.ContainerID[:12]))
	return m.snapshot(sb), nil
}

// resolve merges a create request with its template and the worker's
// defaults and checks the result: well formed (CodeInvalid), no wider than
// the template it names, and inside the worker's policy (CodePolicy).
func (m *Manager) resolve(ctx context.Context, spec CreateSpec) (Template, error) {
	t := spec.Overrides
	if err := t.checkNumbers(); err != nil {
		return Template{}, err
	}
	if spec.Template != "" {
		base, ok := m.cfg.Templates[spec.Template]
		if !ok {
			return Template{}, errorf(CodeInvalid, "unknown template %q (known: %s)", spec.Template, strings.Join(sortedKeys(m.cfg.Templates), ", "))
		}
		base = base.Merge(m.cfg.Defaults)
		if err := narrows(t, base, spec.Template); err != nil {
			return Template{}, err
		}
		t = t.Merge(base)
	}
	t = t.Merge(m.cfg.Defaults)
	if err := t.validate(); err != nil {
		return Template{}, err
	}
	for k := range spec.Labels {
		if !labelKey.MatchString(k) || strings.HasPrefix(k, "plumb.") {
			return Template{}, errorf(CodeInvalid, "label key %q: use letters, digits, '.', '_', '/', '-' (at most 63) and no plumb. prefix", k)
		}
	}
	if err := m.checkRuntime(ctx, t.Runtime); err != nil {
		return Template{}, err
	}
	if err := m.checkPolicy(ctx, t); err != nil {
		return Template{}, err
	}
	return t, nil
}

// checkPolicy checks a merged template against the policy, inspecting the
// image when the policy allows images by digest.
func (m *Manager) checkPolicy(ctx context.Context, t Template) error {
	var digests []string
	if m.limits.needsDigests() && t.Image != "" && !imageAllowed(m.limits.p.AllowedImages, t.Image, nil) {
		// An image that is not present has no digests: the check below
		// refuses it unless its name is allowed.
		res, err := m.api.ImageInspect(ctx, t.Image)
		switch {
		case err == nil:
			digests = append([]string{res.ID}, res.RepoDigests...)
		case !cerrdefs.IsNotFound(err):
			return fmt.Errorf("inspect image %s: %w", t.Image, err)
		}
	}
	return m.limits.check(t, digests)
}

// checkTemplates refuses a configuration whose templates (or defaults)
// break the policy: the worker does not start with them.
func (m *Manager) checkTemplates(ctx context.Context) error {
	check := func(what string, t Template) error {
		v := t
		if v.Image == "" {
			v.Image = "unset" // requests name the image; it is checked then
		}
		if err := v.validate(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err := m.limits.checkConfig(t); err != nil {
			return fmt.Errorf("%s breaks the worker policy: %w", what, err)
		}
		if err := m.checkRuntime(ctx, t.Runtime); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if err := check("defaults", m.cfg.Defaults); err != nil {
		return err
	}
	for _, name := range sortedKeys(m.cfg.Templates) {
		if err := check(fmt.Sprintf("template %q", name), m.cfg.Templates[name].Merge(m.cfg.Defaults)); err != nil {
			return err
		}
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// engineTimeout bounds the engine calls of one create.
const engineTimeout = 2 * time.Minute

// start creates sandbox id's volume and container, starts it and greets its
// agent. The engine calls do not take the caller's cancellation: a call
// cut short on the client side may still complete in the engine (a
// container created after its volume was removed re-creates that volume,
// unlabelled), so each one runs to its end, and the caller's cancellation
// is checked between them. Whatever fails or is cancelled, start removes
// everything it created before it returns.
func (m *Manager) start(ctx context.Context, id string, spec CreateSpec, t Template) (_ *sandbox, err error) {
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineTimeout)
	defer cancel()
	stopped := func() error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("create sandbox: %w", err)
		}
		return nil
	}
	// The container is created from the derived image's ID, not its tag.
	image, err := m.images.derive(ectx, t.Image, m.cfg.User, t.WorkingDir)
	if err != nil {
		return nil, err
	}
	if err := stopped(); err != nil {
		return nil, err
	}

	created := m.now()
	labels := sandboxLabels(id, m.cfg.Worker, spec.Template, t, created, spec.Labels)
	maps.Copy(labels, m.cfg.ExtraLabels)
	if spec.pool == "" {
		labels[LabelTenant] = tenantOf(spec.Tenant)
	} else {
		labels[LabelPool] = spec.pool // its owner is recorded when claimed
	}
	volume := volumeName(id)
	sb := &sandbox{member: spec.pool != "", image: image, info: Info{
		ID: id, Worker: m.cfg.Worker, State: StateRunning, Template: spec.Template, Tenant: tenantOf(spec.Tenant),
		Settings: t, Labels: maps.Clone(spec.Labels), CreatedAt: created, LastUsedAt: created, ExpiresAt: created.Add(t.TTL),
	}}
	defer func() {
		if err != nil {
			m.discard(ctx, sb)
		}
	}()
	vopts := client.VolumeCreateOptions{Name: volume, Labels: labels}
	if m.kernelDisk(t) {
		if vopts.DriverOpts, err = m.attachDisk(ectx, id, t.DiskBytes); err != nil {
			return nil, err
		}
		vopts.Driver, vopts.Labels = "local", maps.Clone(labels)
		vopts.Labels[LabelDisk] = id
	}
	if _, err := m.api.VolumeCreate(ectx, vopts); err != nil {
		if vopts.DriverOpts != nil {
			m.removeDisk(ctx, id)
		}
		return nil, fmt.Errorf("create workspace volume: %w", err)
	}
	if err := stopped(); err != nil {
		return nil, err
	}
	inj, err := m.newInjection(spec.Inject)
	if err != nil {
		return nil, err
	}
	var dns netip.Addr
	if t.Network == NetworkEgress {
		if dns, err = m.setupEgress(ectx, id, inj); err != nil {
			return nil, err
		}
		if err := stopped(); err != nil {
			return nil, err
		}
	}
	if inj != nil {
		labels[LabelEgressInject] = "true"
	}
	cfg, hc := containerSpec(id, m.cfg.Worker, image, volume, t, labels)
	if inj != nil {
		cfg.Env = append(cfg.Env, injectEnv(t)...)
	}
	if dns.IsValid() {
		// The box's only DNS server leads nowhere (egressDNS).
		hc.DNS = []netip.Addr{dns}
	}
	if m.cfg.Unhardened {
		unharden(hc)
	}
	c, err := m.api.ContainerCreate(ectx, client.ContainerCreateOptions{Name: id, Config: cfg, HostConfig: hc})
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	sb.info.ContainerID = c.ID
	if err := stopped(); err != nil {
		return nil, err
	}
	if _, err := m.api.ContainerStart(ectx, c.ID, client.ContainerStartOptions{}); err != nil {
		return nil, fmt.Errorf("start container: %w", err)
	}
	if err := stopped(); err != nil {
		return nil, err
	}
	// Open the agent channel and greet the agent now, so a sandbox that
	// cannot run it fails its create instead of its first operation.
	if err := m.hello(ctx, sb); err != nil {
		if err := stopped(); err != nil {
			return nil, err
		}
		return nil, &Error{Code: CodeFailed, Message: fmt.Sprintf("the sandbox agent did not start in image %s", t.Image), Err: err}
	}
	if inj != nil {
		if err := m.writeCABundle(ctx, sb, inj.bundle); err != nil {
			return nil, err
		}
	}
	// A caller gone by now gets no sandbox: keep none for it.
	if err := stopped(); err != nil {
		return nil, err
	}
	return sb, nil
}

// hello opens the agent channel and checks that the agent answers.
func (m *Manager) hello(ctx context.Context, sb *sandbox) error {
	ch, err := m.channel(ctx, sb)
	if err != nil {
		return err
	}
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	raw, err := ch.call(hctx, agentproto.OpHello, struct{}{}, nil)
	if err != nil {
		return err
	}
	var h agentproto.Hello
	if err := json.Unmarshal(raw, &h); err != nil || h.Version != agentproto.Version {
		return fmt.Errorf("agent speaks protocol %d, want %d", h.Version, agentproto.Version)
	}
	// The agent must have taken the sandbox user's identity for files and
	// commands; anything else means box code could run as the agent.
	uid, gid, _ := parseUser(m.cfg.User)
	if m.cfg.Unhardened {
		uid, gid = 0, 0 // benchmarks only: the agent keeps root's identity
	}
	if h.UID != uid || h.GID != gid {
		return fmt.Errorf("agent runs files and commands as %d:%d, want the sandbox user %d:%d", h.UID, h.GID, uid, gid)
	}
	return nil
}

// Runtimes returns the names of the engine's OCI runtimes, sorted.
func (m *Manager) Runtimes(ctx context.Context) ([]string, error) {
	res, err := m.api.Info(ctx, client.InfoOptions{})
	if err != nil {
		return nil, fmt.Errorf("engine info: %w", err)
	}
	return sortedKeys(res.Info.Runtimes), nil
}

// checkRuntime rejects a runtime the engine does not have ("" is the
// engine's default). It asks the engine each time, so a runtime installed
// while the worker runs is usable at once.
func (m *Manager) checkRuntime(ctx context.Context, runtime string) error {
	if runtime == "" {
		return nil
	}
	have, err := m.Runtimes(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(have, runtime) {
		return errorf(CodeInvalid, "runtime %q is not available on worker %s (it has: %s)", runtime, m.cfg.Worker, strings.Join(have, ", "))
	}
	return nil
}

// discard tears down a box that never served: it closes its channel (a
// dial still in flight installs none: the box is deleting), then removes
// its container — by name, which is its id: the container may exist
// without its id known — with its workspace volume, and its egress
// network.
func (m *Manager) discard(ctx context.Context, sb *sandbox) {
	sb.mu.Lock()
	sb.info.State = StateDeleting
	if sb.ch != nil {
		sb.ch.close()
	}
	id, network := sb.info.ID, sb.info.Settings.Network
	sb.mu.Unlock()
	_ = m.removeContainer(ctx, id, volumeName(id))
	if network == NetworkEgress {
		m.removeEgress(ctx, id)
	}
}

// reserve claims quota for one more sandbox t: the worker's, and for a
// create (tenant != ""; pool boxes belong to no tenant) the tenant's. The
// caller gives back what reserve took (unreserveTenant for the tenant's).
func (m *Manager) reserve(t Template, tenant string) error {
	mem := t.MemoryBytes
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errorf(CodeShuttingDown, "worker %s is shutting down", m.cfg.Worker)
	}
	if tenant != "" {
		if err := m.checkTenant(tenant, t); err != nil {
			return err
		}
	} else if m.evicting > 0 {
		return errorf(CodeQuota, "worker %s: a create is evicting pool boxes; the pool refills after it", m.cfg.Worker)
	}
	if n := len(m.sandboxes) - m.failed + m.creating + m.pools.n - m.pools.failed; m.cfg.MaxSandboxes > 0 && n >= m.cfg.MaxSandboxes {
		return errorf(CodeQuota, "worker %s already runs %d of %d sandboxes; delete one or try another worker", m.cfg.Worker, n, m.cfg.MaxSandboxes)
	}
	if m.cfg.MaxMemoryBytes > 0 && m.reserved+mem > m.cfg.MaxMemoryBytes {
		return errorf(CodeQuota, "worker %s memory quota: %d of %d bytes reserved, %d more requested", m.cfg.Worker, m.reserved, m.cfg.MaxMemoryBytes, mem)
	}
	m.creating++
	m.reserved += mem
	if tenant != "" {
		m.tenantNew[tenant] = m.tenantNew[tenant].add(t, 1)
	}
	return nil
}

// checkTenant refuses one more sandbox t for tenant over the policy's
// per-tenant limits. m.mu is held.
func (m *Manager) checkTenant(tenant string, t Template) error {
	return m.cfg.Policy.PerTenant.check(tenant, m.tenantUse(tenant), t)
}

// tenantUse is what tenant's sandboxes hold on this worker: its live ones
// (not failed, not being deleted: those gave their share back) and its
// creates in progress. m.mu is held.
func (m *Manager) tenantUse(tenant string) tenantUse {
	u := m.tenantNew[tenant]
	for _, sb := range m.sandboxes {
		sb.mu.Lock()
		if !sb.released && !sb.member && sb.info.Tenant == tenant {
			u = u.add(sb.info.Settings, 1)
		}
		sb.mu.Unlock()
	}
	return u
}

// unreserveTenant gives back what reserve took from tenant's share for a
// create of t that has ended (its sandbox, if made, now counts itself).
// m.mu is held.
func (m *Manager) unreserveTenant(tenant string, t Template) {
	u := m.tenantNew[tenant].add(t, -1)
	if u.n == 0 {
		delete(m.tenantNew, tenant) // no float residue, no empty entries
		return
	}
	m.tenantNew[tenant] = u
}

// Get returns a sandbox's info. A sandbox whose container died is reported
// as failed.
func (m *Manager) Get(ctx context.Context, id string) (Info, error) {
	sb, err := m.lookup(id)
	if err != nil {
		return Info{}, err
	}
	m.checkAlive(ctx, sb)
	return m.snapshot(sb), nil
}

// List returns the sandboxes carrying every given label, oldest first.
func (m *Manager) List(labels map[string]string) []Info {
	m.mu.Lock()
	sbs := slicesOf(m.sandboxes)
	m.mu.Unlock()
	var out []Info
	for _, sb := range sbs {
		info := m.snapshot(sb)
		match := true
		for k, v := range labels {
			if info.Labels[k] != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Delete removes a sandbox, its container and its workspace volume. When
// the engine fails to remove the container, the sandbox stays listed as
// deleting, with its claim record and its expiry, its quota released as a
// failed sandbox's, and Delete returns CodeUnavailable: the caller may
// retry, and the reaper retries on every round. Until its container is
// gone, a sandbox's claim is never forgotten, so a restarted worker never
// mistakes it for an unclaimed pool box.
func (m *Manager) Delete(ctx context.Context, id string) error {
	m.mu.Lock()
	sb, ok := m.sandboxes[id]
	if ok {
		delete(m.sandboxes, id)
	}
	m.mu.Unlock()
	if !ok {
		return errorf(CodeNotFound, "sandbox %s not found on worker %s", id, m.cfg.Worker)
	}
	cid := m.retire(sb)
	if err := m.removeContainer(ctx, cid, volumeName(id)); err != nil {
		m.mu.Lock()
		m.sandboxes[id] = sb
		m.failed++ // retire released its quota; the record stays, as a failed sandbox's
		m.mu.Unlock()
		m.lg.Warn("sandbox not deleted: its container could not be removed; the reaper retries", zap.String("sandbox-id", id), zap.Error(err))
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("sandbox %s is not deleted yet: the engine did not remove its container (it stays deleting and the worker retries; the delete may be retried)", id), Err: err}
	}
	m.forgetClaim(id)
	m.kickPools() // the quota it held may let a pool refill
	if sb.info.Settings.Network == NetworkEgress {
		m.removeEgress(ctx, id)
	}
	m.saveExpiry()
	m.lg.Info("sandbox deleted", zap.String("sandbox-id", id))
	return nil
}

// KeepAlive extends a sandbox's expiry to now+ttl (its own TTL when ttl is
// zero).
func (m *Manager) KeepAlive(ctx context.Context, id string, ttl time.Duration) (Info, error) {
	sb, err := m.lookup(id)
	if err != nil {
		return Info{}, err
	}
	if ttl < 0 || ttl > MaxTTL {
		return Info{}, errorf(CodeInvalid, "ttl %s out of range 0..168h", ttl)
	}
	if ttl > m.limits.ttl {
		return Info{}, denied("max_ttl", "ttl %s exceeds this worker's ceiling max_ttl=%s", ttl, m.limits.ttl)
	}
	sb.mu.Lock()
	if ttl == 0 {
		ttl = sb.info.Settings.TTL
	}
	now := m.now()
	sb.info.ExpiresAt = now.Add(ttl)
	sb.info.LastUsedAt = now
	sb.mu.Unlock()
	m.saveExpiry()
	return m.Get(ctx, id)
}

// Usage reports live sandboxes and reserved memory, for capacity reports.
// Failed sandboxes count in neither: their quota is released when they
// fail, while their record stays until they are deleted or expire.
// Unclaimed warm-pool boxes count in neither either (Pools reports them):
// a claim turns one into a live sandbox at no extra cost, and a create
// over the quota evicts one.
func (m *Manager) Usage() (sandboxes int, memory int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sandboxes) - m.failed, m.reserved - m.pools.mem
}

// releaseFailed gives back the quota of a sandbox that failed: it holds no
// memory any more, and its record stays only so its caller can read why.
func (m *Manager) releaseFailed(sb *sandbox) {
	sb.mu.Lock()
	if sb.info.State != StateFailed || sb.released {
		sb.mu.Unlock()
		return
	}
	sb.released = true
	mem, member := sb.info.Settings.MemoryBytes, sb.member
	sb.mu.Unlock()
	m.mu.Lock()
	m.reserved -= mem
	if member {
		m.pools.failed++
		m.pools.mem -= mem
	} else {
		m.failed++
	}
	m.mu.Unlock()
}

// Config returns the manager's configuration (templates, quotas).
func (m *Manager) Config() Config { return m.cfg }

func (m *Manager) lookup(id string) (*sandbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, ok := m.sandboxes[id]
	if !ok {
		return nil, errorf(CodeNotFound, "sandbox %s not found on worker %s", id, m.cfg.Worker)
	}
	return sb, nil
}

func (m *Manager) snapshot(sb *sandbox) Info {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	info := sb.info
	info.Labels = maps.Clone(sb.info.Labels)
	return info
}

// begin marks an operation in flight and records the activity; the
// returned func ends it (and records activity again, so a long command
// does not leave its sandbox about to expire).
func (m *Manager) begin(sb *sandbox) (end func()) {
	m.touch(sb)
	sb.mu.Lock()
	sb.busy++
	sb.mu.Unlock()
	return func() {
		sb.mu.Lock()
		sb.busy--
		sb.mu.Unlock()
		m.touch(sb)
	}
}

// touch records activity: an operation extends the expiry by the TTL.
func (m *Manager) touch(sb *sandbox) {
	sb.mu.Lock()
	now := m.now()
	sb.info.LastUsedAt = now
	if exp := now.Add(sb.info.Settings.TTL); exp.After(sb.info.ExpiresAt) {
		sb.info.ExpiresAt = exp
	}
	sb.mu.Unlock()
}

// checkAlive inspects the container of a running sandbox and marks the
// sandbox failed when it is gone or stopped.
func (m *Manager) checkAlive(ctx context.Context, sb *sandbox) {
	sb.mu.Lock()
	cid, state := sb.info.ContainerID, sb.info.State
	sb.mu.Unlock()
	if state != StateRunning {
		return
	}
	reason := ""
	res, err := m.api.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
	switch {
	case cerrdefs.IsNotFound(err):
		reason = "its container was removed"
	case err != nil:
		return // the engine is unreachable: nothing is known about the sandbox
	case res.Container.State == nil || !res.Container.State.Running:
		reason = describeExit(res.Container.State)
	}
	if reason != "" {
		m.fail(sb, reason)
	}
}

func describeExit(s *container.State) string {
	if s == nil {
		return "its container is not running"
	}
	switch {
	case s.OOMKilled:
		return fmt.Sprintf("its container was killed for exceeding its memory limit (exit code %d)", s.ExitCode)
	case s.ExitCode != 0:
		return fmt.Sprintf("its container exited with code %d", s.ExitCode)
	default:
		return "its container stopped"
	}
}

// fail marks a running sandbox failed and closes its channel; it reports
// whether it did (false when the sandbox had already failed or is being
// deleted).
func (m *Manager) fail(sb *sandbox, reason string) bool {
	defer m.releaseFailed(sb) // after sb.mu is unlocked
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.info.State != StateRunning {
		return false
	}
	sb.info.State = StateFailed
	sb.info.FailureReason = reason
	if sb.ch != nil {
		sb.ch.close()
	}
	m.lg.Warn("sandbox failed", zap.String("sandbox-id", sb.info.ID), zap.String("reason", reason))
	return true
}

// channel returns the sandbox's open agent channel, opening a new one when
// there is none or the last one was reset. A box has at most one dial in
// flight: every caller that finds no channel waits for that dial and
// shares its result, so a herd of first calls (after a worker restart, or
// a reset) starts one agent, not one per call. The dial runs on its own,
// bounded by dialTimeout and the manager's life but not by any caller: a
// caller whose ctx ends stops waiting and the others keep their dial. The
// engine is dialled without holding the sandbox's lock (a hung engine
// call must not stall the reaper or List).
func (m *Manager) channel(ctx context.Context, sb *sandbox) (*channel, error) {
	sb.mu.Lock()
	if err := sb.unusable(); err != nil {
		sb.mu.Unlock()
		return nil, err
	}
	if sb.ch != nil && !sb.ch.broken() {
		ch := sb.ch
		sb.mu.Unlock()
		return ch, nil
	}
	d := sb.dialing
	if d == nil {
		if m.isClosing() {
			sb.mu.Unlock()
			return nil, errorf(CodeShuttingDown, "the sandbox worker is shutting down")
		}
		d = &dialing{done: make(chan struct{})}
		sb.dialing = d
		m.bg.Add(1)
		go m.openChannel(sb, d)
	}
	sb.mu.Unlock()
	select {
	case <-d.done:
		return d.ch, d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dialing is the dial of a sandbox's agent channel in flight; ch or err
// is set when done is closed.
type dialing struct {
	done chan struct{}
	ch   *channel
	err  error
}

// openChannel dials sb's agent, installs the channel unless sb became
// unusable or the manager closed meanwhile, and hands the result to the
// callers waiting on d. A failed dial is logged here, once for all of
// them.
func (m *Manager) openChannel(sb *sandbox, d *dialing) {
	defer m.bg.Done()
	sb.mu.Lock()
	id, cid, t := sb.info.ID, sb.info.ContainerID, sb.info.Settings
	sb.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	go func() { // Close ends a dial in flight
		select {
		case <-m.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	s, err := m.dial(ctx, cid, t)
	if err != nil && !m.isClosing() {
		// Find out, once for every caller, whether the box is gone.
		ictx, cancel := context.WithTimeout(context.Background(), engineTimeout)
		m.checkAlive(ictx, sb)
		cancel()
	}
	var ch *channel
	if err == nil {
		ch = newChannel(s, m.lg.With(zap.String("sandbox-id", id)), channelOptions{
			budget:      m.budget,
			onViolation: func(err error) { m.violation(sb, err) },
		})
	}
	sb.mu.Lock()
	sb.dialing = nil
	switch uerr := sb.unusable(); {
	case uerr != nil:
		// Failed or deleted meanwhile: that, not how the dial ended, is
		// what the callers need to know.
		err = uerr
	case m.isClosing():
		// Close has closed, or is closing, the channels it found; this
		// one would outlive it.
		err = errorf(CodeShuttingDown, "the sandbox worker is shutting down")
	case err == nil:
		sb.ch, d.ch = ch, ch
	}
	if ch != nil && d.ch == nil {
		ch.close()
	}
	d.err = err
	sb.mu.Unlock()
	close(d.done)
	if err != nil && CodeOf(err) == "" {
		m.lg.Warn("open the sandbox agent channel", zap.String("sandbox-id", id), zap.Error(err))
	}
}

// dialTimeout bounds opening an agent channel (two engine calls).
const dialTimeout = 30 * time.Second

// isClosing reports whether Close has begun.
func (m *Manager) isClosing() bool {
	select {
	case <-m.closing:
		return true
	default:
		return false
	}
}

// unusable returns why no channel may be opened to the sandbox, or nil;
// sb.mu is held.
func (sb *sandbox) unusable() error {
	switch sb.info.State {
	case StateFailed:
		return errorf(CodeFailed, "sandbox %s failed: %s; delete it and create a new one", sb.info.ID, sb.info.FailureReason)
	case StateDeleting:
		return errorf(CodeNotFound, "sandbox %s is being deleted", sb.info.ID)
	}
	return nil
}

// violation counts a protocol violation of sb's agent channel. Past the
// allowance the sandbox is failed with a reason naming the violation and
// its container is killed in the background (Close waits for it).
func (m *Manager) violation(sb *sandbox, err error) {
	sb.mu.Lock()
	sb.violations++
	n, id, cid := sb.violations, sb.info.ID, sb.info.ContainerID
	sb.mu.Unlock()
	m.lg.Warn("sandbox agent broke the channel protocol", zap.String("sandbox-id", id), zap.Int("violations", n), zap.Error(err))
	if n <= m.cfg.ViolationAllowance {
		return
	}
	if !m.fail(sb, fmt.Sprintf("its agent broke the channel protocol %d times (allowance %d); last: %v", n, m.cfg.ViolationAllowance, err)) {
		return
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := m.api.ContainerKill(ctx, cid, client.ContainerKillOptions{Signal: "KILL"}); err != nil && !cerrdefs.IsNotFound(err) {
			m.lg.Warn("kill failed sandbox", zap.String("sandbox-id", id), zap.Error(err))
		}
	}()
}

// dial starts `sandbox-agent serve` with one exec and attaches its stdio.
func (m *Manager) dial(ctx context.Context, cid string, t Template) (stream, error) {
	root := t.FilesRoot
	if root == "" {
		root = "/"
	}
	uid, gid, err := parseUser(m.cfg.User)
	if err != nil {
		return stream{}, err
	}
	// The agent runs as container root with only SETUID, SETGID and KILL
	// (see containerSpec); it drops to the sandbox user for files and
	// commands, which therefore cannot reach it.
	ex, err := m.api.ExecCreate(ctx, cid, client.ExecCreateOptions{
		User:         AgentUser,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		WorkingDir:   t.WorkingDir,
		Cmd:          agentCmd(root, t.WorkingDir, uid, gid, m.cfg.Unhardened),
	})
	if err != nil {
		return stream{}, fmt.Errorf("exec sandbox agent: %w", err)
	}
	att, err := m.api.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return stream{}, fmt.Errorf("attach sandbox agent: %w", err)
	}
	// Agent stderr is diagnostics only; it is logged, bounded.
	return attachStream(att.HijackedResponse, &logWriter{lg: m.lg, max: 64 << 10}), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// logWriter logs what the agent writes to stderr, up to max bytes.
type logWriter struct {
	lg      *zap.Logger
	max     int
	written int
}

func (w *logWriter) Write(p []byte) (int, error) {
	if w.written < w.max {
		n := min(len(p), w.max-w.written)
		w.written += n
		w.lg.Debug("sandbox agent stderr", zap.ByteString("text", p[:n]))
	}
	return len(p), nil
}

// removeContainer removes a container and then its workspace volume. It
// returns the engine's error when the container stays (the volume, still
// in use, stays too); callers that cannot act on it only log it.
func (m *Manager) removeContainer(ctx context.Context, cid, volume string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := m.api.ContainerRemove(ctx, cid, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		m.lg.Warn("remove container", zap.String("container-id", cid), zap.Error(err))
		return fmt.Errorf("remove container: %w", err)
	}
	m.removeVolume(ctx, volume)
	return nil
}

// removeVolume removes a workspace volume and, once it is gone, the
// image its file system lives in (LabelDisk).
func (m *Manager) removeVolume(ctx context.Context, volume string) {
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	v, err := m.api.VolumeInspect(vctx, volume, client.VolumeInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return
	}
	if _, err := m.api.VolumeRemove(vctx, volume, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		m.lg.Warn("remove volume", zap.String("volume", volume), zap.Error(err))
		return
	}
	if id, ok := strings.CutPrefix(volume, volumePrefix); ok && err == nil && v.Volume.Labels[LabelDisk] == id {
		m.removeDisk(ctx, id)
	}
}

// volumePrefix starts the name of every workspace volume.
const volumePrefix = "plumb-ws-"

// volumeName is the workspace volume of sandbox id.
func volumeName(id string) string { return volumePrefix + id }

// adopt takes over this worker's running containers after a restart. It
// removes the worker's other containers (stopped, never started because a
// create was cut short, or with unreadable labels) and then the worker's
// workspace volumes that no adopted sandbox uses.
//
// An adopted sandbox keeps the expiry recorded for it in the state dir;
// without a record it expires at its creation time plus its TTL (an upper
// bound: a restart never extends a sandbox's life).
func (m *Manager) adopt(ctx context.Context, recorded map[string]time.Time) error {
	list, err := m.api.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", LabelWorker+"="+m.cfg.Worker),
	})
	if err != nil {
		return fmt.Errorf("list this worker's containers: %w", err)
	}
	for _, c := range list.Items {
		id := c.Labels[LabelSandbox]
		volume := volumeName(id)
		t, created, user, perr := templateFromLabels(c.Labels)
		if id == "" || perr != nil || c.State != container.StateRunning {
			m.lg.Info("removing orphan container", zap.String("container-id", c.ID), zap.String("sandbox-id", id), zap.String("state", string(c.State)))
			_ = m.removeContainer(ctx, c.ID, volume)
			continue
		}
		if c.Labels[LabelPool] != "" {
			m.adoptPooled(ctx, c.ID, c.ImageID, id, c.Names, c.Labels, t, created, recorded)
			continue
		}
		expires, ok := recorded[id]
		if !ok {
			expires = created.Add(t.TTL)
		}
		sb := &sandbox{info: Info{
			ID: id, Worker: m.cfg.Worker, ContainerID: c.ID, State: StateRunning, Template: c.Labels[LabelTemplate], Tenant: tenantOf(c.Labels[LabelTenant]),
			Settings: t, Labels: user, CreatedAt: created, LastUsedAt: created, ExpiresAt: expires,
		}}
		if t.Network == NetworkEgress {
			if err := m.ensureProxy(ctx, id, c.Labels[LabelEgressInject] == "true"); err != nil {
				m.lg.Warn("removing egress sandbox without its network", zap.String("sandbox-id", id), zap.Error(err))
				_ = m.removeContainer(ctx, c.ID, volume)
				continue
			}
		}
		m.sandboxes[id] = sb
		m.reserved += t.MemoryBytes
		m.lg.Info("adopted sandbox", zap.String("sandbox-id", id), zap.Time("expires-at", expires), zap.Bool("expiry-recorded", ok))
	}
	if err := m.sweepEgress(ctx); err != nil {
		return err
	}
	return m.sweepVolumes(ctx)
}

// sweepVolumes removes this worker's workspace volumes that belong to no
// adopted sandbox. They are found by label, and by name too, since an
// engine that re-created a removed volume for a container's mount (before
// mounts carried labels) left it unlabelled.
func (m *Manager) sweepVolumes(ctx context.Context) error {
	seen := map[string]bool{}
	for _, f := range []client.Filters{
		client.Filters{}.Add("label", LabelWorker+"="+m.cfg.Worker),
		client.Filters{}.Add("name", volumeName("sbx-"+m.cfg.Worker+"-")), // a substring match
	} {
		list, err := m.api.VolumeList(ctx, client.VolumeListOptions{Filters: f})
		if err != nil {
			return fmt.Errorf("list this worker's volumes: %w", err)
		}
		for _, v := range list.Items {
			if id, ok := strings.CutPrefix(v.Name, diskVolumePrefix); ok && v.Labels[LabelWorker] == m.cfg.Worker {
				if !seen[v.Name] && !m.inUse(id) {
					seen[v.Name] = true
					m.lg.Info("removing orphan workspace image", zap.String("volume", v.Name))
					m.removeDisk(ctx, id)
				}
				continue
			}
			id, named := strings.CutPrefix(v.Name, volumePrefix)
			mine := v.Labels[LabelWorker] == m.cfg.Worker || named && WorkerOf(id) == m.cfg.Worker
			if seen[v.Name] || !mine || m.inUse(id) {
				continue
			}
			seen[v.Name] = true
			m.lg.Info("removing orphan volume", zap.String("volume", v.Name))
			m.removeVolume(ctx, v.Name)
		}
	}
	return nil
}

// inUse reports whether sandbox id is live, in creation or in a pool.
func (m *Manager) inUse(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sandboxes[id] != nil || m.pending[id] || m.isMember(id)
}

func (m *Manager) reapLoop(ctx context.Context) {
	defer close(m.reaperDone)
	tick := time.NewTicker(m.cfg.ReapInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			m.Reap(ctx)
			if m.now().Sub(m.collected) >= collectInterval {
				m.Collect(ctx)
				m.collected = m.now()
			}
		}
	}
}

// collectInterval is how often the reaper loop runs the collector.
const collectInterval = time.Minute

// deriveGrace is how old a never-started derive container must be before
// the collector takes it (a derive in flight has one for a few seconds).
const deriveGrace = 10 * time.Minute

// Collect removes what no sandbox uses any more: this worker's workspace
// volumes of no live or in-creation sandbox, derive containers (the
// never-started containers images are committed from) older than
// deriveGrace, left by a worker that died mid-derive, and superseded
// derived images that no container uses (see images.collect). The reaper loop
// runs it every collectInterval; errors only reach the log.
func (m *Manager) Collect(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	if err := m.sweepVolumes(ctx); err != nil {
		m.lg.Warn("collect orphan volumes", zap.Error(err))
	}
	if err := m.sweepEgress(ctx); err != nil {
		m.lg.Warn("collect orphan egress networks", zap.Error(err))
	}
	removed, err := m.images.collect(ctx, m.now(), deriveGrace)
	if len(removed) > 0 {
		m.lg.Info("removed superseded derived images", zap.Strings("images", removed))
	}
	if err != nil {
		m.lg.Warn("collect derived images", zap.Error(err))
	}
	list, err := m.api.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", LabelDerivedFrom).Add("status", "created"),
	})
	if err != nil {
		m.lg.Warn("collect derive containers", zap.Error(err))
		return
	}
	for _, c := range list.Items {
		if c.Labels[LabelSandbox] != "" || m.now().Sub(time.Unix(c.Created, 0)) < deriveGrace {
			continue
		}
		m.lg.Info("removing leftover derive container", zap.String("container-id", c.ID), zap.String("derived-from", c.Labels[LabelDerivedFrom]))
		m.removeContainerOnly(ctx, c.ID)
	}
}

func (m *Manager) removeContainerOnly(ctx context.Context, cid string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := m.api.ContainerRemove(ctx, cid, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		m.lg.Warn("remove container", zap.String("container-id", cid), zap.Error(err))
	}
}

// Reap deletes every sandbox whose expiry has passed and that has no
// operation in flight, and returns their ids. It also retries the deletes
// whose container the engine did not remove (sandboxes left deleting).
func (m *Manager) Reap(ctx context.Context) []string {
	now := m.now()
	var expired []string
	m.mu.Lock()
	sbs := slicesOf(m.sandboxes)
	m.mu.Unlock()
	for _, sb := range sbs {
		sb.mu.Lock()
		if sb.busy == 0 && (!sb.info.ExpiresAt.After(now) || sb.info.State == StateDeleting) {
			expired = append(expired, sb.info.ID)
		}
		sb.mu.Unlock()
	}
	sort.Strings(expired)
	for _, id := range expired {
		m.lg.Info("sandbox expired, or its delete is retried", zap.String("sandbox-id", id))
		_ = m.Delete(ctx, id)
	}
	m.saveExpiry()
	return expired
}

// saveExpiry records every sandbox's expiry in the state dir (when there
// is one and something changed). The reaper calls it on every round, and
// creates, deletes and keep-alives at once.
func (m *Manager) saveExpiry() {
	if m.expiry == nil {
		return
	}
	m.mu.Lock()
	sbs := slicesOf(m.sandboxes)
	m.mu.Unlock()
	exp := make(map[string]time.Time, len(sbs))
	for _, sb := range sbs {
		sb.mu.Lock()
		exp[sb.info.ID] = sb.info.ExpiresAt
		sb.mu.Unlock()
	}
	if err := m.expiry.save(exp); err != nil {
		m.lg.Warn("record sandbox expiry", zap.Error(err))
	}
}

// newID returns a new sandbox id naming worker.
func newID(worker string) string { return sandboxapi.NewID(worker) }

// WorkerOf returns the worker part of a sandbox id, or "" if id is not a
// sandbox id (sandboxapi.WorkerOf).
func WorkerOf(id string) string { return sandboxapi.WorkerOf(id) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// diskLoop runs the disk watchdog every DiskCheckInterval, off the reaper
// loop: a slow measurement never delays TTL reaping.
func (m *Manager) diskLoop(ctx context.Context) {
	tick := time.NewTicker(m.cfg.DiskCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			m.CheckDisk(ctx)
		}
	}
}
