package sandbox

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
	"go.uber.org/zap"
)

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
	if err := checkMounts(spec.Volumes, t); err != nil {
		return Info{}, err
	}
	mounts, unpin, err := m.pinMounts(tenantOf(spec.Tenant), spec.Volumes)
	if err != nil {
		return Info{}, err
	}
	defer unpin()
	spec.Volumes = mounts
	if spec.Snapshot != "" {
		// Its manifest is verified before anything is created, its chunks
		// while they stream into the box, before it starts: a corrupt
		// snapshot leaves nothing behind (start removes the box).
		if spec.restore, err = m.streamRestore(ctx, spec.Tenant, spec.Snapshot, t); err != nil {
			return Info{}, err
		}
	}
	var claimed *sandbox
	if len(spec.Inject) == 0 && spec.Snapshot == "" && len(spec.Volumes) == 0 { // a pooled box has a proxy without them, a workspace of its own, and no volumes
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

// engineTimeout bounds the engine calls of one create.
const engineTimeout = 2 * time.Minute

// start creates sandbox id's volume and container, starts it and greets its
// agent. The engine calls do not take the caller's cancellation: a call
// cut short on the client side may still complete in the engine (a
// container created after its volume was removed re-creates that volume),
// so each one runs to its end, and the caller's cancellation is checked
// between them. Whatever fails or is cancelled, start removes
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
	image, imageEnv, err := m.images.derive(ectx, t.Image, m.cfg.User, t.WorkingDir)
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
		if len(spec.Volumes) > 0 {
			labels[LabelMounts] = mountsLabel(spec.Volumes)
		}
	} else {
		labels[LabelPool] = spec.pool // its owner is recorded when claimed
	}
	volume := volumeName(id)
	sb := &sandbox{member: spec.pool != "", image: image, info: Info{
		ID: id, Worker: m.cfg.Worker, State: StateRunning, Template: spec.Template, Tenant: tenantOf(spec.Tenant),
		Settings: t, Labels: maps.Clone(spec.Labels), CreatedAt: created, LastUsedAt: created, ExpiresAt: created.Add(t.TTL),
		Snapshot: spec.Snapshot, Volumes: spec.Volumes,
	}}
	defer func() {
		if err != nil {
			m.discard(ctx, sb)
		}
	}()
	// A plain workspace volume is made by the container create (its
	// mount's VolumeOptions carry the labels): one engine call less on
	// the cold path. One on a disk of its own (driver options) or filled
	// from a snapshot (through its host directory) is made first.
	var vol client.VolumeCreateResult
	if spec.restore != nil || m.kernelDisk(t) {
		vopts := client.VolumeCreateOptions{Name: volume, Labels: labels}
		if m.kernelDisk(t) {
			if vopts.DriverOpts, err = m.attachDisk(ectx, id, t.DiskBytes, ""); err != nil {
				return nil, err
			}
			vopts.Driver, vopts.Labels = "local", maps.Clone(labels)
			vopts.Labels[LabelDisk] = id
		}
		if vol, err = m.api.VolumeCreate(ectx, vopts); err != nil {
			if vopts.DriverOpts != nil {
				m.removeDisk(ctx, id)
			}
			return nil, fmt.Errorf("create workspace volume: %w", err)
		}
		if err := stopped(); err != nil {
			return nil, err
		}
	}
	// The workspace is filled before any box code runs: by this worker
	// into the volume's host directory from here on, while the box is
	// made (and under runc while it starts: its agent serves no request
	// before start returns), or through the engine before the start.
	var hf *hostFill
	if spec.restore != nil {
		if dir := m.hostFillDir(vol.Volume, t); dir != "" {
			uid, gid, _ := parseUser(m.cfg.User)
			if hf, err = startHostFill(ectx, dir, spec.restore, uid, gid); err != nil {
				// Not this worker's to write (no CAP_CHOWN, say): the
				// engine copies the workspace in.
				m.lg.Warn("the host fill cannot prepare the workspace volume; copying through the engine", zap.String("sandbox-id", id), zap.Error(err))
			} else {
				defer hf.stop()
			}
		}
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
	if hf != nil {
		// The volume holds exactly the snapshot: the engine copies
		// nothing of the image's working directory into it.
		hc.Mounts[0].VolumeOptions.NoCopy = true
	}
	if inj != nil {
		cfg.Env = append(cfg.Env, injectEnv(t)...)
	}
	cfg.Env = append(cfg.Env, agentEnv(t, m.hostCPUs, imageEnv)...)
	if dns.IsValid() {
		// The box's only DNS server leads nowhere (egressDNS).
		hc.DNS = []netip.Addr{dns}
	}
	if m.cfg.Unhardened {
		unharden(hc)
	}
	stdio := m.cfg.Channel == ChannelStdio
	var first *channel // the stdio channel
	if stdio {
		uid, gid, err := parseUser(m.cfg.User)
		if err != nil {
			return nil, err
		}
		root := cmpOr(t.FilesRoot, "/")
		serveAsPID1(cfg, agentCmd(root, t.WorkingDir, uid, gid, m.cfg.Unhardened))
	}
	if len(spec.Volumes) > 0 {
		if err := m.checkVolumesExist(ectx, spec.Volumes); err != nil {
			return nil, err
		}
		hc.Mounts = append(hc.Mounts, volumeMounts(spec.Volumes)...)
	}
	c, err := m.api.ContainerCreate(ectx, client.ContainerCreateOptions{Name: id, Config: cfg, HostConfig: hc})
	if cerrdefs.IsNotFound(err) && m.images.forget(image) {
		// The derived image was removed behind the worker (an image
		// prune): derive it again, once.
		if image, _, err = m.images.derive(ectx, t.Image, m.cfg.User, t.WorkingDir); err == nil {
			cfg.Image, sb.image = image, image
			c, err = m.api.ContainerCreate(ectx, client.ContainerCreateOptions{Name: id, Config: cfg, HostConfig: hc})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	sb.info.ContainerID = c.ID
	if err := stopped(); err != nil {
		return nil, err
	}
	switch {
	case hf != nil && !m.overlapsStart(t, spec):
		if err := hf.wait(); err != nil {
			return nil, err
		}
	case hf == nil && spec.restore != nil:
		if err := m.fill(ectx, c.ID, t, spec.restore); err != nil {
			return nil, err
		}
	}
	if stdio {
		// The first channel is the container's own stdio, attached
		// before the start: its PID 1 is the agent, so greeting the box
		// costs no exec (later channels are execs, see dial).
		att, err := m.api.ContainerAttach(ectx, c.ID, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
		if err != nil {
			return nil, fmt.Errorf("attach sandbox agent: %w", err)
		}
		first = m.newAgentChannel(sb, attachStream(att.HijackedResponse, &logWriter{lg: m.lg, max: 64 << 10}), true)
		sb.mu.Lock()
		sb.ch = first
		sb.mu.Unlock()
	}
	var sopts client.ContainerStartOptions
	if spec.memory != nil {
		// A wake that keeps the box's processes: the engine starts the
		// container from its checkpoint (memory.go).
		dir, err := m.placeMemory(ectx, m.cfg.Snapshots, sb.info.Tenant, t, spec.memory, c.ID)
		if dir != "" {
			// The engine has read it once the start returns; a copy of a
			// box's memory stays on disk no longer.
			defer os.RemoveAll(dir)
		}
		if err != nil {
			return nil, fmt.Errorf("place the box's memory image: %w", err)
		}
		sopts.CheckpointID = memoryCheckpoint
	}
	if _, err := m.api.ContainerStart(ectx, c.ID, sopts); err != nil {
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
	if hf != nil {
		if err := hf.wait(); err != nil {
			return nil, err
		}
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
	if first != nil {
		first.armed.Store(true)
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
	if err := agentproto.UnmarshalResult(raw, &h); err != nil || h.Version != agentproto.Version {
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
// engine's default). A runtime the engine listed within runtimesFresh
// passes without asking again (the engine's /info costs several
// milliseconds, on every create that names a runtime); any other is
// checked against the engine's list now, so a runtime installed while the
// worker runs is usable at once.
func (m *Manager) checkRuntime(ctx context.Context, runtime string) error {
	if runtime == "" || m.known.has(runtime, m.now()) {
		return nil
	}
	have, err := m.Runtimes(ctx)
	if err != nil {
		return err
	}
	m.known.set(have, m.now())
	if !slices.Contains(have, runtime) {
		return errorf(CodeInvalid, "runtime %q is not available on worker %s (it has: %s)", runtime, m.cfg.Worker, strings.Join(have, ", "))
	}
	return nil
}

// runtimesFresh is how long checkRuntime trusts the engine's list: a
// runtime removed from the engine passes the check for at most this long,
// and the engine itself then refuses the create.
const runtimesFresh = 30 * time.Second

// knownRuntimes is the engine's runtimes as last listed, and when.
type knownRuntimes struct {
	mu    sync.Mutex
	names []string
	at    time.Time
}

// has reports whether name was listed less than runtimesFresh before now.
func (k *knownRuntimes) has(name string, now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return now.Sub(k.at) < runtimesFresh && slices.Contains(k.names, name)
}

// set records the engine's list at now.
func (k *knownRuntimes) set(names []string, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.names, k.at = names, now
}

// discard tears down a box that never served: it closes its channel (a
// dial still in flight installs none: the box is deleting), then removes
// its container — by its id, or by name, which is the box's id, while the
// container's id is not known yet — with its workspace volume, and its
// egress network.
func (m *Manager) discard(ctx context.Context, sb *sandbox) {
	sb.mu.Lock()
	sb.info.State = StateDeleting
	if sb.ch != nil {
		sb.ch.close()
	}
	id, cid, network := sb.info.ID, cmpOr(sb.info.ContainerID, sb.info.ID), sb.info.Settings.Network
	sb.mu.Unlock()
	_ = m.removeContainer(ctx, cid, volumeName(id))
	if network == NetworkEgress {
		m.removeEgress(ctx, id)
	}
	m.forgetClaim(id) // a pool box a fork claimed
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
