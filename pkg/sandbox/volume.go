package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
)

// Named volumes (docs/workspaces.md, "Named volumes"; the threat analysis
// is docs/security.md, "Named volumes and forks"): a file system of a
// fixed size that a tenant creates on a worker and mounts into its boxes,
// read-write or read-only, so data outlives any one box. A volume is the
// same kernel-bounded ext2 image a workspace with a disk limit gets
// (diskfs.go), its root owned by the sandbox user, mounted nosuid,nodev.
// The worker never reads a volume's files.

// Labels of a volume's engine volume, and of a sandbox's container.
const (
	// LabelVolume is a named volume's id, on its engine volume.
	LabelVolume = "plumb.volume"
	// LabelVolumeName is its name.
	LabelVolumeName = "plumb.volume-name"
	// LabelVolumeBytes is its size.
	LabelVolumeBytes = "plumb.volume-bytes"
	// LabelMounts records a sandbox container's volume mounts (JSON), so a
	// restarted worker knows which volumes its adopted boxes use.
	LabelMounts = "plumb.volumes"
)

// Bounds of named volumes.
const (
	// MaxVolumeMounts is how many volumes one box may mount.
	MaxVolumeMounts = 8
	// DefaultVolumeBytes is the size of a volume created without one (or
	// the policy's max_disk when that is smaller).
	DefaultVolumeBytes = 1 << 30
	// MaxMountPath bounds a mount path's length.
	MaxMountPath = 256
	// volumeEnginePrefix starts the name of a volume's engine volume.
	volumeEnginePrefix = "plumb-vol-"
	// volumeMountOptions are the mount options of every volume: files
	// box code leaves there carry no setuid, setgid or device authority
	// into another box.
	volumeMountOptions = "nosuid,nodev"
)

// VolumeConfig configures named volumes.
type VolumeConfig struct {
	// PerTenantBytes caps the sum of the sizes of one tenant's volumes on
	// the worker (0 = unlimited).
	PerTenantBytes int64
}

// VolumeMount mounts a named volume into a box. In a request Name is the
// volume's name or its id; once resolved ID and Name are both set.
type VolumeMount struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	MountPath string `json:"path"`
	ReadOnly  bool   `json:"ro,omitempty"`
}

// Volume describes a named volume.
type Volume struct {
	ID        string
	Name      string
	Worker    string
	Tenant    string
	SizeBytes int64
	CreatedAt time.Time
	// Sandboxes are the ids of the sandboxes that mount it, sorted.
	Sandboxes []string
}

// volumeRec is the manager's record of a volume; guarded by Manager.mu.
type volumeRec struct {
	info Volume
	// busy counts creates in flight that mount it (and the volume's own
	// create): it cannot be deleted then.
	busy int
	// ready: its engine volume exists (false while it is being created).
	ready bool
	// deleting: a delete is under way; nothing may mount it.
	deleting bool
}

// VolumeEngineName is the engine volume of named volume id.
func VolumeEngineName(id string) string { return volumeEnginePrefix + id }

var volumeNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// ValidVolumeName reports whether name can name a volume: 1 to 63
// lower-case letters, digits, '.', '_' and '-', starting with a letter or
// digit, and not starting with "vol-" (which would read as a volume id).
func ValidVolumeName(name string) bool {
	return volumeNameRE.MatchString(name) && !strings.HasPrefix(name, "vol-")
}

// systemDirs are the directories (and everything under them) a volume may
// not be mounted on: it would shadow what the box runs, the kernel's file
// systems, its tmpfs or the agent.
var systemDirs = []string{
	"/proc", "/sys", "/dev", "/etc", "/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32",
	"/boot", "/run", "/var", "/tmp", "/root", AgentDir,
}

var mountPathRE = regexp.MustCompile(`^[A-Za-z0-9._@+/-]+$`)

// ValidMountPath checks where a volume is mounted in a box whose working
// directory is workingDir: an absolute, clean path of at most MaxMountPath
// bytes (letters, digits and . _ @ + - only), not "/", not on or under a
// system directory, and neither on, under nor above the working directory
// (snapshots read the working directory; a volume inside it would be
// captured and restored over). This is the one place mount paths are
// validated.
func ValidMountPath(p, workingDir string) error {
	switch {
	case p == "":
		return fmt.Errorf("mount path is empty")
	case len(p) > MaxMountPath:
		return fmt.Errorf("mount path is %d bytes, over %d", len(p), MaxMountPath)
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("mount path %q is not absolute", p)
	case !mountPathRE.MatchString(p):
		return fmt.Errorf("mount path %q: use letters, digits, '/', '.', '_', '@', '+' and '-' only", p)
	case path.Clean(p) != p:
		return fmt.Errorf("mount path %q is not clean (no '..', '.', '//' or trailing '/')", p)
	case p == "/":
		return fmt.Errorf("mount path / would shadow the whole box")
	}
	for _, d := range systemDirs {
		if within(p, d) {
			return fmt.Errorf("mount path %q is on or under the system directory %s", p, d)
		}
	}
	if within(p, workingDir) || within(workingDir, p) {
		return fmt.Errorf("mount path %q is on, under or above the working directory %s", p, workingDir)
	}
	return nil
}

// within reports whether p is dir or under it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/") || dir == "/"
}

// checkMounts validates a create's mounts for a box of template t: their
// number, each path, no two on nested paths, each volume once.
func checkMounts(mounts []VolumeMount, t Template) error {
	if len(mounts) > MaxVolumeMounts {
		return invalidField("volumes", "%d volume mounts, over the %d a box may have", len(mounts), MaxVolumeMounts)
	}
	for i, vm := range mounts {
		if vm.Name == "" {
			return invalidField(fmt.Sprintf("volumes[%d].name", i), "volume mount %d names no volume", i)
		}
		if err := ValidMountPath(vm.MountPath, t.WorkingDir); err != nil {
			return invalidField(fmt.Sprintf("volumes[%d].mount_path", i), "%s", err.Error())
		}
		for j, o := range mounts[:i] {
			if within(vm.MountPath, o.MountPath) || within(o.MountPath, vm.MountPath) {
				return invalidField(fmt.Sprintf("volumes[%d].mount_path", i), "mount path %q is on, under or above mount %d's %q", vm.MountPath, j, o.MountPath)
			}
			if vm.Name == o.Name {
				return invalidField(fmt.Sprintf("volumes[%d].name", i), "volume %q is mounted twice", vm.Name)
			}
		}
	}
	return nil
}

// findVolume returns tenant's ready volume named by name or id; m.mu is
// held. Another tenant's volume is not found.
func (m *Manager) findVolume(tenant, ref string) *volumeRec {
	usable := func(v *volumeRec) bool { return v.ready && !v.deleting && v.info.Tenant == tenant }
	if v := m.vols[ref]; v != nil {
		if usable(v) {
			return v
		}
		return nil
	}
	for _, v := range m.vols {
		if v.info.Name == ref && usable(v) {
			return v
		}
	}
	return nil
}

func (m *Manager) volumeNotFound(ref string) *Error {
	return errorf(CodeVolumeNotFound, "volume %s not found on worker %s", ref, m.cfg.Worker)
}

// pinMounts resolves a create's mounts (checked by checkMounts) to
// tenant's volumes and pins them (none can be deleted) until unpin is
// called; the created box's record keeps them in use after that.
func (m *Manager) pinMounts(tenant string, mounts []VolumeMount) (_ []VolumeMount, unpin func(), err error) {
	if len(mounts) == 0 {
		return nil, func() {}, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]VolumeMount, len(mounts))
	for i, vm := range mounts {
		v := m.findVolume(tenant, vm.Name)
		if v == nil {
			e := m.volumeNotFound(vm.Name)
			e.Field = fmt.Sprintf("volumes[%d].name", i)
			return nil, nil, e
		}
		if slices.ContainsFunc(out[:i], func(o VolumeMount) bool { return o.ID == v.info.ID }) {
			return nil, nil, invalidField(fmt.Sprintf("volumes[%d].name", i), "volume %q is mounted twice", vm.Name)
		}
		out[i] = VolumeMount{ID: v.info.ID, Name: v.info.Name, MountPath: vm.MountPath, ReadOnly: vm.ReadOnly}
	}
	for _, vm := range out {
		m.vols[vm.ID].busy++
	}
	return out, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, vm := range out {
			if v := m.vols[vm.ID]; v != nil {
				v.busy--
			}
		}
	}, nil
}

// volumeMounts are the engine mounts of a box's volumes: never copied
// into from the image (NoCopy: the engine would copy the image's files in
// and chown the root), read-only where asked.
func volumeMounts(mounts []VolumeMount) []mount.Mount {
	out := make([]mount.Mount, 0, len(mounts))
	for _, vm := range mounts {
		out = append(out, mount.Mount{
			Type: mount.TypeVolume, Source: VolumeEngineName(vm.ID), Target: vm.MountPath, ReadOnly: vm.ReadOnly,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true},
		})
	}
	return out
}

// checkVolumesExist makes sure every mounted volume's engine volume
// exists: the engine would otherwise create an empty, unbounded one for
// the mount.
func (m *Manager) checkVolumesExist(ctx context.Context, mounts []VolumeMount) error {
	for _, vm := range mounts {
		if _, err := m.api.VolumeInspect(ctx, VolumeEngineName(vm.ID), client.VolumeInspectOptions{}); err != nil {
			if cerrdefs.IsNotFound(err) {
				return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("volume %s (%s) is missing from the engine of worker %s", vm.Name, vm.ID, m.cfg.Worker), Err: err}
			}
			return fmt.Errorf("inspect volume %s: %w", vm.ID, err)
		}
	}
	return nil
}

func mountsLabel(mounts []VolumeMount) string {
	b, _ := json.Marshal(mounts)
	return string(b)
}

func mountsFromLabel(s string) ([]VolumeMount, error) {
	if s == "" {
		return nil, nil
	}
	var out []VolumeMount
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("label %s: %w", LabelMounts, err)
	}
	return out, nil
}

// CreateVolume creates a named volume of tenant on this worker: sizeBytes
// (0 = DefaultVolumeBytes, or the policy's max_disk when smaller) of a
// file system of its own whose root belongs to the sandbox user.
func (m *Manager) CreateVolume(ctx context.Context, tenant, name string, sizeBytes int64) (Volume, error) {
	tenant = tenantOf(tenant)
	if m.cfg.DiskEnforcement == DiskWatchdog {
		return Volume{}, errorf(CodeVolumesUnsupported, "worker %s cannot bound a volume's size (its disk enforcement is the watchdog): it makes no volumes", m.cfg.Worker)
	}
	if !ValidVolumeName(name) {
		return Volume{}, invalidField("name", "volume name %q: use 1 to 63 lower-case letters, digits, '.', '_' and '-', starting with a letter or digit and not with \"vol-\"", name)
	}
	maxDisk := m.cfg.Policy.MaxDiskBytes
	if sizeBytes == 0 {
		sizeBytes = DefaultVolumeBytes
		if maxDisk > 0 {
			sizeBytes = min(sizeBytes, maxDisk)
		}
	}
	switch {
	case sizeBytes < MinDiskBytes || sizeBytes > MaxDiskBytes:
		return Volume{}, invalidField("size_bytes", "volume size %d bytes out of range %d..%d", sizeBytes, int64(MinDiskBytes), int64(MaxDiskBytes))
	case maxDisk > 0 && sizeBytes > maxDisk:
		return Volume{}, denied("max_disk_bytes", "volume size %d bytes exceeds this worker's ceiling max_disk_bytes=%d", sizeBytes, maxDisk)
	}
	id := sandboxapi.NewVolumeID(m.cfg.Worker)
	rec := &volumeRec{info: Volume{ID: id, Name: name, Worker: m.cfg.Worker, Tenant: tenant, SizeBytes: sizeBytes, CreatedAt: m.now()}, busy: 1}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return Volume{}, errorf(CodeShuttingDown, "worker %s is shutting down", m.cfg.Worker)
	}
	var used int64
	for _, v := range m.vols {
		if v.info.Tenant != tenant {
			continue
		}
		if v.info.Name == name {
			m.mu.Unlock()
			return Volume{}, errorf(CodeVolumeExists, "tenant %s already has a volume %q on worker %s", tenant, name, m.cfg.Worker)
		}
		used += v.info.SizeBytes
	}
	if limit := m.cfg.Volumes.PerTenantBytes; limit > 0 && used+sizeBytes > limit {
		m.mu.Unlock()
		return Volume{}, &Error{Code: CodeQuota, Limit: "volumes.per_tenant_bytes",
			Message: fmt.Sprintf("tenant %s's volumes on worker %s hold %d of %d bytes, %d more requested", tenant, m.cfg.Worker, used, limit, sizeBytes)}
	}
	m.vols[id] = rec // reserves the name and the quota
	m.mu.Unlock()

	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineTimeout)
	defer cancel()
	if err := m.makeVolume(ectx, rec.info); err != nil {
		m.mu.Lock()
		delete(m.vols, id)
		m.mu.Unlock()
		return Volume{}, err
	}
	m.mu.Lock()
	rec.ready, rec.busy = true, 0
	info := rec.info
	m.mu.Unlock()
	m.lg.Info("volume created", zap.String("volume-id", id), zap.String("tenant", tenant), zap.Int64("size", sizeBytes))
	return info, nil
}

// makeVolume makes v's image, attaches it and creates its engine volume;
// on error nothing is left.
func (m *Manager) makeVolume(ctx context.Context, v Volume) error {
	opts, err := m.attachDisk(ctx, v.ID, v.SizeBytes, m.cfg.User)
	if err != nil {
		return err
	}
	if _, err := m.api.VolumeCreate(ctx, m.volumeCreateOptions(v, opts)); err != nil {
		m.removeDisk(ctx, v.ID)
		return fmt.Errorf("create the volume's engine volume: %w", err)
	}
	return nil
}

func (m *Manager) volumeCreateOptions(v Volume, dev map[string]string) client.VolumeCreateOptions {
	labels := m.workerLabels()
	labels[LabelVolume] = v.ID
	labels[LabelVolumeName] = v.Name
	labels[LabelVolumeBytes] = strconv.FormatInt(v.SizeBytes, 10)
	labels[LabelTenant] = v.Tenant
	labels[LabelCreated] = v.CreatedAt.UTC().Format(time.RFC3339Nano)
	opts := maps.Clone(dev)
	opts["o"] = volumeMountOptions
	return client.VolumeCreateOptions{Name: VolumeEngineName(v.ID), Driver: "local", DriverOpts: opts, Labels: labels}
}

// ListVolumes returns tenant's volumes on this worker, by name.
func (m *Manager) ListVolumes(tenant string) []Volume {
	tenant = tenantOf(tenant)
	m.mu.Lock()
	defer m.mu.Unlock()
	users := m.volumeUsers()
	var out []Volume
	for _, v := range m.vols {
		if v.ready && v.info.Tenant == tenant {
			info := v.info
			info.Sandboxes = users[v.info.ID]
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// volumeUsers maps each volume id to the sandboxes that mount it, sorted;
// m.mu is held.
func (m *Manager) volumeUsers() map[string][]string {
	users := map[string][]string{}
	for id, sb := range m.sandboxes {
		sb.mu.Lock()
		for _, vm := range sb.info.Volumes {
			users[vm.ID] = append(users[vm.ID], id)
		}
		sb.mu.Unlock()
	}
	for _, ids := range users {
		sort.Strings(ids)
	}
	return users
}

// DeleteVolume removes tenant's volume (by name or id) and its data. A
// volume that a sandbox mounts, or that a create in flight is about to
// mount, is CodeVolumeInUse.
func (m *Manager) DeleteVolume(ctx context.Context, tenant, ref string) error {
	tenant = tenantOf(tenant)
	m.mu.Lock()
	v := m.findVolume(tenant, ref)
	if v == nil {
		m.mu.Unlock()
		return m.volumeNotFound(ref)
	}
	users := m.volumeUsers()[v.info.ID]
	if len(users) > 0 || v.busy != 0 {
		m.mu.Unlock()
		if len(users) == 0 {
			return errorf(CodeVolumeInUse, "volume %s is being mounted; retry", ref)
		}
		return errorf(CodeVolumeInUse, "volume %s is mounted by sandbox %s; delete the sandbox first", ref, strings.Join(users, ", "))
	}
	v.deleting = true // no create mounts it while it goes
	info := v.info
	m.mu.Unlock()
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineTimeout)
	defer cancel()
	if _, err := m.api.VolumeRemove(ectx, VolumeEngineName(info.ID), client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		m.mu.Lock()
		v.deleting = false
		m.mu.Unlock()
		if cerrdefs.IsConflict(err) { // a container the worker does not know of uses it
			return &Error{Code: CodeVolumeInUse, Message: fmt.Sprintf("volume %s is in use by a container", ref), Err: err}
		}
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("volume %s is not deleted: the engine did not remove it (retry)", ref), Err: err}
	}
	m.removeDisk(ectx, info.ID)
	m.mu.Lock()
	delete(m.vols, info.ID)
	m.mu.Unlock()
	m.lg.Info("volume deleted", zap.String("volume-id", info.ID), zap.String("tenant", tenant))
	return nil
}

// isVolume reports whether id is a named volume of this worker; m.mu is
// held.
func (m *Manager) isVolume(id string) bool { return m.vols[id] != nil }

// adoptVolumes reads this worker's named volumes back from their engine
// volumes' labels and attaches each one's image again (idempotent while
// its loop device lives; after a host reboot the device is new, and the
// engine volume is re-made on it, the data untouched). A volume whose
// image cannot be attached stays listed: its mounts fail until it can.
func (m *Manager) adoptVolumes(ctx context.Context) error {
	list, err := m.api.VolumeList(ctx, client.VolumeListOptions{Filters: client.Filters{}.Add("label", LabelWorker+"="+m.cfg.Worker).Add("label", LabelVolume)})
	if err != nil {
		return fmt.Errorf("list this worker's named volumes: %w", err)
	}
	for _, ev := range list.Items {
		l := ev.Labels
		id := l[LabelVolume]
		size, err := strconv.ParseInt(l[LabelVolumeBytes], 10, 64)
		created, _ := time.Parse(time.RFC3339Nano, l[LabelCreated])
		if ev.Name != VolumeEngineName(id) || sandboxapi.VolumeWorkerOf(id) != m.cfg.Worker || err != nil || !ValidVolumeName(l[LabelVolumeName]) {
			m.lg.Warn("ignoring an engine volume with unreadable volume labels", zap.String("volume", ev.Name))
			continue
		}
		v := Volume{ID: id, Name: l[LabelVolumeName], Worker: m.cfg.Worker, Tenant: tenantOf(l[LabelTenant]), SizeBytes: size, CreatedAt: created}
		m.vols[id] = &volumeRec{info: v, ready: true}
		if m.cfg.DiskEnforcement == DiskWatchdog {
			continue
		}
		dev, err := m.attachImage(ctx, id, size, m.cfg.User)
		if err != nil {
			m.lg.Warn("volume image not attached", zap.String("volume-id", id), zap.Error(err))
			continue
		}
		if ev.Options["device"] == dev["device"] {
			continue
		}
		// A new loop device (the host rebooted): the engine volume names
		// the old one. It has no users now (no box survives a reboot).
		if _, err := m.api.VolumeRemove(ctx, ev.Name, client.VolumeRemoveOptions{}); err != nil {
			m.lg.Warn("volume on a new loop device: its engine volume is not re-made", zap.String("volume-id", id), zap.Error(err))
			continue
		}
		if _, err := m.api.VolumeCreate(ctx, m.volumeCreateOptions(v, dev)); err != nil {
			m.lg.Warn("volume on a new loop device: its engine volume is not re-made", zap.String("volume-id", id), zap.Error(err))
			continue
		}
		m.lg.Info("volume re-attached on a new loop device", zap.String("volume-id", id), zap.String("device", dev["device"]))
	}
	return nil
}
