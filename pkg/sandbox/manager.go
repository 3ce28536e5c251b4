package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plumbhq/plumb/pkg/egress"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
	"github.com/plumbhq/plumb/pkg/snapshot"
	"go.uber.org/zap"
)

// State is a sandbox's lifecycle state.
type State string

// Sandbox states.
const (
	StateRunning  State = "running"
	StateFailed   State = "failed"
	StateDeleting State = "deleting"
	// StatePaused: suspended by PAUSE (docker pause): no CPU, memory and
	// processes kept; the next operation unpauses it.
	StatePaused State = "paused"
	// StateHibernated: suspended by HIBERNATE: its workspace is in a
	// snapshot and its container is gone; the next operation recreates it
	// from the snapshot under the same id (processes do not survive).
	StateHibernated State = "hibernated"
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
	// Snapshot is the snapshot a hibernated sandbox wakes from, or the one
	// it was created from.
	Snapshot string
	// Volumes are the named volumes it mounts (volume.go).
	Volumes []VolumeMount
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

	// Snapshot restores the workspace from this snapshot of the tenant
	// before the box starts (never a pooled box).
	Snapshot string
	// Volumes are named volumes of the tenant to mount, by name or id
	// (never a pooled box).
	Volumes []VolumeMount

	pool    string        // the pool key of a box made for a warm pool
	restore restoreSource // what fills the workspace from Snapshot
	memory  *memImage     // the memory image a wake starts the box from
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
	// Snapshots keeps workspace snapshots (docs/workspaces.md): nil
	// refuses SnapshotSandbox, hibernation and creates from a snapshot.
	Snapshots *snapshot.Repo
	// Volumes configures named volumes (volume.go).
	Volumes VolumeConfig
	// Channel is how the worker reaches a new box's agent: ChannelStdio
	// ("" too) makes the agent itself PID 1 (`serve --pid1`), serving its
	// first channel on the container's stdio, attached before the start:
	// one in-box process, no exec. ChannelExec runs `sandbox-agent init`
	// as PID 1 and starts the agent with one `docker exec` per channel.
	// Later channels (after a reset or a worker restart) are execs in
	// both modes. See docs/security.md, "PID 1 serves the channel".
	Channel string
	// NoMemoryCheckpoints makes every hibernation workspace-only, even
	// where the engine could keep a gVisor box's processes (memory.go):
	// for operators who want no process memory in their snapshot store.
	NoMemoryCheckpoints bool
	// EngineFill fills every restored workspace through the engine's
	// archive copy, even where this worker could write the volume's
	// directory itself (hostfill.go): the bench's baseline and the tests
	// of both paths.
	EngineFill bool
	// ChannelTransfers sends every upload's and download's bytes through
	// the agent channel, even where this worker could move them through
	// the agent's open file itself (lend.go): the tests of both paths.
	ChannelTransfers bool
}

// The values of Config.Channel.
const (
	ChannelExec  = "exec"
	ChannelStdio = "stdio"
)

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
	known  knownRuntimes
	// transfers of more than one chunk, by the path their bytes took, and
	// streamed executes whose output came through a lent pipe
	lent, channelled, lentStreams atomic.Int64
	bg                            sync.WaitGroup
	limits                        limits // the policy resolved against the host
	// remappedIDs: the engine's files have other owners on the host
	// (Host.RemappedIDs): no host fill.
	remappedIDs bool
	hostCPUs    int // the engine's NCPU: the CPUs a box sees

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	reserved  int64 // memory of live and in-creation sandboxes
	creating  int
	failed    int                  // failed sandboxes whose quota is released but whose record stays
	pending   map[string]bool      // ids of creates and deletes in progress (their volumes and proxies are not orphans)
	tenantNew map[string]tenantUse // by tenant: what its creates in progress reserve
	evicting  int                  // creates evicting pool boxes (pool refills wait)
	collected time.Time            // last collector round
	closed    bool
	expiry    *expiryStore
	pools     *pools                // warm pools, guarded by mu
	vols      map[string]*volumeRec // named volumes by id

	// hibernated counts hibernated sandboxes: they hold no memory and no
	// slot of max_sandboxes (their snapshots count toward their tenant's
	// snapshot quota); a wake reserves both again (wakeHibernated).
	hibernated int

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

	// life serialises snapshot, suspend and wake (workspace.go).
	life sync.Mutex
	// last is the box's latest snapshot (the parent of its next one).
	last string
	// leftover: its hibernation did not remove its container or volume
	// (the wake removes them first).
	leftover bool
	// memory: its hibernation kept its processes in this memory image.
	memory *memImage
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
	if cfg.Snapshots == nil {
		for name, t := range cfg.Templates {
			if t.HibernateAfter > 0 {
				return nil, &ConfigError{Err: fmt.Errorf("template %q: hibernate_after needs a snapshot store (snapshots)", name)}
			}
		}
		if cfg.Defaults.HibernateAfter > 0 {
			return nil, &ConfigError{Err: errors.New("defaults: hibernate_after needs a snapshot store (snapshots)")}
		}
	}
	switch cfg.Channel {
	case "":
		cfg.Channel = ChannelStdio
	case ChannelExec, ChannelStdio:
	default:
		return nil, &ConfigError{Err: fmt.Errorf("channel %q: want %q or %q", cfg.Channel, ChannelExec, ChannelStdio)}
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
		images:    newImages(api, cfg.Agent, cfg.Worker),
		now:       time.Now,
		sandboxes: map[string]*sandbox{},
		budget:    newMemBudget(cfg.ChannelMemoryBytes),
		pending:   map[string]bool{},
		tenantNew: map[string]tenantUse{},
		vols:      map[string]*volumeRec{},
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
	m.remappedIDs, m.hostCPUs = host.RemappedIDs, host.CPUs
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
	if err := m.adoptVolumes(ctx); err != nil {
		return nil, err
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
// Named volumes stay: they are the tenants' data, deleted only by
// DeleteVolume.
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

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
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
		m.pending[id] = true // the collector leaves its volumes and proxy to this delete
	}
	m.mu.Unlock()
	if !ok {
		return errorf(CodeNotFound, "sandbox %s not found on worker %s", id, m.cfg.Worker)
	}
	defer func() {
		m.mu.Lock()
		delete(m.pending, id)
		m.mu.Unlock()
	}()
	before := m.snapshot(sb)
	cid := m.retire(sb)
	if cid == "" { // hibernated: its container is gone
		cid = id
	}
	if before.State == StatePaused {
		m.unfreeze(ctx, cid) // see Suspend: a paused gVisor box may outlive a forced removal
	}
	if err := m.removeContainer(ctx, cid, volumeName(id)); err != nil {
		m.mu.Lock()
		m.sandboxes[id] = sb
		m.failed++ // retire released its quota; the record stays, as a failed sandbox's
		m.mu.Unlock()
		m.lg.Warn("sandbox not deleted: its container could not be removed; the reaper retries", zap.String("sandbox-id", id), zap.Error(err))
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("sandbox %s is not deleted yet: the engine did not remove its container (it stays deleting and the worker retries; the delete may be retried)", id), Err: err}
	}
	m.forgetClaim(id)
	m.dropHibernation(ctx, sb, before)
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
// Hibernated sandboxes count in neither: they hold only storage (see
// Hibernated).
// Unclaimed warm-pool boxes count in neither either (Pools reports them):
// a claim turns one into a live sandbox at no extra cost, and a create
// over the quota evicts one.
func (m *Manager) Usage() (sandboxes int, memory int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sandboxes) - m.failed - m.hibernated, m.reserved - m.pools.mem
}

// Hibernated reports how many sandboxes are hibernated: they count toward
// neither max_sandboxes nor max_memory, only their snapshots' bytes
// toward their tenants' snapshot quota.
func (m *Manager) Hibernated() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hibernated
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
	info.Volumes = slices.Clone(sb.info.Volumes)
	return info
}

func (f closerFunc) Close() error { return f() }

func (w *logWriter) Write(p []byte) (int, error) {
	if w.written < w.max {
		n := min(len(p), w.max-w.written)
		w.written += n
		w.lg.Debug("sandbox agent stderr", zap.ByteString("text", p[:n]))
	}
	return len(p), nil
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
