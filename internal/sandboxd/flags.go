package sandboxd

import (
	"fmt"
	"os"
	"strings"

	"github.com/plumbhq/plumb/internal/daemon"
	"github.com/plumbhq/plumb/internal/yamlconf"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// Flags are sandboxd's own flags (daemon.Common holds the shared ones).
// Each but DeleteOnExit overrides a config key (see Apply).
type Flags struct {
	worker       string
	agentBin     string
	egressBin    string
	upstreamCA   string
	diskEnforce  string
	egressAllow  string
	defaultImage string
	stateDir     string
	maxSandboxes int
	policy       sandbox.Policy
	allowEgress  bool
	pool         sandbox.PoolConfig
	// DeleteOnExit removes every sandbox at shutdown.
	DeleteOnExit bool
}

// Bind defines the flags on f.
func (fl *Flags) Bind(f *daemon.Flags) {
	f.String(&fl.worker, "worker", defaultWorker(), "worker name, part of every sandbox id (letters, digits, '-', '.')")
	f.String(&fl.agentBin, "agent-binary", "", "static sandbox-agent binary (default: sandbox-agent next to sandboxd)")
	f.String(&fl.egressBin, "egress-proxy-binary", "", "static plumb-egress proxy for egress sandboxes (default: plumb-egress next to sandboxd; missing = egress sandboxes are refused)")
	f.String(&fl.upstreamCA, "egress-upstream-ca", "", "PEM bundle of the roots an egress proxy that injects secrets verifies upstreams against (default: the system bundle)")
	f.String(&fl.diskEnforce, "disk-enforcement", sandbox.DiskKernel, fmt.Sprintf("how a sandbox's disk limit is enforced: %q (a workspace file system of its own, on a loop device) or %q (measured every 30 s; a fallback for nodes without loop devices)", sandbox.DiskKernel, sandbox.DiskWatchdog))
	f.String(&fl.egressAllow, "policy-egress-allow", "", "comma-separated egress allow-list: host patterns (pypi.org, *.example.com, host:443) and addresses or prefixes (203.0.113.0/24, [2001:db8::/32]:443); empty = every public destination")
	f.String(&fl.defaultImage, "default-image", "", "default image for sandboxes whose request and template name none (must exist locally)")
	f.Int(&fl.maxSandboxes, "max-sandboxes", 0, "maximum live sandboxes on this worker (0 = unlimited)")
	f.Int64(&fl.policy.MaxMemoryBytes, "policy-max-memory-bytes", 0, "memory ceiling of one sandbox in bytes (0 = the host's memory)")
	f.Float(&fl.policy.MaxCPUs, "policy-max-cpus", 0, "CPU ceiling of one sandbox in cores (0 = the host's CPUs)")
	f.Int64(&fl.policy.MaxPids, "policy-max-pids", 0, fmt.Sprintf("pids ceiling of one sandbox (0 = %d)", sandbox.DefaultMaxPids))
	f.Duration(&fl.policy.MaxTTL, "policy-max-ttl", 0, "TTL ceiling of sandboxes, for creates and keep-alives (0 = 168h)")
	f.Int64(&fl.policy.MaxDiskBytes, "policy-max-disk-bytes", 0, "workspace disk ceiling of one sandbox in bytes (0 = none)")
	f.Bool(&fl.allowEgress, "policy-allow-egress", true, "allow sandboxes with network egress at all")
	f.String(&fl.policy.DefaultRuntime, "default-runtime", "", "OCI runtime of sandboxes whose template and request name none, e.g. runsc (default: the engine's)")
	f.String(&fl.stateDir, "state-dir", "", "directory for the worker's state: each sandbox's expiry, kept across restarts (default: none; re-adopted sandboxes then expire at creation + TTL)")
	f.Int(&fl.pool.Size, "pool-size", 0, fmt.Sprintf("warm pool of sandboxes for requests that name no template: boxes kept created, started and greeted, claimed by creates (0 = none, at most %d; needs --state-dir; templates set theirs in the config file)", sandbox.MaxPoolSize))
	f.Duration(&fl.pool.IdleLifetime, "pool-idle-lifetime", 0, fmt.Sprintf("how long an unclaimed warm-pool box is kept before it is replaced (0 = %s)", sandbox.DefaultPoolIdleLifetime))
	f.Bool(&fl.DeleteOnExit, "delete-sandboxes-on-exit", false, "remove every sandbox at shutdown instead of leaving them for the next start to re-adopt")
}

// Apply settles each flag with the config key it overrides, by the rule
// both daemons share (daemon.Override): a flag given on the command line
// or in the environment wins, then the config file, then the flag's
// default.
func (fl *Flags) Apply(f *daemon.Flags, c *Config) {
	daemon.Override(f, "worker", fl.worker, &c.Worker)
	daemon.Override(f, "agent-binary", fl.agentBin, &c.AgentBinary)
	daemon.Override(f, "egress-proxy-binary", fl.egressBin, &c.EgressProxyBinary)
	daemon.Override(f, "egress-upstream-ca", fl.upstreamCA, &c.EgressUpstreamCA)
	daemon.Override(f, "disk-enforcement", fl.diskEnforce, &c.DiskEnforcement)
	daemon.Override(f, "default-image", fl.defaultImage, &c.Defaults.Image)
	daemon.Override(f, "max-sandboxes", fl.maxSandboxes, &c.MaxSandboxes)
	daemon.Override(f, "state-dir", fl.stateDir, &c.StateDir)
	daemon.Override(f, "pool-size", fl.pool.Size, &c.Pool.Size)
	daemon.Override(f, "pool-idle-lifetime", fl.pool.IdleLifetime, &c.Pool.IdleLifetime)
	p := &c.Policy
	daemon.Override(f, "policy-max-memory-bytes", yamlconf.Quantity(fl.policy.MaxMemoryBytes), &p.MaxMemory)
	daemon.Override(f, "policy-max-cpus", fl.policy.MaxCPUs, &p.MaxCPUs)
	daemon.Override(f, "policy-max-pids", fl.policy.MaxPids, &p.MaxPids)
	daemon.Override(f, "policy-max-ttl", fl.policy.MaxTTL, &p.MaxTTL)
	daemon.Override(f, "policy-max-disk-bytes", yamlconf.Quantity(fl.policy.MaxDiskBytes), &p.MaxDisk)
	daemon.Override(f, "default-runtime", fl.policy.DefaultRuntime, &p.DefaultRuntime)
	if f.IsSet("policy-allow-egress") {
		p.AllowEgress = &fl.allowEgress
	}
	if f.IsSet("policy-egress-allow") {
		p.EgressAllow = splitList(fl.egressAllow)
	}
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
