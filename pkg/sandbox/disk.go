package sandbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"go.uber.org/zap"
)

// DefaultDiskCheckInterval is how often the disk watchdog measures the
// workspaces of sandboxes that have a disk limit.
const DefaultDiskCheckInterval = 30 * time.Second

// CheckDisk is the workspace disk watchdog, the fallback of a worker
// whose disk enforcement is DiskWatchdog (where a workspace cannot have a
// file system of its own); boxes with one are skipped. The worker
// measures: it asks the engine for the size of
// every volume (GET /system/df, computed by the engine as root, so a box
// cannot hide bytes in a directory it made unreadable) and fails each
// running sandbox whose workspace is over its DiskBytes, killing its
// container. A box can overshoot its limit by what it writes between two
// checks. It returns the ids of the sandboxes it failed. Its own loop
// (diskLoop, not the reaper's) runs it every DiskCheckInterval; errors
// only reach the log.
func (m *Manager) CheckDisk(ctx context.Context) []string {
	m.mu.Lock()
	limited := map[string]*sandbox{}
	for id, sb := range m.sandboxes {
		sb.mu.Lock()
		if sb.info.State == StateRunning && sb.info.Settings.DiskBytes > 0 && !m.kernelDisk(sb.info.Settings) {
			limited[volumeName(id)] = sb
		}
		sb.mu.Unlock()
	}
	m.mu.Unlock()
	if len(limited) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	du, err := m.api.DiskUsage(ctx, client.DiskUsageOptions{Volumes: true, Verbose: true})
	if err != nil {
		m.lg.Warn("measure workspace volumes", zap.Error(err))
		return nil
	}
	var failed []string
	measured := map[string]*sandbox{} // volumes that exist and are under their bytes
	for _, v := range du.Volumes.Items {
		sb, ok := limited[v.Name]
		if !ok || v.UsageData == nil {
			continue
		}
		sb.mu.Lock()
		id, cid, limit := sb.info.ID, sb.info.ContainerID, sb.info.Settings.DiskBytes
		sb.mu.Unlock()
		if used := v.UsageData.Size; used > limit {
			if m.fail(sb, fmt.Sprintf("its workspace holds %d bytes, over its disk limit of %d bytes (disk_bytes)", used, limit)) {
				m.kill(ctx, id, cid)
				failed = append(failed, id)
			}
			continue
		}
		measured[v.Name] = sb
	}
	if len(measured) == 0 {
		return failed
	}
	counts, err := m.countInodes(ctx, measured)
	if err != nil {
		m.lg.Warn("count workspace inodes", zap.Error(err))
		return failed
	}
	for _, volume := range sortedKeys(measured) {
		sb := measured[volume]
		sb.mu.Lock()
		id, cid, limit := sb.info.ID, sb.info.ContainerID, sb.info.Settings.DiskBytes
		sb.mu.Unlock()
		if n, ceiling := counts[volume], InodeCeiling(limit); n > ceiling {
			if m.fail(sb, fmt.Sprintf("its workspace holds %d files, directories and links, over the %d its disk limit of %d bytes allows (disk_bytes)", n, ceiling, limit)) {
				m.kill(ctx, id, cid)
				failed = append(failed, id)
			}
		}
	}
	return failed
}

// InodeBytes is what each file, directory or link of a workspace costs
// against its DiskBytes in the watchdog's inode ceiling. Byte sizes count
// an empty file as nothing (300,000 of them measured 11 MB), and the
// workspace shares the node's inodes, so the count needs its own bound; a
// file smaller than a block takes a block on disk anyway.
const InodeBytes = 4096

// InodeCeiling is how many files, directories and links a workspace with
// a disk limit of diskBytes may hold.
func InodeCeiling(diskBytes int64) int64 { return max(diskBytes/InodeBytes, 1) }

// countInodes counts the entries of each workspace volume in vols with
// one helper container (docs/security.md, "Workspace inodes"): the box's
// agent cannot list a directory box code made unreadable, while the
// helper holds CAP_DAC_READ_SEARCH, and nothing else, over read-only
// mounts. It runs the derived image of one of the boxes, whose static
// sandbox-agent does the count; it carries the worker's label, so a
// restarted worker removes one left behind. A volume deleted meanwhile
// may be re-created empty by its mount; Collect removes it later.
func (m *Manager) countInodes(ctx context.Context, vols map[string]*sandbox) (map[string]int64, error) {
	names := sortedKeys(vols)
	sb := vols[names[0]]
	sb.mu.Lock()
	cid := sb.info.ContainerID
	sb.mu.Unlock()
	res, err := m.api.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
	if err != nil {
		return nil, fmt.Errorf("inspect %s for its image: %w", cid, err)
	}
	mounts := make([]mount.Mount, len(names))
	args := []string{"count"}
	for i, v := range names {
		mounts[i] = mount.Mount{Type: mount.TypeVolume, Source: v, Target: "/v/" + v, ReadOnly: true}
		vols[v].mu.Lock()
		ceiling := InodeCeiling(vols[v].info.Settings.DiskBytes)
		vols[v].mu.Unlock()
		// The walk stops past the ceiling: its time is bounded whatever
		// the box created.
		args = append(args, fmt.Sprintf("/v/%s:%d", v, ceiling))
	}
	pids := int64(64)
	out, err := m.runHelper(ctx, res.Container.Image, "count", &container.HostConfig{
		CapAdd: []string{"DAC_READ_SEARCH"}, Mounts: mounts,
		Resources: container.Resources{Memory: 64 << 20, MemorySwap: 64 << 20, PidsLimit: &pids},
	}, args)
	if err != nil {
		return nil, err
	}
	lines := strings.Fields(out)
	if len(lines) != len(names) {
		return nil, fmt.Errorf("the inode count printed %d numbers for %d workspaces", len(lines), len(names))
	}
	counts := make(map[string]int64, len(names))
	for i, v := range names {
		n, err := strconv.ParseInt(lines[i], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("the inode count of %s: %w", v, err)
		}
		counts[v] = n
	}
	return counts, nil
}

// kill SIGKILLs a failed sandbox's container; its volume stays until the
// sandbox is deleted.
func (m *Manager) kill(ctx context.Context, id, cid string) {
	if _, err := m.api.ContainerKill(ctx, cid, client.ContainerKillOptions{Signal: "KILL"}); err != nil && !cerrdefs.IsNotFound(err) {
		m.lg.Warn("kill failed sandbox", zap.String("sandbox-id", id), zap.Error(err))
	}
}
