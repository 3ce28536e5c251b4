package sandbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/plumbhq/plumb/pkg/egress"
)

// DefaultMaxPids is the pids ceiling when the policy sets none.
const DefaultMaxPids = 4096

// MaxTTL is the longest TTL any sandbox may have, whatever the policy.
const MaxTTL = 7 * 24 * time.Hour

// Policy is the worker operator's say over what a sandbox may have. The
// request never decides it: a request may only narrow its template, and
// every sandbox (and every configured template) must stay inside the
// policy. Zero fields take safe defaults: memory and CPUs no more than the
// host has (as the engine reports it), pids no more than DefaultMaxPids,
// TTL no more than MaxTTL, any image, any runtime the engine has.
type Policy struct {
	// MaxMemoryBytes is the memory ceiling of one sandbox (0 = the host's
	// memory).
	MaxMemoryBytes int64 `yaml:"max_memory_bytes"`
	// MaxCPUs is the CPU ceiling of one sandbox in cores (0 = the host's
	// CPUs).
	MaxCPUs float64 `yaml:"max_cpus"`
	// MaxPids is the pids ceiling of one sandbox (0 = DefaultMaxPids).
	MaxPids int64 `yaml:"max_pids"`
	// MaxTTL is the TTL ceiling, for creates and keep-alives (0 = 168h).
	MaxTTL time.Duration `yaml:"max_ttl"`
	// MaxDiskBytes is the workspace disk ceiling of one sandbox (0 = none).
	// A sandbox that sets no disk limit gets this one.
	MaxDiskBytes int64 `yaml:"max_disk_bytes"`
	// AllowedImages lists the images sandboxes may use: path.Match
	// patterns over the image reference as given ("python:3.*",
	// "registry.example/*"; a reference without tag also matches as
	// ":latest"), or image digests "sha256:<hex>" matching the image's ID
	// or one of its repository digests. Empty allows every local image.
	AllowedImages []string `yaml:"allowed_images"`
	// AllowedRuntimes lists the OCI runtimes sandboxes may use, by the
	// engine's names ("runc", "runsc"); the engine's default runtime
	// stands for "". Empty allows every runtime the engine has.
	AllowedRuntimes []string `yaml:"allowed_runtimes"`
	// DefaultRuntime is the runtime of sandboxes whose template and request
	// name none ("" = the engine's default).
	DefaultRuntime string `yaml:"default_runtime"`
	// AllowEgress permits network "egress" at all (nil = allowed).
	AllowEgress *bool `yaml:"allow_egress"`
	// EgressAllow is the allow-list of egress destinations: host patterns
	// ("pypi.org", "*.pythonhosted.org", "example.com:443") and addresses
	// or prefixes ("203.0.113.0/24", "[2001:db8::/32]:443"); see
	// egress.Rule. Empty admits every public destination. Only an address
	// rule admits a private, reserved or host address; nothing admits
	// loopback, link-local or the metadata addresses.
	EgressAllow []string `yaml:"egress_allow"`
	// EgressDeny adds addresses or prefixes the proxy refuses (unless an
	// address rule of EgressAllow names them), to the private and
	// reserved ranges and the host's own addresses it always refuses.
	EgressDeny []string `yaml:"egress_deny"`
	// PerTenant caps what one tenant's sandboxes hold together on this
	// worker, so one tenant cannot take every slot or most of the node's
	// memory (zero fields = unlimited).
	PerTenant TenantLimits `yaml:"per_tenant"`
}

// TenantLimits caps one tenant's live and in-creation sandboxes on a
// worker, checked at create and at a warm-pool claim under the same lock
// as the worker-wide quotas. Failed and deleted sandboxes give their share
// back. Zero fields are unlimited.
type TenantLimits struct {
	// MaxSandboxes caps the tenant's sandboxes.
	MaxSandboxes int `yaml:"max_sandboxes"`
	// MaxMemoryBytes caps the sum of the tenant's sandbox memory limits.
	MaxMemoryBytes int64 `yaml:"max_memory_bytes"`
	// MaxCPUs caps the sum of the tenant's sandbox CPU limits, in cores.
	MaxCPUs float64 `yaml:"max_cpus"`
}

// tenantUse is what one tenant's sandboxes hold.
type tenantUse struct {
	n    int
	mem  int64
	cpus float64
}

// add returns u with t (one more sandbox) added, or removed when sign is -1.
func (u tenantUse) add(t Template, sign int) tenantUse {
	return tenantUse{n: u.n + sign, mem: u.mem + int64(sign)*t.MemoryBytes, cpus: u.cpus + float64(sign)*t.CPUs}
}

// check refuses one more sandbox t for tenant, who holds u, when it
// would break a limit: a CodeQuota error whose Limit names it.
func (l TenantLimits) check(tenant string, u tenantUse, t Template) error {
	quota := func(limit, format string, args ...any) *Error {
		e := errorf(CodeQuota, format, args...)
		e.Limit = limit
		return e
	}
	switch {
	case l.MaxSandboxes > 0 && u.n >= l.MaxSandboxes:
		return quota("per_tenant.max_sandboxes", "tenant %q already has %d of its %d sandboxes on this worker (per_tenant.max_sandboxes); delete one first", tenant, u.n, l.MaxSandboxes)
	case l.MaxMemoryBytes > 0 && u.mem+t.MemoryBytes > l.MaxMemoryBytes:
		return quota("per_tenant.max_memory_bytes", "tenant %q memory quota on this worker: %d of %d bytes reserved (per_tenant.max_memory_bytes), %d more requested", tenant, u.mem, l.MaxMemoryBytes, t.MemoryBytes)
	case l.MaxCPUs > 0 && u.cpus+t.CPUs > l.MaxCPUs+1e-9: // tolerate float sums like 0.1+0.2
		return quota("per_tenant.max_cpus", "tenant %q CPU quota on this worker: %g of %g cores reserved (per_tenant.max_cpus), %g more requested", tenant, u.cpus, l.MaxCPUs, t.CPUs)
	}
	return nil
}

// isTenantQuota reports whether err is a refusal by a per-tenant limit
// (evicting pool boxes cannot help it).
func isTenantQuota(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeQuota && strings.HasPrefix(e.Limit, "per_tenant.")
}

// Validate checks the policy itself (not the engine): no negative
// ceilings, well-formed image patterns, a default runtime that is allowed.
func (p Policy) Validate() error {
	switch {
	case p.MaxMemoryBytes < 0:
		return fmt.Errorf("policy: max_memory_bytes %d must not be negative", p.MaxMemoryBytes)
	case !(p.MaxCPUs >= 0) || math.IsInf(p.MaxCPUs, 0): // also refuses NaN
		return fmt.Errorf("policy: max_cpus %g must be a finite number, not negative", p.MaxCPUs)
	case p.MaxPids < 0:
		return fmt.Errorf("policy: max_pids %d must not be negative", p.MaxPids)
	case p.MaxTTL < 0 || p.MaxTTL > MaxTTL:
		return fmt.Errorf("policy: max_ttl %s out of range 0..168h", p.MaxTTL)
	case p.MaxDiskBytes < 0:
		return fmt.Errorf("policy: max_disk_bytes %d must not be negative", p.MaxDiskBytes)
	case p.PerTenant.MaxSandboxes < 0:
		return fmt.Errorf("policy: per_tenant.max_sandboxes %d must not be negative", p.PerTenant.MaxSandboxes)
	case p.PerTenant.MaxMemoryBytes < 0:
		return fmt.Errorf("policy: per_tenant.max_memory_bytes %d must not be negative", p.PerTenant.MaxMemoryBytes)
	case !(p.PerTenant.MaxCPUs >= 0) || math.IsInf(p.PerTenant.MaxCPUs, 0): // also refuses NaN
		return fmt.Errorf("policy: per_tenant.max_cpus %g must be a finite number, not negative", p.PerTenant.MaxCPUs)
	case p.DefaultRuntime != "" && len(p.AllowedRuntimes) > 0 && !slices.Contains(p.AllowedRuntimes, p.DefaultRuntime):
		return fmt.Errorf("policy: default_runtime %q is not in allowed_runtimes %v", p.DefaultRuntime, p.AllowedRuntimes)
	}
	for _, pat := range p.AllowedImages {
		if isDigest(pat) {
			continue
		}
		if _, err := path.Match(pat, ""); err != nil || pat == "" {
			return fmt.Errorf("policy: allowed_images entry %q is neither a path.Match pattern nor a sha256:<64 hex> digest", pat)
		}
	}
	if _, err := egress.ParseRules(p.EgressAllow); err != nil {
		return fmt.Errorf("policy: egress_allow: %w", err)
	}
	for _, d := range p.EgressDeny {
		if r, err := egress.ParseRule(d); err != nil || r.Host != "" || r.Port != 0 {
			return fmt.Errorf("policy: egress_deny entry %q is not an address or prefix", d)
		}
	}
	for _, r := range p.AllowedRuntimes {
		if r == "" {
			return errors.New("policy: allowed_runtimes has an empty name")
		}
	}
	return nil
}

// CheckTemplate checks a template (merged with the worker's defaults)
// against the policy alone, without asking the engine: the ceilings the
// policy sets, its runtimes and image names. A worker refuses to start
// with a template that fails it; NewManager checks again against the host.
func (p Policy) CheckTemplate(t Template) error {
	return p.resolve(Host{}).checkConfig(t)
}

// checkConfig is check for a configured template: images allowed by
// digest are only known once loaded, so they are checked at create time.
func (l limits) checkConfig(t Template) error {
	err := l.check(t, nil)
	var e *Error
	if errors.As(err, &e) && e.Limit == "allowed_images" && l.needsDigests() {
		return nil
	}
	return err
}

// egressAllowed reports whether the policy permits egress.
func (p Policy) egressAllowed() bool { return p.AllowEgress == nil || *p.AllowEgress }

func isDigest(s string) bool {
	hexPart, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(hexPart) != 64 {
		return false
	}
	for _, c := range hexPart {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Host is what the engine reports about the machine sandboxes run on.
type Host struct {
	// MemoryBytes is the host's memory (the engine's MemTotal).
	MemoryBytes int64
	// CPUs is the host's CPU count (the engine's NCPU).
	CPUs int
	// Runtimes are the engine's OCI runtimes.
	Runtimes []string
	// DefaultRuntime is the engine's default runtime.
	DefaultRuntime string
	// RemappedIDs: the engine runs containers in a user namespace
	// (userns-remap or rootless), so a file's owner on the host is not its
	// owner in a box.
	RemappedIDs bool
}

// hostOf asks the engine about the host.
func hostOf(ctx context.Context, api DockerAPI) (Host, error) {
	res, err := api.Info(ctx, client.InfoOptions{})
	if err != nil {
		return Host{}, fmt.Errorf("engine info: %w", err)
	}
	return Host{
		MemoryBytes: res.Info.MemTotal, CPUs: res.Info.NCPU,
		Runtimes: sortedKeys(res.Info.Runtimes), DefaultRuntime: res.Info.DefaultRuntime,
		RemappedIDs: remapsIDs(res.Info.SecurityOptions),
	}, nil
}

// limits is a policy resolved against the host: every ceiling set.
type limits struct {
	p      Policy
	memory int64
	cpus   float64
	pids   int64
	ttl    time.Duration
	// engineDefault names the runtime "" stands for.
	engineDefault string
}

// resolve fills the policy's unset ceilings from the host and the
// defaults; a ceiling above what the host has is lowered to it.
func (p Policy) resolve(h Host) limits {
	l := limits{p: p, memory: p.MaxMemoryBytes, cpus: p.MaxCPUs, pids: p.MaxPids, ttl: p.MaxTTL, engineDefault: h.DefaultRuntime}
	if h.MemoryBytes > 0 && (l.memory == 0 || l.memory > h.MemoryBytes) {
		l.memory = h.MemoryBytes
	}
	if h.CPUs > 0 && (l.cpus == 0 || l.cpus > float64(h.CPUs)) {
		l.cpus = float64(h.CPUs)
	}
	if l.pids == 0 {
		l.pids = DefaultMaxPids
	}
	if l.ttl == 0 {
		l.ttl = MaxTTL
	}
	if l.engineDefault == "" && len(h.Runtimes) > 0 {
		l.engineDefault = "runc"
	}
	return l
}

// denied is a policy violation naming the limit it broke.
func denied(limit, format string, args ...any) *Error {
	e := errorf(CodePolicy, format, args...)
	e.Limit = limit
	return e
}

// check refuses a merged template that exceeds a ceiling or uses what the
// policy does not allow. digests lists the image's ID and repository
// digests (only needed when the policy allows images by digest).
func (l limits) check(t Template, digests []string) error {
	switch {
	case l.memory > 0 && t.MemoryBytes > l.memory:
		return denied("max_memory_bytes", "memory %d bytes exceeds this worker's ceiling max_memory_bytes=%d", t.MemoryBytes, l.memory)
	case l.cpus > 0 && t.CPUs > l.cpus:
		return denied("max_cpus", "cpus %g exceeds this worker's ceiling max_cpus=%g", t.CPUs, l.cpus)
	case t.Pids > l.pids:
		return denied("max_pids", "pids %d exceeds this worker's ceiling max_pids=%d", t.Pids, l.pids)
	case t.TTL > l.ttl:
		return denied("max_ttl", "ttl %s exceeds this worker's ceiling max_ttl=%s", t.TTL, l.ttl)
	case l.p.MaxDiskBytes > 0 && t.DiskBytes > l.p.MaxDiskBytes:
		return denied("max_disk_bytes", "disk %d bytes exceeds this worker's ceiling max_disk_bytes=%d", t.DiskBytes, l.p.MaxDiskBytes)
	case t.Network == NetworkEgress && !l.p.egressAllowed():
		return denied("allow_egress", "network egress is not allowed on this worker (allow_egress=false)")
	}
	if rt := l.runtimeName(t.Runtime); len(l.p.AllowedRuntimes) > 0 && rt != "" && !slices.Contains(l.p.AllowedRuntimes, rt) {
		return denied("allowed_runtimes", "runtime %q is not allowed on this worker (allowed_runtimes: %s)", rt, strings.Join(l.p.AllowedRuntimes, ", "))
	}
	if t.Image != "" && !imageAllowed(l.p.AllowedImages, t.Image, digests) {
		return denied("allowed_images", "image %q is not allowed on this worker (allowed_images: %s)", t.Image, strings.Join(l.p.AllowedImages, ", "))
	}
	return nil
}

// runtimeName is the engine's name for runtime ("" is the engine default).
func (l limits) runtimeName(runtime string) string {
	if runtime == "" {
		return l.engineDefault
	}
	return runtime
}

// needsDigests reports whether checking an image needs its digests.
func (l limits) needsDigests() bool { return slices.ContainsFunc(l.p.AllowedImages, isDigest) }

// imageAllowed matches ref (and its digests) against the allow-list.
func imageAllowed(allowed []string, ref string, digests []string) bool {
	if len(allowed) == 0 {
		return true
	}
	names := []string{ref}
	if i := strings.LastIndexAny(ref, ":/@"); i < 0 || ref[i] == '/' {
		names = append(names, ref+":latest")
	}
	if _, d, ok := strings.Cut(ref, "@"); ok {
		digests = append(slices.Clip(digests), d)
	}
	for _, a := range allowed {
		if isDigest(a) {
			for _, d := range digests {
				if d == a || strings.HasSuffix(d, "@"+a) {
					return true
				}
			}
			continue
		}
		for _, n := range names {
			if ok, _ := path.Match(a, n); ok {
				return true
			}
		}
	}
	return false
}

// narrows refuses a request that widens its base (the template it names,
// merged with the worker's defaults): more memory, CPUs, pids, TTL or
// disk, another runtime or image than the template sets, or egress where
// the template has none.
func narrows(req, base Template, template string) error {
	what := "the worker's defaults"
	if template != "" {
		what = fmt.Sprintf("template %q", template)
	}
	switch {
	case req.MemoryBytes > base.MemoryBytes:
		return denied("memory_bytes", "memory_bytes %d exceeds %s (memory_bytes %d); a request may only narrow its template", req.MemoryBytes, what, base.MemoryBytes)
	case req.CPUs > base.CPUs:
		return denied("cpus", "cpus %g exceeds %s (cpus %g); a request may only narrow its template", req.CPUs, what, base.CPUs)
	case req.Pids > base.Pids:
		return denied("pids", "pids %d exceeds %s (pids %d); a request may only narrow its template", req.Pids, what, base.Pids)
	case req.TTL > base.TTL:
		return denied("ttl", "ttl %s exceeds %s (ttl %s); a request may only narrow its template", req.TTL, what, base.TTL)
	case base.DiskBytes > 0 && req.DiskBytes > base.DiskBytes:
		return denied("disk_bytes", "disk_bytes %d exceeds %s (disk_bytes %d); a request may only narrow its template", req.DiskBytes, what, base.DiskBytes)
	case req.Runtime != "" && base.Runtime != "" && req.Runtime != base.Runtime:
		return denied("runtime", "runtime %q differs from %s (%q); a request may not change it", req.Runtime, what, base.Runtime)
	case req.Network == NetworkEgress && base.Network != NetworkEgress:
		return denied("network", "network egress is not allowed by %s (network %s)", what, base.Network)
	case template != "" && req.Image != "" && base.Image != "" && req.Image != base.Image:
		return denied("image", "image %q differs from %s (%q); a request may not change it", req.Image, what, base.Image)
	}
	return nil
}
