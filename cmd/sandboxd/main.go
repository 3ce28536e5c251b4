// Command sandboxd is a sandbox worker: it serves plumb.v1.SandboxService,
// running each agent's commands and file operations inside a hardened
// Docker container on this host.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

func main() { os.Exit(daemon.Main("sandboxd", run)) }

// Config is sandboxd's YAML configuration file (--config). Flags and their
// environment variables override the values it sets.
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
	// Defaults fill the unset fields of every sandbox.
	Defaults sandbox.Template `yaml:"defaults"`
	// Pool is the warm pool of requests that name no template (the
	// defaults); it needs state_dir.
	Pool sandbox.PoolConfig `yaml:"pool"`
	// Templates are named sandbox settings requests can refer to, each
	// with an optional warm pool.
	Templates map[string]TemplateConfig `yaml:"templates"`
	// MaxSandboxes caps live sandboxes on this worker (0 = unlimited).
	MaxSandboxes int `yaml:"max_sandboxes"`
	// MaxMemoryBytes caps the sum of sandbox memory limits (0 = unlimited).
	MaxMemoryBytes int64 `yaml:"max_memory_bytes"`
	// ChannelMemoryBytes is the memory all agent channels of this worker
	// may hold together: frames being read plus stream events not yet
	// taken (0 = sandbox.DefaultChannelMemoryBytes, 256 MiB).
	ChannelMemoryBytes int64 `yaml:"channel_memory_bytes"`
	// StateDir holds the worker's small state (each sandbox's expiry, so a
	// restart does not extend it).
	StateDir string `yaml:"state_dir"`
	// Policy bounds what any sandbox on this worker may have: ceilings,
	// allowed images and runtimes, the default runtime, egress. Requests
	// may only narrow the template they name.
	Policy sandbox.Policy `yaml:"policy"`
	// Labels are added to every container and volume of this worker (for
	// an operator's own inventory, or a test run's sweep). plumb's own
	// label keys are refused.
	Labels map[string]string `yaml:"labels"`
}

// TemplateConfig is a named template and its warm pool.
type TemplateConfig struct {
	sandbox.Template `yaml:",inline"`
	// Pool keeps boxes of this template created, started and greeted
	// ahead of requests (size 0 = no pool); it needs state_dir.
	Pool sandbox.PoolConfig `yaml:"pool"`
}

// templates splits the configured templates into the manager's templates
// and pools (the defaults' pool under "").
func (cfg Config) templates() (map[string]sandbox.Template, map[string]sandbox.PoolConfig) {
	ts := make(map[string]sandbox.Template, len(cfg.Templates))
	pools := map[string]sandbox.PoolConfig{}
	if cfg.Pool.Size > 0 {
		pools[""] = cfg.Pool
	}
	for name, tc := range cfg.Templates {
		ts[name] = tc.Template
		if tc.Pool.Size > 0 {
			pools[name] = tc.Pool
		}
	}
	return ts, pools
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var (
		c            daemon.Common
		worker       string
		agentBin     string
		egressBin    string
		egressAllow  string
		maxSandboxes int
		deleteOnExit bool
		defaultImage string
		pol          sandbox.Policy
		allowEgress  bool
		stateDir     string
		pool         sandbox.PoolConfig
	)
	f := daemon.NewFlags("sandboxd")
	c.Bind(f, "127.0.0.1:7071", "127.0.0.1:9071")
	f.String(&worker, "worker", defaultWorker(), "worker name, part of every sandbox id (letters, digits, '-', '.')")
	f.String(&agentBin, "agent-binary", "", "static sandbox-agent binary (default: sandbox-agent next to sandboxd)")
	f.String(&egressBin, "egress-proxy-binary", "", "static plumb-egress proxy for egress sandboxes (default: plumb-egress next to sandboxd; missing = egress sandboxes are refused)")
	f.String(&egressAllow, "policy-egress-allow", "", "comma-separated egress allow-list: host patterns (pypi.org, *.example.com, host:443) and addresses or prefixes (203.0.113.0/24, [2001:db8::/32]:443); empty = every public destination")
	f.String(&defaultImage, "default-image", "", "default image for sandboxes whose request and template name none (must exist locally)")
	f.Int(&maxSandboxes, "max-sandboxes", 0, "maximum live sandboxes on this worker (0 = unlimited)")
	f.Int64(&pol.MaxMemoryBytes, "policy-max-memory-bytes", 0, "memory ceiling of one sandbox in bytes (0 = the host's memory)")
	f.Float(&pol.MaxCPUs, "policy-max-cpus", 0, "CPU ceiling of one sandbox in cores (0 = the host's CPUs)")
	f.Int64(&pol.MaxPids, "policy-max-pids", 0, fmt.Sprintf("pids ceiling of one sandbox (0 = %d)", sandbox.DefaultMaxPids))
	f.Duration(&pol.MaxTTL, "policy-max-ttl", 0, "TTL ceiling of sandboxes, for creates and keep-alives (0 = 168h)")
	f.Int64(&pol.MaxDiskBytes, "policy-max-disk-bytes", 0, "workspace disk ceiling of one sandbox in bytes (0 = none)")
	f.Bool(&allowEgress, "policy-allow-egress", true, "allow sandboxes with network egress at all")
	f.String(&pol.DefaultRuntime, "default-runtime", "", "OCI runtime of sandboxes whose template and request name none, e.g. runsc (default: the engine's)")
	f.String(&stateDir, "state-dir", "", "directory for the worker's state: each sandbox's expiry, kept across restarts (default: none; re-adopted sandboxes then expire at creation + TTL)")
	f.Int(&pool.Size, "pool-size", 0, fmt.Sprintf("warm pool of sandboxes for requests that name no template: boxes kept created, started and greeted, claimed by creates (0 = none, at most %d; needs --state-dir; templates set theirs in the config file)", sandbox.MaxPoolSize))
	f.Duration(&pool.IdleLifetime, "pool-idle-lifetime", 0, fmt.Sprintf("how long an unclaimed warm-pool box is kept before it is replaced (0 = %s)", sandbox.DefaultPoolIdleLifetime))
	f.Bool(&deleteOnExit, "delete-sandboxes-on-exit", false, "remove every sandbox at shutdown instead of leaving them for the next start to re-adopt")
	if err := daemon.ParseArgs(f, args, stdout, "sandboxd serves plumb.v1.SandboxService: hardened Docker sandboxes."); err != nil {
		return err
	}
	if c.Version {
		daemon.PrintVersion(stdout, "sandboxd")
		return nil
	}
	var cfg Config
	if c.ConfigPath != "" {
		if err := daemon.LoadYAML(c.ConfigPath, &cfg); err != nil {
			return &daemon.UsageError{Err: err}
		}
		if cfg.Version != 0 && cfg.Version != 1 {
			return daemon.Usagef("config file %s: version %d is not supported (want 1)", c.ConfigPath, cfg.Version)
		}
		if err := c.Apply(f, cfg.Server); err != nil {
			return err
		}
		if cfg.Worker != "" && !f.IsSet("worker") {
			worker = cfg.Worker
		}
		if cfg.AgentBinary != "" && !f.IsSet("agent-binary") {
			agentBin = cfg.AgentBinary
		}
		if cfg.EgressProxyBinary != "" && !f.IsSet("egress-proxy-binary") {
			egressBin = cfg.EgressProxyBinary
		}
		if cfg.StateDir != "" && !f.IsSet("state-dir") {
			stateDir = cfg.StateDir
		}
		if cfg.MaxSandboxes != 0 && !f.IsSet("max-sandboxes") {
			maxSandboxes = cfg.MaxSandboxes
		}
	}
	if defaultImage != "" {
		cfg.Defaults.Image = defaultImage
	}
	if f.IsSet("pool-size") {
		cfg.Pool.Size = pool.Size
	}
	if f.IsSet("pool-idle-lifetime") {
		cfg.Pool.IdleLifetime = pool.IdleLifetime
	}
	policyFlags(f, &cfg.Policy, pol, allowEgress)
	if f.IsSet("policy-egress-allow") {
		cfg.Policy.EgressAllow = splitList(egressAllow)
	}
	if err := checkPolicy(cfg); err != nil {
		return daemon.Usagef("%s%v", configPrefix(c.ConfigPath), err)
	}
	if err := checkLabels(cfg.Labels); err != nil {
		return daemon.Usagef("config file %s: %v", c.ConfigPath, err)
	}
	if err := checkPools(cfg, stateDir); err != nil {
		return daemon.Usagef("%s%v", configPrefix(c.ConfigPath), err)
	}
	if maxSandboxes < 0 {
		return daemon.Usagef("--max-sandboxes must not be negative")
	}
	if !validWorker(worker) {
		return daemon.Usagef("invalid worker name %q: use 1 to 63 letters, digits, '-' or '.'", worker)
	}

	agent, err := readAgent(agentBin)
	if err != nil {
		return &daemon.UsageError{Err: err}
	}
	egressProxy, err := readEgressProxy(egressBin)
	if err != nil {
		return &daemon.UsageError{Err: err}
	}
	lg, err := daemon.NewLogger(c.LogFormat, c.LogLevel)
	if err != nil {
		return &daemon.UsageError{Err: err}
	}
	defer func() { _ = lg.Sync() }()
	// agentd's --token-file token names the tenant it calls for.
	sec, err := c.Security(true, lg)
	if err != nil {
		return err
	}
	lg = lg.With(zap.String("worker", worker))
	tr, err := daemon.SetupTracing(ctx, "sandboxd", lg)
	if err != nil {
		return err
	}
	defer daemon.FlushTraces(tr, lg)
	lg.Info("starting sandboxd")

	// The client traces an Engine API call made while serving an RPC
	// under that RPC's span (it takes the provider from the parent span);
	// the background reaper's calls, with no span, make none.
	docker, err := client.New(client.FromEnv)
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer docker.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = docker.Info(pctx, client.InfoOptions{})
	cancel()
	if err != nil && (errors.Is(err, os.ErrPermission) || strings.Contains(err.Error(), "permission denied")) {
		// Most often a non-root sandboxd outside the socket's group (on
		// Kubernetes: supplementalGroups, overlays/host-docker/docker-group.yaml).
		return fmt.Errorf("cannot reach the Docker Engine: %w (run sandboxd in the group that owns the socket: stat -c %%g on it gives the gid)", err)
	}
	if err != nil {
		return fmt.Errorf("cannot reach the Docker Engine: %w", err)
	}

	templates, pools := cfg.templates()
	mgr, err := sandbox.NewManager(ctx, docker, sandbox.Config{
		Worker:         worker,
		Agent:          agent,
		Templates:      templates,
		Pools:          pools,
		Defaults:       cfg.Defaults,
		MaxSandboxes:   maxSandboxes,
		MaxMemoryBytes: cfg.MaxMemoryBytes,
		ExtraLabels:    cfg.Labels,

		ChannelMemoryBytes: cfg.ChannelMemoryBytes,
		Policy:             cfg.Policy,
		StateDir:           stateDir,
		EgressProxy:        egressProxy,
	}, sandbox.WithLogger(lg))
	var ce *sandbox.ConfigError
	if errors.As(err, &ce) {
		return &daemon.UsageError{Err: fmt.Errorf("%s%w", configPrefix(c.ConfigPath), err)}
	}
	if err != nil {
		return err
	}
	defer func() {
		if deleteOnExit {
			dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := mgr.DeleteAll(dctx); err != nil {
				lg.Warn("delete sandboxes at exit", zap.Error(err))
			}
		}
		mgr.Close()
	}()

	runtimes, err := mgr.Runtimes(ctx)
	if err != nil {
		return err
	}
	svc := sandboxsvc.New(mgr, runtimes, lg)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), sandboxsvc.NewPoolCollector(mgr))
	o := sec
	o.Name, o.GRPCAddr, o.HTTPAddr, o.ShutdownGrace, o.Logger, o.Registry = "sandboxd", c.GRPCAddr, c.HTTPAddr, c.ShutdownGrace, lg, reg
	o.Register = func(s *grpc.Server) { plumbv1.RegisterSandboxServiceServer(s, svc) }
	o.BulkMethods = sandboxsvc.BulkMethods
	o.ServerOptions = tr.ServerOptions()
	return daemon.Serve(ctx, o)
}

// defaultWorker is the host name reduced to the allowed characters.
func defaultWorker() string {
	h, _ := os.Hostname()
	var b []byte
	for i := 0; i < len(h) && len(b) < 63; i++ {
		c := h[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '.':
			b = append(b, c)
		case c >= 'A' && c <= 'Z':
			b = append(b, c+'a'-'A')
		}
	}
	if len(b) == 0 {
		return "local"
	}
	return string(b)
}

func validWorker(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[0] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// readAgent loads the sandbox-agent binary: the given path, or
// sandbox-agent next to this executable.
func readAgent(path string) ([]byte, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("locate sandbox-agent: %w", err)
		}
		path = filepath.Join(filepath.Dir(exe), "sandbox-agent")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sandbox-agent binary: %w (build it with make build, or set --agent-binary)", err)
	}
	return b, nil
}

// readEgressProxy loads the plumb-egress binary: the given path (which
// must exist), or plumb-egress next to this executable when there is one
// (nil otherwise: egress sandboxes are then refused).
func readEgressProxy(path string) ([]byte, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, nil
		}
		b, err := os.ReadFile(filepath.Join(filepath.Dir(exe), "plumb-egress"))
		if err != nil {
			return nil, nil
		}
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("plumb-egress binary: %w (build it with make build, or set --egress-proxy-binary)", err)
	}
	return b, nil
}

// splitList splits a comma-separated flag value, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// checkLabels refuses labels that would overwrite plumb's own: the worker
// reads those back to re-adopt its sandboxes.
func checkLabels(labels map[string]string) error {
	for k := range labels {
		if sandbox.IsOwnLabel(k) {
			return fmt.Errorf("labels: %q is one of plumb's own label keys", k)
		}
	}
	return nil
}

// policyFlags lets the policy flags (given on the command line or in the
// environment) override the config file's policy section.
func policyFlags(f *daemon.Flags, p *sandbox.Policy, flags sandbox.Policy, allowEgress bool) {
	if f.IsSet("policy-max-memory-bytes") {
		p.MaxMemoryBytes = flags.MaxMemoryBytes
	}
	if f.IsSet("policy-max-cpus") {
		p.MaxCPUs = flags.MaxCPUs
	}
	if f.IsSet("policy-max-pids") {
		p.MaxPids = flags.MaxPids
	}
	if f.IsSet("policy-max-ttl") {
		p.MaxTTL = flags.MaxTTL
	}
	if f.IsSet("policy-max-disk-bytes") {
		p.MaxDiskBytes = flags.MaxDiskBytes
	}
	if f.IsSet("policy-allow-egress") {
		p.AllowEgress = &allowEgress
	}
	if f.IsSet("default-runtime") {
		p.DefaultRuntime = flags.DefaultRuntime
	}
}

// checkPolicy checks the policy and every template against it before the
// engine is asked anything; the manager checks again against the host.
func checkPolicy(cfg Config) error {
	if err := cfg.Policy.Validate(); err != nil {
		return err
	}
	defaults := cfg.Defaults
	if defaults.Runtime == "" {
		defaults.Runtime = cfg.Policy.DefaultRuntime
	}
	defaults = defaults.Merge(sandbox.DefaultTemplate)
	if err := cfg.Policy.CheckTemplate(defaults); err != nil {
		return fmt.Errorf("defaults break the worker policy: %w", err)
	}
	names := make([]string, 0, len(cfg.Templates))
	for name := range cfg.Templates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := cfg.Policy.CheckTemplate(cfg.Templates[name].Template.Merge(defaults)); err != nil {
			return fmt.Errorf("template %q breaks the worker policy: %w", name, err)
		}
	}
	return nil
}

// checkPools refuses pools the manager would refuse, before the engine is
// asked anything.
func checkPools(cfg Config, stateDir string) error {
	_, pools := cfg.templates()
	for _, name := range sortedNames(pools) {
		p := pools[name]
		what := "pool"
		if name != "" {
			what = fmt.Sprintf("template %q: pool", name)
		}
		switch {
		case p.Size > sandbox.MaxPoolSize:
			return fmt.Errorf("%s size %d is over the maximum %d", what, p.Size, sandbox.MaxPoolSize)
		case p.IdleLifetime < 0:
			return fmt.Errorf("%s idle_lifetime %s must not be negative", what, p.IdleLifetime)
		case stateDir == "":
			return fmt.Errorf("%s: warm pools need --state-dir (state_dir), where claims of pool boxes are recorded", what)
		}
	}
	if cfg.Pool.Size < 0 {
		return fmt.Errorf("--pool-size %d must not be negative", cfg.Pool.Size)
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

func configPrefix(path string) string {
	if path == "" {
		return ""
	}
	return "config file " + path + ": "
}
