package sandboxd

import (
	"fmt"
	"sort"
	"time"

	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/yamlconf"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
)

// Config is sandboxd's YAML configuration file (--config). Flags and their
// environment variables override the values it sets (see Flags.Apply).
// Sizes take units (memory: 1Gi); the older byte-count keys
// (memory_bytes, disk_bytes, max_memory_bytes, ...) are still accepted,
// with a deprecation warning.
type Config struct {
	// Version of the config format; 1.
	Version int `yaml:"version"`
	// Server holds listen addresses and shutdown behavior.
	Server daemon.ServerConfig `yaml:"server"`
	// Worker is this worker's name, part of every sandbox id it creates.
	Worker string `yaml:"worker"`
	// AgentBinary is the static sandbox-agent to bake into sandbox images.
	AgentBinary string `yaml:"agent_binary"`
	// EgressProxyBinary is the static plumb-egress proxy of egress
	// sandboxes (default: plumb-egress next to sandboxd; without it egress
	// sandboxes are refused).
	EgressProxyBinary string `yaml:"egress_proxy_binary"`
	// EgressUpstreamCA is a PEM bundle file: the roots an egress proxy that
	// injects secrets verifies upstreams against (default: the system
	// bundle).
	EgressUpstreamCA string `yaml:"egress_upstream_ca"`
	// DiskEnforcement is how a sandbox's disk limit is enforced:
	// sandbox.DiskKernel (default) or sandbox.DiskWatchdog.
	DiskEnforcement string `yaml:"disk_enforcement"`
	// Channel is how the worker reaches a new box's agent:
	// sandbox.ChannelExec or sandbox.ChannelStdio (the agent is the box's
	// PID 1); "" is sandbox.Config's default.
	Channel string `yaml:"channel"`
	// Defaults fill the unset fields of every sandbox.
	Defaults Template `yaml:"defaults"`
	// Pool is the warm pool of requests that name no template (the
	// defaults); it needs state_dir.
	Pool sandbox.PoolConfig `yaml:"pool"`
	// Templates are named sandbox settings requests can refer to, each
	// with an optional warm pool.
	Templates map[string]TemplateConfig `yaml:"templates"`
	// MaxSandboxes caps live sandboxes on this worker (0 = unlimited).
	MaxSandboxes int `yaml:"max_sandboxes"`
	// MaxMemory caps the sum of sandbox memory limits (0 = unlimited).
	MaxMemory yamlconf.Quantity `yaml:"max_memory" deprecated:"max_memory_bytes"`
	// ChannelMemory is the memory all agent channels of this worker may
	// hold together: frames being read plus stream events not yet taken
	// (0 = sandbox.DefaultChannelMemoryBytes, 256 MiB).
	ChannelMemory yamlconf.Quantity `yaml:"channel_memory" deprecated:"channel_memory_bytes"`
	// StateDir holds the worker's small state (each sandbox's expiry, so a
	// restart does not extend it; the hibernated boxes' records, so a
	// restart keeps them).
	StateDir string `yaml:"state_dir"`
	// Policy bounds what any sandbox on this worker may have: ceilings,
	// allowed images and runtimes, the default runtime, egress. Requests
	// may only narrow the template they name.
	Policy Policy `yaml:"policy"`
	// Labels are added to every container and volume of this worker (for
	// an operator's own inventory, or a test run's sweep). plumb's own
	// label keys are refused.
	Labels map[string]string `yaml:"labels"`
	// Snapshots is where workspace snapshots are kept (docs/workspaces.md).
	Snapshots SnapshotsConfig `yaml:"snapshots"`
	// Volumes configures named volumes (docs/workspaces.md).
	Volumes VolumesConfig `yaml:"volumes"`
	// Resume bounds resumable ExecuteStreams and Process streams.
	Resume ResumeConfig `yaml:"resume"`

	// Deprecated lists the deprecated keys the file used, for a warning
	// each once there is a logger.
	Deprecated []yamlconf.Deprecation `yaml:"-"`
}

// Template is a sandbox's settings: the defaults, or a named template.
type Template struct {
	// Image must exist locally; nothing is pulled.
	Image string `yaml:"image"`
	// WorkingDir is the writable workspace (default /workspace).
	WorkingDir string `yaml:"working_dir"`
	// CPUs is the CPU quota in cores (1.5).
	CPUs float64 `yaml:"cpus" deprecated:"cpu"`
	// Memory is the memory limit (512Mi); swap is set equal (no swap).
	Memory yamlconf.Quantity `yaml:"memory" deprecated:"memory_bytes"`
	// Pids bounds the number of processes.
	Pids int64 `yaml:"pids"`
	// Network is "none" (default) or "egress".
	Network string `yaml:"network"`
	// Disk is the workspace disk limit (10Gi; 0 = none, or the policy's
	// max_disk when it sets one).
	Disk yamlconf.Quantity `yaml:"disk" deprecated:"disk_bytes"`
	// Runtime is the OCI runtime ("" = engine default, or "runsc").
	Runtime string `yaml:"runtime"`
	// TTL is the time to live without activity.
	TTL time.Duration `yaml:"ttl"`
	// Env is the base environment.
	Env map[string]string `yaml:"env"`
	// FilesRoot is the directory file operations see as "/": "/" (the
	// default) or the working directory.
	FilesRoot string `yaml:"files_root"`
	// IdleSuspendAfter pauses a box idle this long (0 = never).
	IdleSuspendAfter time.Duration `yaml:"idle_suspend_after"`
	// HibernateAfter hibernates a box idle this long (0 = never); it needs
	// a snapshot store.
	HibernateAfter time.Duration `yaml:"hibernate_after"`
}

// SnapshotsConfig is the snapshot store: a local directory (dir, or
// <state_dir>/snapshots when neither dir nor s3 is set and there is a
// state_dir), or an S3-compatible bucket.
type SnapshotsConfig struct {
	// Dir is a local directory only sandboxd writes.
	Dir string `yaml:"dir"`
	// S3 is an S3-compatible bucket (endpoint and bucket set).
	S3 S3Config `yaml:"s3"`
	// PerTenant caps the bytes one tenant's snapshots hold in the store
	// (0 = unlimited).
	PerTenant yamlconf.Quantity `yaml:"per_tenant_bytes"`
	// Memory is "auto" (the default: a hibernation keeps a gVisor box's
	// processes where the engine can checkpoint) or "off" (every
	// hibernation is workspace-only).
	Memory string `yaml:"memory"`
}

// VolumesConfig bounds named volumes.
type VolumesConfig struct {
	// PerTenant caps the sum of the sizes of one tenant's volumes on this
	// worker (0 = unlimited).
	PerTenant yamlconf.Quantity `yaml:"per_tenant_bytes"`
}

// Bounds of ResumeConfig.
const (
	maxResumeGrace  = time.Hour
	minResumeBuffer = sandbox.ProcessChunk
	maxResumeBuffer = 256 << 20
)

// ResumeConfig bounds what a resumable execution (an ExecuteStream or a
// Process stream started resumable) keeps for a client that lost its
// connection (docs/http.md).
type ResumeConfig struct {
	// Grace is how long it keeps running, or its end is kept, with no
	// stream attached (0 = sandbox.DefaultResumeGrace, 30s; at most 1h).
	Grace time.Duration `yaml:"grace"`
	// Buffer is how much of its newest output it keeps for a stream that
	// re-attaches (0 = sandbox.DefaultResumeBuffer, 1Mi; 64Ki to 256Mi).
	Buffer yamlconf.Quantity `yaml:"buffer"`
}

// spec is the registry's form of r.
func (r ResumeConfig) spec() sandbox.ExecutionsConfig {
	return sandbox.ExecutionsConfig{Grace: r.Grace, Buffer: int(r.Buffer)}
}

// check refuses bounds out of range.
func (r ResumeConfig) check() error {
	switch {
	case r.Grace < 0 || r.Grace > maxResumeGrace:
		return fmt.Errorf("resume.grace %s: want 0 (the default, %s) up to %s", r.Grace, sandbox.DefaultResumeGrace, maxResumeGrace)
	case r.Buffer != 0 && (r.Buffer < minResumeBuffer || r.Buffer > maxResumeBuffer):
		return fmt.Errorf("resume.buffer %d bytes: want 0 (the default, 1Mi) or 64Ki up to 256Mi", int64(r.Buffer))
	}
	return nil
}

// S3Config says where a bucket is. Credentials: access_key and
// secret_key, or (both unset) the AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
// and AWS_SESSION_TOKEN environment variables. Never logged.
type S3Config struct {
	Endpoint     string `yaml:"endpoint"`
	Bucket       string `yaml:"bucket"`
	Prefix       string `yaml:"prefix"`
	Region       string `yaml:"region"`
	Insecure     bool   `yaml:"insecure"` // plain HTTP (a loopback test server)
	CreateBucket bool   `yaml:"create_bucket"`
	AccessKey    string `yaml:"access_key"`
	SecretKey    string `yaml:"secret_key"`
}

// TemplateConfig is a named template and its warm pool.
type TemplateConfig struct {
	Template `yaml:",inline"`
	// Pool keeps boxes of this template created, started and greeted
	// ahead of requests (size 0 = no pool); it needs state_dir.
	Pool sandbox.PoolConfig `yaml:"pool"`
}

// Policy is the worker's policy (see sandbox.Policy).
type Policy struct {
	// MaxMemory is the memory ceiling of one sandbox (0 = the host's).
	MaxMemory yamlconf.Quantity `yaml:"max_memory" deprecated:"max_memory_bytes"`
	// MaxCPUs is the CPU ceiling of one sandbox in cores (0 = the host's).
	MaxCPUs float64 `yaml:"max_cpus"`
	// MaxPids is the pids ceiling of one sandbox (0 = DefaultMaxPids).
	MaxPids int64 `yaml:"max_pids"`
	// MaxTTL is the TTL ceiling, for creates and keep-alives (0 = 168h).
	MaxTTL time.Duration `yaml:"max_ttl"`
	// MaxDisk is the workspace disk ceiling of one sandbox (0 = none); a
	// sandbox that sets no disk limit gets this one.
	MaxDisk yamlconf.Quantity `yaml:"max_disk" deprecated:"max_disk_bytes"`
	// AllowedImages lists the images sandboxes may use (patterns or
	// digests; empty = every local image).
	AllowedImages []string `yaml:"allowed_images"`
	// AllowedRuntimes lists the OCI runtimes sandboxes may use (empty =
	// every runtime the engine has).
	AllowedRuntimes []string `yaml:"allowed_runtimes"`
	// DefaultRuntime is the runtime of sandboxes whose template and request
	// name none ("" = the engine's default).
	DefaultRuntime string `yaml:"default_runtime"`
	// AllowEgress permits network "egress" at all (unset = allowed).
	AllowEgress *bool `yaml:"allow_egress"`
	// EgressAllow is the allow-list of egress destinations (empty = every
	// public destination).
	EgressAllow []string `yaml:"egress_allow"`
	// EgressDeny adds addresses or prefixes the proxy refuses.
	EgressDeny []string `yaml:"egress_deny"`
	// PerTenant caps what one tenant's sandboxes hold together.
	PerTenant TenantLimits `yaml:"per_tenant"`
}

// TenantLimits is policy.per_tenant (zero fields = unlimited).
type TenantLimits struct {
	MaxSandboxes int               `yaml:"max_sandboxes"`
	MaxMemory    yamlconf.Quantity `yaml:"max_memory" deprecated:"max_memory_bytes"`
	MaxCPUs      float64           `yaml:"max_cpus"`
}

// Load reads and strictly decodes the config file at path.
func Load(path string) (*Config, error) {
	var c Config
	ds, err := yamlconf.Load(path, &c)
	if err != nil {
		return nil, err
	}
	if c.Version != 0 && c.Version != 1 {
		return nil, fmt.Errorf("config file %s: version %d is not supported (want 1)", path, c.Version)
	}
	c.Deprecated = ds
	return &c, nil
}

// spec is the manager's form of t.
func (t Template) spec() sandbox.Template {
	return sandbox.Template{
		Image:       t.Image,
		WorkingDir:  t.WorkingDir,
		CPUs:        t.CPUs,
		MemoryBytes: int64(t.Memory),
		Pids:        t.Pids,
		Network:     t.Network,
		DiskBytes:   int64(t.Disk),
		Runtime:     t.Runtime,
		TTL:         t.TTL,
		Env:         t.Env,
		FilesRoot:   t.FilesRoot,

		IdleSuspendAfter: t.IdleSuspendAfter,
		HibernateAfter:   t.HibernateAfter,
	}
}

// spec is the manager's form of p.
func (p Policy) spec() sandbox.Policy {
	return sandbox.Policy{
		MaxMemoryBytes:  int64(p.MaxMemory),
		MaxCPUs:         p.MaxCPUs,
		MaxPids:         p.MaxPids,
		MaxTTL:          p.MaxTTL,
		MaxDiskBytes:    int64(p.MaxDisk),
		AllowedImages:   p.AllowedImages,
		AllowedRuntimes: p.AllowedRuntimes,
		DefaultRuntime:  p.DefaultRuntime,
		AllowEgress:     p.AllowEgress,
		EgressAllow:     p.EgressAllow,
		EgressDeny:      p.EgressDeny,
		PerTenant: sandbox.TenantLimits{
			MaxSandboxes:   p.PerTenant.MaxSandboxes,
			MaxMemoryBytes: int64(p.PerTenant.MaxMemory),
			MaxCPUs:        p.PerTenant.MaxCPUs,
		},
	}
}

// templates splits the configured templates into the manager's templates
// and pools (the defaults' pool under "").
func (c *Config) templates() (map[string]sandbox.Template, map[string]sandbox.PoolConfig) {
	ts := make(map[string]sandbox.Template, len(c.Templates))
	pools := map[string]sandbox.PoolConfig{}
	if c.Pool.Size > 0 {
		pools[""] = c.Pool
	}
	for name, tc := range c.Templates {
		ts[name] = tc.spec()
		if tc.Pool.Size > 0 {
			pools[name] = tc.Pool
		}
	}
	return ts, pools
}

// Validate checks the settled configuration (file and flags) before the
// engine is asked anything; the manager checks again against the host.
func (c *Config) Validate() error {
	if err := c.checkPolicy(); err != nil {
		return err
	}
	for k := range c.Labels {
		// The worker reads its own labels back to re-adopt its sandboxes.
		if sandbox.IsOwnLabel(k) {
			return fmt.Errorf("labels: %q is one of plumb's own label keys", k)
		}
	}
	if err := c.checkPools(); err != nil {
		return err
	}
	if c.MaxSandboxes < 0 {
		return fmt.Errorf("max_sandboxes (--max-sandboxes) must not be negative")
	}
	if err := c.Resume.check(); err != nil {
		return err
	}
	switch c.Snapshots.Memory {
	case "", "auto", "off":
	default:
		return fmt.Errorf("snapshots.memory: %q: want \"auto\" or \"off\"", c.Snapshots.Memory)
	}
	switch c.Channel {
	case "", sandbox.ChannelExec, sandbox.ChannelStdio:
	default:
		return fmt.Errorf("channel: %q: want %q or %q", c.Channel, sandbox.ChannelExec, sandbox.ChannelStdio)
	}
	if !sandboxapi.ValidWorker(c.Worker) {
		return fmt.Errorf("invalid worker name %q: use 1 to 63 letters, digits, '-' or '.'", c.Worker)
	}
	return nil
}

// checkPolicy checks the policy, and the defaults and every template
// against it.
func (c *Config) checkPolicy() error {
	pol := c.Policy.spec()
	if err := pol.Validate(); err != nil {
		return err
	}
	defaults := c.Defaults.spec()
	if defaults.Runtime == "" {
		defaults.Runtime = pol.DefaultRuntime
	}
	defaults = defaults.Merge(sandbox.DefaultTemplate)
	if err := pol.CheckTemplate(defaults); err != nil {
		return fmt.Errorf("defaults break the worker policy: %w", err)
	}
	for _, name := range sortedNames(c.Templates) {
		if err := pol.CheckTemplate(c.Templates[name].spec().Merge(defaults)); err != nil {
			return fmt.Errorf("template %q breaks the worker policy: %w", name, err)
		}
	}
	return nil
}

// checkPools refuses pools the manager would refuse.
func (c *Config) checkPools() error {
	if c.Pool.Size < 0 {
		return fmt.Errorf("pool.size (--pool-size) %d must not be negative", c.Pool.Size)
	}
	_, pools := c.templates()
	for _, name := range sortedNames(pools) {
		p := pools[name]
		what := "pool"
		if name != "" {
			what = "templates." + name + ".pool"
		}
		switch {
		case p.Size > sandbox.MaxPoolSize:
			return fmt.Errorf("%s: size %d is over the maximum %d", what, p.Size, sandbox.MaxPoolSize)
		case p.IdleLifetime < 0:
			return fmt.Errorf("%s: idle_lifetime %s must not be negative", what, p.IdleLifetime)
		case c.StateDir == "":
			return fmt.Errorf("%s: warm pools need --state-dir (state_dir), where claims of pool boxes are recorded", what)
		}
	}
	return nil
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
