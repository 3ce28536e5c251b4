package sandbox

import (
	"fmt"
	"maps"
	"math"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// Paths inside every sandbox container.
const (
	// AgentDir holds the sandbox agent binary (baked into the derived image,
	// owned by root and not writable by the sandbox user).
	AgentDir = "/.plumb"
	// AgentPath is the agent binary.
	AgentPath = AgentDir + "/sandbox-agent"
	// DefaultWorkingDir is the writable workspace volume.
	DefaultWorkingDir = "/workspace"
	// DefaultUser is the unprivileged uid:gid that commands run as and
	// that owns the files they and the file operations create.
	DefaultUser = "1000:1000"
	// AgentUser is the identity of the container's PID 1 and of the
	// agent: container root, holding only AgentCaps, so that the sandbox
	// user's processes can neither signal nor trace them.
	AgentUser = "0:0"
)

// AgentCaps are the only capabilities a sandbox container has: the agent
// needs SETUID and SETGID to start commands as the sandbox user (and to set
// its fsuid/fsgid), and KILL to end them. Commands, exec'd by a non-root
// uid, hold none.
var AgentCaps = []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL"}

// Bounds every sandbox container gets.
const (
	// NofileSoft and NofileHard are the open-files limits.
	NofileSoft = 1024
	NofileHard = 4096
	// OomScoreAdj makes the kernel's OOM killer pick boxes before the
	// worker or anything else on the node. It is the box's agent's value;
	// the agent starts every command at boxagent.CommandOomScoreAdj
	// (1000), so that a box out of memory loses a command before the
	// agent that serves it.
	OomScoreAdj = 900
)

// Network policies.
const (
	NetworkNone   = "none"
	NetworkEgress = "egress"
)

// Label keys set on every container and volume the worker creates.
const (
	LabelSandbox    = "plumb.sandbox"
	LabelWorker     = "plumb.worker"
	LabelImage      = "plumb.image"
	LabelTemplate   = "plumb.template"
	LabelTTL        = "plumb.ttl-seconds"
	LabelMemory     = "plumb.memory-bytes"
	LabelCPUs       = "plumb.cpus"
	LabelPids       = "plumb.pids"
	LabelNetwork    = "plumb.network"
	LabelWorkingDir = "plumb.working-dir"
	LabelCreated    = "plumb.created-at"
	LabelFilesRoot  = "plumb.files-root"
	// LabelUserPrefix prefixes the user's own labels.
	LabelUserPrefix = "plumb.label."
)

// IsOwnLabel reports whether key is one of the label keys the worker sets
// and reads back (re-adoption depends on them), including the user-label
// prefix.
func IsOwnLabel(key string) bool {
	switch key {
	case LabelSandbox, LabelWorker, LabelImage, LabelTemplate, LabelTTL, LabelMemory, LabelCPUs,
		LabelPids, LabelNetwork, LabelWorkingDir, LabelCreated, LabelFilesRoot, LabelDerivedFrom, LabelTenant, LabelPool, LabelEgressInject,
		LabelMounts, LabelVolume, LabelVolumeName, LabelVolumeBytes:
		return true
	}
	return strings.HasPrefix(key, LabelUserPrefix)
}

// Template is a named set of sandbox settings from the worker config; a
// create request overrides what it sets.
type Template struct {
	// Image must exist locally; nothing is pulled.
	Image string `yaml:"image"`
	// WorkingDir is the writable workspace (default /workspace): it must be
	// /workspace, a directory under it, or a directory under /home (see
	// validWorkingDir).
	WorkingDir string `yaml:"working_dir"`
	// CPUs is the CPU quota in cores.
	CPUs float64 `yaml:"cpus"`
	// MemoryBytes is the memory limit; swap is set equal (no swap).
	MemoryBytes int64 `yaml:"memory_bytes"`
	// Pids bounds the number of processes.
	Pids int64 `yaml:"pids"`
	// Network is "none" (default) or "egress".
	Network string `yaml:"network"`
	// DiskBytes is the workspace disk limit (0 = none; the policy's
	// max_disk_bytes when it sets one).
	DiskBytes int64 `yaml:"disk_bytes"`
	// Runtime is the OCI runtime ("" = engine default, or "runsc").
	Runtime string `yaml:"runtime"`
	// TTL is the time to live without activity.
	TTL time.Duration `yaml:"ttl"`
	// Env is the base environment.
	Env map[string]string `yaml:"env"`
	// FilesRoot is the directory file operations see as "/": "/" (the
	// default: file paths and shell paths are the same strings) or
	// WorkingDir (file operations confined to the workspace).
	FilesRoot string `yaml:"files_root"`
	// IdleSuspendAfter pauses the box after this long without an
	// operation (0 = never): no CPU, memory kept; the next call unpauses
	// it (docs/workspaces.md).
	IdleSuspendAfter time.Duration `yaml:"idle_suspend_after" json:",omitempty"`
	// HibernateAfter hibernates the box after this long without an
	// operation (0 = never): its workspace is snapshotted and its
	// container removed; the next call recreates it from the snapshot.
	// It needs a snapshot store.
	HibernateAfter time.Duration `yaml:"hibernate_after" json:",omitempty"`
}

// DefaultTemplate holds the worker's defaults for unset template fields.
var DefaultTemplate = Template{
	WorkingDir:  DefaultWorkingDir,
	CPUs:        1,
	MemoryBytes: 512 << 20,
	Pids:        256,
	Network:     NetworkNone,
	TTL:         30 * time.Minute,
	FilesRoot:   "/",
}

// Merge returns t with every unset field taken from base.
func (t Template) Merge(base Template) Template {
	if t.Image == "" {
		t.Image = base.Image
	}
	if t.WorkingDir == "" {
		t.WorkingDir = base.WorkingDir
	}
	if t.CPUs == 0 {
		t.CPUs = base.CPUs
	}
	if t.MemoryBytes == 0 {
		t.MemoryBytes = base.MemoryBytes
	}
	if t.Pids == 0 {
		t.Pids = base.Pids
	}
	if t.DiskBytes == 0 {
		t.DiskBytes = base.DiskBytes
	}
	if t.Network == "" {
		t.Network = base.Network
	}
	if t.Runtime == "" {
		t.Runtime = base.Runtime
	}
	if t.TTL == 0 {
		t.TTL = base.TTL
	}
	if t.FilesRoot == "" {
		t.FilesRoot = base.FilesRoot
	}
	if t.IdleSuspendAfter == 0 {
		t.IdleSuspendAfter = base.IdleSuspendAfter
	}
	if t.HibernateAfter == 0 {
		t.HibernateAfter = base.HibernateAfter
	}
	env := maps.Clone(base.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, t.Env)
	t.Env = env
	return t
}

var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// labelKey allows the characters Docker and Kubernetes labels share.
var labelKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$`)

// validate checks a fully merged template.
func (t Template) validate() error {
	switch {
	case t.Image == "":
		return invalidField("image", "no image: set image or a template that has one")
	case !(t.CPUs >= 0.01 && t.CPUs <= 64): // also refuses NaN
		return invalidField("cpus", "cpus %g out of range 0.01..64", t.CPUs)
	case t.MemoryBytes < 16<<20:
		return invalidField("memory_bytes", "memory %d bytes is below the 16 MiB minimum", t.MemoryBytes)
	case t.Pids < 16 || t.Pids > 1<<20:
		return invalidField("pids", "pids %d out of range 16..1048576", t.Pids)
	case t.Network != NetworkNone && t.Network != NetworkEgress:
		return invalidField("network", "network %q: want none or egress", t.Network)
	case t.DiskBytes < 0 || t.DiskBytes > MaxDiskBytes:
		return invalidField("disk_bytes", "disk %d bytes out of range 0..%d", t.DiskBytes, int64(MaxDiskBytes))
	case t.DiskBytes > 0 && t.DiskBytes < MinDiskBytes:
		return invalidField("disk_bytes", "disk %d bytes is below the 1 MiB minimum (a workspace file system's)", t.DiskBytes)
	case t.TTL < time.Second || t.TTL > MaxTTL:
		return invalidField("ttl", "ttl %s out of range 1s..168h", t.TTL)
	case !validWorkingDir(t.WorkingDir):
		return invalidField("working_dir", "working_dir %q must be a clean absolute path: %s, a directory under it, or a directory under %s", t.WorkingDir, DefaultWorkingDir, HomeDir)
	case t.FilesRoot != "/" && t.FilesRoot != t.WorkingDir:
		return invalidField("files_root", "files_root %q: want / or the working dir %s", t.FilesRoot, t.WorkingDir)
	}
	for k, v := range t.Env {
		if !envKey.MatchString(k) || strings.ContainsRune(v, 0) {
			return invalidField("env", "env %q: keys must match %s and values must not contain NUL", k, envKey)
		}
		if k == agentproto.OwnEnv {
			return invalidField("env", "env %q is reserved for the sandbox agent", k)
		}
	}
	return nil
}

// checkNumbers refuses a request's CPUs that are not a finite number
// before anything compares them: NaN compares false with every bound, and
// an infinity is malformed, not merely over a ceiling.
func (t Template) checkNumbers() error {
	if math.IsNaN(t.CPUs) || math.IsInf(t.CPUs, 0) {
		return invalidField("cpus", "cpus %g is not a finite number", t.CPUs)
	}
	return nil
}

// HomeDir is the directory under which a working dir may also live.
const HomeDir = "/home"

// validWorkingDir accepts DefaultWorkingDir, a directory under it, or a
// directory under HomeDir, spelled cleanly. The workspace volume is mounted
// there and the box writes into it, so anywhere else it would shadow what
// the image runs (/bin, /usr/bin, /etc), the box's tmpfs (/tmp), the
// kernel's file systems (/proc, /dev, /sys/fs/cgroup) or the agent
// (AgentDir). A path that cleaning would change is refused outright
// ("//workspace", "/home/../etc"; labels, mounts and the agent must all see
// one spelling).
func validWorkingDir(dir string) bool {
	if path.Clean(dir) != dir || strings.ContainsRune(dir, 0) {
		return false
	}
	return dir == DefaultWorkingDir || strings.HasPrefix(dir, DefaultWorkingDir+"/") || strings.HasPrefix(dir, HomeDir+"/")
}

// Home is the sandbox's working dir as a virtual file path: the working
// dir itself when file operations see the whole container, "/" when they
// are rooted at the working dir.
func (t Template) Home() string {
	if t.FilesRoot == t.WorkingDir {
		return "/"
	}
	return t.WorkingDir
}

// containerSpec builds the hardened container configuration. Every
// sandbox gets these settings; nothing a request says can weaken them
// (no privileged mode, no capabilities, no host namespaces, no host paths).
// The one exception is Config.Unhardened, for benchmarks only, which the
// manager applies with unharden after this.
//
// Every image field that makes the engine run code is overridden:
// Entrypoint, Cmd, User, StopSignal and Healthcheck (ONBUILD and SHELL only
// apply to builds).
//
// PID 1 and the agent run as AgentUser with only AgentCaps; commands run as
// the sandbox user (the agent's --uid/--gid). The engine keeps no log of
// PID 1's output (LogConfig none: box output cannot fill the engine's
// disk), open files are bounded by ulimit, and OomScoreAdj puts boxes first
// in line for the OOM killer.
func containerSpec(id, worker, image, volume string, t Template, labels map[string]string) (*container.Config, *container.HostConfig) {
	env := make([]string, 0, len(t.Env))
	for k, v := range t.Env {
		env = append(env, k+"="+v)
	}
	network := container.NetworkMode("none")
	if t.Network == NetworkEgress {
		// Its own internal network, whose only other member is its
		// egress proxy (egress.go).
		network = container.NetworkMode(egressNetwork(id))
		env = append(env, egressEnv()...)
	}
	tmpSize := min(t.MemoryBytes/4, 256<<20)
	pids := t.Pids
	noInit := false
	cfg := &container.Config{
		Image:      image,
		User:       AgentUser,
		Entrypoint: []string{AgentPath},
		Cmd:        []string{"init"},
		WorkingDir: t.WorkingDir,
		Env:        env,
		Labels:     labels,
		Hostname:   "sandbox",
		StopSignal: "SIGTERM",
		// The image's HEALTHCHECK would run as User (container root, with
		// AgentCaps) under the tenant-set environment: box code could
		// plant the command it names. No health check runs at all.
		Healthcheck: &container.HealthConfig{Test: []string{"NONE"}},
	}
	hc := &container.HostConfig{
		NetworkMode:    network,
		CapDrop:        []string{"ALL"},
		CapAdd:         append([]string(nil), AgentCaps...),
		LogConfig:      container.LogConfig{Type: "none"},
		OomScoreAdj:    OomScoreAdj,
		SecurityOpt:    []string{"no-new-privileges:true"},
		ReadonlyRootfs: true,
		Privileged:     false,
		IpcMode:        container.IPCModePrivate,
		Runtime:        t.Runtime,
		Init:           &noInit, // the agent's init mode is PID 1 and reaps orphans
		Tmpfs:          map[string]string{"/tmp": fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", tmpSize)},
		Mounts: []mount.Mount{{
			Type:   mount.TypeVolume,
			Source: volume,
			Target: t.WorkingDir,
			// Should the engine ever have to create the volume itself,
			// it carries the labels that let the start-up sweep find it.
			VolumeOptions: &mount.VolumeOptions{Labels: labels},
		}},
		Resources: container.Resources{
			Memory:     t.MemoryBytes,
			MemorySwap: t.MemoryBytes,
			NanoCPUs:   int64(t.CPUs * 1e9),
			PidsLimit:  &pids,
			// No nproc ulimit: RLIMIT_NPROC counts every process of the
			// uid on the host (all boxes share the sandbox uid), so it
			// would let one box starve the others; the pids cgroup above
			// is the per-box bound.
			Ulimits: []*container.Ulimit{{Name: "nofile", Soft: NofileSoft, Hard: NofileHard}},
		},
	}
	return cfg, hc
}

// unharden undoes containerSpec's hardening for Config.Unhardened
// (benchmarks only): the engine's default capabilities, no
// no-new-privileges, seccomp unconfined, a writable root and no ulimits.
// Resource limits (memory, CPUs, pids), the network and the mounts stay.
func unharden(hc *container.HostConfig) {
	hc.CapDrop, hc.CapAdd = nil, nil
	hc.SecurityOpt = []string{"seccomp=unconfined"}
	hc.ReadonlyRootfs = false
	hc.Ulimits = nil
}

// serveAsPID1 makes the agent the container's PID 1 (Config.Channel
// ChannelStdio): `sandbox-agent serve --pid1` with serve's flags (serve is
// an agentCmd), on a stdin that stays open for the worker's attach before
// the start and closes when that attach ends (StdinOnce): the box's first
// channel, without an exec.
func serveAsPID1(cfg *container.Config, serve []string) {
	cfg.Cmd = append([]string{"serve", "--pid1"}, serve[2:]...) // serve[0:2]: AgentPath serve
	cfg.OpenStdin, cfg.StdinOnce = true, true
	cfg.AttachStdin, cfg.AttachStdout, cfg.AttachStderr = true, true, true
}

// agentEnv is what a box's environment carries for its agent alone:
// GOMAXPROCS, the box's CPU limit rounded up, where that is below the
// CPUs the box sees (the host's), named by agentproto.OwnEnv so that the
// agent removes both from what its commands inherit. The agent's Go
// runtime then starts with the processors the box's quota gives instead
// of the host's, and sandbox-agent's fitProcs has nothing to change:
// no second thread woken while the agent starts, one thread fewer for
// its identity change to stop (under gVisor about 2 ms sooner to the
// first command, docs/benchmarks.md). Nothing is set where the tenant's
// environment or the image's sets GOMAXPROCS: commands keep that value.
func agentEnv(t Template, hostCPUs int, imageEnv []string) []string {
	const key = "GOMAXPROCS"
	n := int(math.Ceil(t.CPUs))
	if _, set := t.Env[key]; set || n < 1 || n >= hostCPUs {
		return nil
	}
	for _, kv := range imageEnv {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			return nil
		}
	}
	return []string{key + "=" + strconv.Itoa(n), agentproto.OwnEnv + "=" + key}
}

// agentCmd is the command line of `sandbox-agent serve`: with the sandbox
// user's uid and gid, or without them when unhardened (benchmarks only),
// so that the agent keeps root's identity.
func agentCmd(root, workspace string, uid, gid int, unhardened bool) []string {
	cmd := []string{AgentPath, "serve", "--root", root, "--workspace", workspace}
	if unhardened {
		return cmd
	}
	return append(cmd, "--uid", strconv.Itoa(uid), "--gid", strconv.Itoa(gid))
}

// sandboxLabels are the labels that let a restarted worker re-adopt the
// container.
func sandboxLabels(id, worker, templateName string, t Template, created time.Time, user map[string]string) map[string]string {
	l := map[string]string{
		LabelSandbox:    id,
		LabelWorker:     worker,
		LabelImage:      t.Image,
		LabelTemplate:   templateName,
		LabelTTL:        strconv.FormatInt(int64(t.TTL/time.Second), 10),
		LabelMemory:     strconv.FormatInt(t.MemoryBytes, 10),
		LabelCPUs:       strconv.FormatFloat(t.CPUs, 'g', -1, 64),
		LabelPids:       strconv.FormatInt(t.Pids, 10),
		LabelNetwork:    t.Network,
		LabelWorkingDir: t.WorkingDir,
		LabelCreated:    created.UTC().Format(time.RFC3339Nano),
		LabelFilesRoot:  t.FilesRoot,
	}
	for k, v := range user {
		l[LabelUserPrefix+k] = v
	}
	return l
}

// templateFromLabels recovers the settings of an adopted container.
func templateFromLabels(l map[string]string) (Template, time.Time, map[string]string, error) {
	var t Template
	var err error
	parse := func(key string, f func(string) error) {
		if err == nil {
			if e := f(l[key]); e != nil {
				err = fmt.Errorf("label %s=%q: %w", key, l[key], e)
			}
		}
	}
	t.Image = l[LabelImage]
	t.Network = l[LabelNetwork]
	t.WorkingDir = l[LabelWorkingDir]
	t.FilesRoot = l[LabelFilesRoot]
	parse(LabelTTL, func(s string) error {
		n, e := strconv.ParseInt(s, 10, 64)
		t.TTL = time.Duration(n) * time.Second
		return e
	})
	parse(LabelMemory, func(s string) (e error) { t.MemoryBytes, e = strconv.ParseInt(s, 10, 64); return })
	parse(LabelCPUs, func(s string) (e error) { t.CPUs, e = strconv.ParseFloat(s, 64); return })
	parse(LabelPids, func(s string) (e error) { t.Pids, e = strconv.ParseInt(s, 10, 64); return })
	var created time.Time
	parse(LabelCreated, func(s string) (e error) { created, e = time.Parse(time.RFC3339Nano, s); return })
	user := map[string]string{}
	for k, v := range l {
		if rest, ok := strings.CutPrefix(k, LabelUserPrefix); ok {
			user[rest] = v
		}
	}
	return t, created, user, err
}
