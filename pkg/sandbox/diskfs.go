package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/ext2fs"
)

// Values of Config.DiskEnforcement.
const (
	// DiskKernel bounds each workspace with a disk_bytes by a file system
	// of its own (the default): the kernel refuses writes past its bytes
	// and its inodes.
	DiskKernel = "kernel"
	// DiskWatchdog measures workspaces instead (CheckDisk), for nodes
	// without loop devices: a box can overshoot between two rounds.
	DiskWatchdog = "watchdog"
)

// Workspace file systems (docs/security.md, "Workspace disk limit"): a box
// with a disk_bytes gets a sparse ext2 image of disk_bytes bytes (metadata
// included) with InodeCeiling(disk_bytes) inodes at most, in a volume of
// its own that only the disk helper container mounts, attached to a loop
// device by that helper and mounted by the engine as its workspace volume
// (a local volume of type ext2 on the device).
const (
	// diskVolumePrefix starts the name of the volume that holds a box's
	// workspace image.
	diskVolumePrefix = "plumb-disk-"
	// disksDir is where the disk helper mounts it.
	disksDir = "/disks"
	// LabelDisk marks a workspace volume backed by an image, and the
	// volume holding the image; its value is the sandbox id.
	LabelDisk = "plumb.disk"
	// diskHelperRepo is the repository of the disk helper's image: only
	// the static sandbox-agent, imported from Config.Agent.
	diskHelperRepo = "plumb-disk-helper"
	// diskTimeout bounds one disk helper run.
	diskTimeout = 2 * time.Minute
)

// MinDiskBytes and MaxDiskBytes bound a disk_bytes other than 0: the
// smallest and largest workspace file system (ext2fs.MinBlocks, 2^32
// blocks less one group).
const (
	MinDiskBytes = ext2fs.MinBlocks * ext2fs.BlockSize
	MaxDiskBytes = 1<<44 - 1<<27
)

// DiskVolume is the name of the volume holding sandbox id's workspace
// image.
func DiskVolume(id string) string { return diskVolumePrefix + id }

// kernelDisk reports whether a box of template t gets its own file system.
func (m *Manager) kernelDisk(t Template) bool {
	return t.DiskBytes > 0 && m.cfg.DiskEnforcement != DiskWatchdog
}

// attachDisk makes sandbox id's workspace image (or named volume id's
// image) and attaches it to a loop device, returning the driver options of
// its workspace volume; owner ("uid:gid", "" = root) owns a new image's
// root directory. An image that exists is attached as it is. On error
// nothing is left attached.
func (m *Manager) attachDisk(ctx context.Context, id string, diskBytes int64, owner string) (_ map[string]string, err error) {
	labels := m.workerLabels()
	labels[LabelDisk] = id
	if _, err := m.api.VolumeCreate(ctx, client.VolumeCreateOptions{Name: DiskVolume(id), Labels: labels}); err != nil {
		return nil, fmt.Errorf("create the workspace image volume: %w", err)
	}
	defer func() {
		if err != nil {
			m.removeDisk(ctx, id)
		}
	}()
	return m.attachImage(ctx, id, diskBytes, owner)
}

// attachImage attaches id's image (made first when it does not exist) to a
// loop device and returns the driver options of the volume mounting it.
// Unlike attachDisk it never removes the image: a named volume's image is
// re-attached this way (its data must survive a failed attach).
func (m *Manager) attachImage(ctx context.Context, id string, diskBytes int64, owner string) (map[string]string, error) {
	args := []string{"attach", disksDir, id, strconv.FormatInt(diskBytes, 10), strconv.FormatInt(InodeCeiling(diskBytes), 10)}
	if owner != "" {
		args = append(args, owner)
	}
	out, err := m.diskHelper(ctx, id, args...)
	if err != nil {
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("worker %s cannot make a workspace file system of %d bytes (disk_bytes)", m.cfg.Worker, diskBytes), Err: err}
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || n < 0 {
		return nil, fmt.Errorf("the disk helper printed %q, not a loop device number", out)
	}
	return map[string]string{"type": "ext2", "device": "/dev/loop" + strconv.Itoa(n)}, nil
}

// removeDisk detaches sandbox id's workspace image from its loop device
// and removes it with its volume; the workspace volume should be gone (a
// device still mounted is detached by the kernel once unmounted).
func (m *Manager) removeDisk(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), diskTimeout)
	defer cancel()
	// The helper's mount would create the volume: look first.
	if _, err := m.api.VolumeInspect(ctx, DiskVolume(id), client.VolumeInspectOptions{}); cerrdefs.IsNotFound(err) {
		return
	}
	if _, err := m.diskHelper(ctx, id, "detach", disksDir, id); err != nil {
		m.lg.Warn("detach workspace image", zap.String("sandbox-id", id), zap.Error(err))
		return // the volume stays: the next sweep tries again
	}
	if _, err := m.api.VolumeRemove(ctx, DiskVolume(id), client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		m.lg.Warn("remove workspace image volume", zap.String("sandbox-id", id), zap.Error(err))
	}
}

// diskHelper runs `sandbox-agent disk ARGS` in a short-lived helper
// container (docs/security.md: root with every capability dropped but
// CAP_MKNOD, the loop devices only, under runc whatever the box's runtime)
// and returns what it printed.
func (m *Manager) diskHelper(ctx context.Context, id string, args ...string) (string, error) {
	img, err := m.diskHelperImage(ctx)
	if err != nil {
		return "", err
	}
	pids := int64(64)
	hc := &container.HostConfig{
		Runtime: "runc", CapAdd: []string{"MKNOD"},
		Resources: container.Resources{
			Memory: 64 << 20, MemorySwap: 64 << 20, PidsLimit: &pids,
			Devices:           []container.DeviceMapping{{PathOnHost: "/dev/loop-control", PathInContainer: "/dev/loop-control", CgroupPermissions: "rwm"}},
			DeviceCgroupRules: []string{fmt.Sprintf("b %d:* rwm", 7)},
		},
		Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: DiskVolume(id), Target: disksDir}},
	}
	return m.runHelper(ctx, img, "disk", hc, append([]string{"disk"}, args...))
}

// helperImage is an image of the worker's own: a static binary only.
type helperImage struct {
	mu  sync.Mutex
	ref string
}

// diskHelperImage returns the ID of the disk helper's image, importing it
// from Config.Agent when the engine lacks it.
func (m *Manager) diskHelperImage(ctx context.Context) (string, error) {
	sum := sha256.Sum256(m.cfg.Agent)
	return m.importBinary(ctx, &m.diskImg, diskHelperRepo, hex.EncodeToString(sum[:8]), "", AgentPath[1:], m.cfg.Agent, nil, "plumb disk helper")
}

// importBinary returns the ID of image repo:key (repo:key-owner with an
// owner, see ownTag), which holds bin at path and nothing else: the
// engine's, another worker's of the same key tagged for owner, or
// imported (cached in h).
func (m *Manager) importBinary(ctx context.Context, h *helperImage, repo, key, owner, path string, bin []byte, changes []string, message string) (string, error) {
	tag := repo + ":" + key
	if owner != "" {
		tag = ownTag(repo, key, owner)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ref != "" {
		if _, err := m.api.ImageInspect(ctx, h.ref); err == nil {
			return h.ref, nil
		}
		h.ref = "" // removed meanwhile: import it again
	}
	if res, err := m.api.ImageInspect(ctx, tag); err == nil {
		h.ref = res.ID
		return res.ID, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("inspect image %s: %w", tag, err)
	}
	if owner != "" {
		if id, err := tagShared(ctx, m.api, repo, key, tag); err != nil || id != "" {
			h.ref = id
			return id, err
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Name: path, Mode: 0o755, Size: int64(len(bin)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
	if err := tw.WriteHeader(hdr); err != nil {
		return "", err
	}
	if _, err := tw.Write(bin); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	rc, err := m.api.ImageImport(ctx, client.ImageImportSource{Source: &buf, SourceName: "-"}, tag, client.ImageImportOptions{Changes: changes, Message: message})
	if err != nil {
		return "", fmt.Errorf("import image %s: %w", tag, err)
	}
	_, _ = io.Copy(io.Discard, rc)
	rc.Close()
	res, err := m.api.ImageInspect(ctx, tag)
	if err != nil {
		return "", fmt.Errorf("inspect image %s: %w", tag, err)
	}
	h.ref = res.ID
	return res.ID, nil
}

// workerLabels label what the worker makes for itself (helpers, the
// images volume): its name and Config.ExtraLabels.
func (m *Manager) workerLabels() map[string]string {
	labels := map[string]string{LabelWorker: m.cfg.Worker}
	maps.Copy(labels, m.cfg.ExtraLabels)
	return labels
}

// runHelper runs one command in a short-lived helper container of image
// (PID 1 `sandbox-agent init`, the command one exec as root), with hc's
// capabilities, devices and mounts on top of what every helper gets: no
// network, no-new-privileges, a read-only root, no logs, at most 64 MiB
// and 64 pids unless hc says otherwise. It returns the command's stdout; a
// non-zero exit is an error carrying its stderr.
func (m *Manager) runHelper(ctx context.Context, image, hostname string, hc *container.HostConfig, args []string) (string, error) {
	noInit := false
	hc.NetworkMode, hc.CapDrop = "none", []string{"ALL"}
	hc.SecurityOpt = []string{"no-new-privileges:true"}
	hc.ReadonlyRootfs, hc.LogConfig = true, container.LogConfig{Type: "none"}
	hc.IpcMode, hc.Init = container.IPCModePrivate, &noInit
	c, err := m.api.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image: image, User: AgentUser, Entrypoint: []string{AgentPath}, Cmd: []string{"init"},
			Labels: m.workerLabels(), Hostname: hostname, WorkingDir: "/",
			Healthcheck: &container.HealthConfig{Test: []string{"NONE"}},
		},
		HostConfig: hc,
	})
	if err != nil {
		return "", fmt.Errorf("create the %s helper container: %w", hostname, err)
	}
	defer m.removeContainerOnly(ctx, c.ID)
	if _, err := m.api.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		return "", fmt.Errorf("start the %s helper container: %w", hostname, err)
	}
	ex, err := m.api.ExecCreate(ctx, c.ID, client.ExecCreateOptions{User: AgentUser, AttachStdout: true, AttachStderr: true, Cmd: append([]string{AgentPath}, args...)})
	if err != nil {
		return "", fmt.Errorf("exec the %s helper: %w", hostname, err)
	}
	att, err := m.api.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return "", fmt.Errorf("attach the %s helper: %w", hostname, err)
	}
	defer att.Close()
	stop := context.AfterFunc(ctx, func() { att.Close() })
	defer stop()
	var stderr limitedBuffer
	out, err := io.ReadAll(io.LimitReader(newDemuxReader(att.Reader, &stderr), 1<<16))
	if err != nil {
		return "", fmt.Errorf("read the %s helper's output: %w", hostname, err)
	}
	// The output ends when the command does; the engine may record its
	// exit a moment later.
	var res client.ExecInspectResult
	for {
		if res, err = m.api.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{}); err != nil {
			return "", fmt.Errorf("inspect the %s helper's exec: %w", hostname, err)
		}
		if !res.Running {
			break
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the %s helper's exit: %w", hostname, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("the %s helper exited with %d: %s", hostname, res.ExitCode, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := 4096 - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
