package sandbox

import (
	"context"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"go.uber.org/zap"
)

// DefaultDiskCheckInterval is how often the disk watchdog measures the
// workspaces of sandboxes that have a disk limit.
const DefaultDiskCheckInterval = 30 * time.Second

// CheckDisk is the workspace disk watchdog. Docker's local volumes have
// no size limit the kernel enforces (no project quota on this storage),
// so the worker measures instead: it asks the engine for the size of
// every volume (GET /system/df, computed by the engine as root, so a box
// cannot hide bytes in a directory it made unreadable) and fails each
// running sandbox whose workspace is over its DiskBytes, killing its
// container. A box can overshoot its limit by what it writes between two
// checks. It returns the ids of the sandboxes it failed. The reaper loop
// runs it every DiskCheckInterval when some sandbox has a limit; errors
// only reach the log.
func (m *Manager) CheckDisk(ctx context.Context) []string {
	m.mu.Lock()
	limited := map[string]*sandbox{}
	for id, sb := range m.sandboxes {
		sb.mu.Lock()
		if sb.info.State == StateRunning && sb.info.Settings.DiskBytes > 0 {
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
		}
	}
	return failed
}

// kill SIGKILLs a failed sandbox's container; its volume stays until the
// sandbox is deleted.
func (m *Manager) kill(ctx context.Context, id, cid string) {
	if _, err := m.api.ContainerKill(ctx, cid, client.ContainerKillOptions{Signal: "KILL"}); err != nil && !cerrdefs.IsNotFound(err) {
		m.lg.Warn("kill failed sandbox", zap.String("sandbox-id", id), zap.Error(err))
	}
}
