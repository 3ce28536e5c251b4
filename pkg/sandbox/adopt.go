package sandbox

import (
	"context"
	"fmt"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.uber.org/zap"
)

// removeContainer removes a container and then its workspace volume. It
// returns the engine's error when the container stays (the volume, still
// in use, stays too); callers that cannot act on it only log it.
func (m *Manager) removeContainer(ctx context.Context, cid, volume string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := m.api.ContainerRemove(ctx, cid, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		m.lg.Warn("remove container", zap.String("container-id", cid), zap.Error(err))
		return fmt.Errorf("remove container: %w", err)
	}
	m.removeVolume(ctx, volume)
	return nil
}

// removeVolume removes a workspace volume and, once it is gone, the
// image its file system lives in (LabelDisk).
func (m *Manager) removeVolume(ctx context.Context, volume string) {
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	v, err := m.api.VolumeInspect(vctx, volume, client.VolumeInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return
	}
	if _, err := m.api.VolumeRemove(vctx, volume, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		m.lg.Warn("remove volume", zap.String("volume", volume), zap.Error(err))
		return
	}
	if id, ok := strings.CutPrefix(volume, volumePrefix); ok && err == nil && v.Volume.Labels[LabelDisk] == id {
		m.removeDisk(ctx, id)
	}
}

// volumePrefix starts the name of every workspace volume.
const volumePrefix = "plumb-ws-"

// volumeName is the workspace volume of sandbox id.
func volumeName(id string) string { return volumePrefix + id }

// adopt takes over this worker's running containers after a restart. It
// removes the worker's other containers (stopped, never started because a
// create was cut short, or with unreadable labels) and then the worker's
// workspace volumes that no adopted sandbox uses.
//
// An adopted sandbox keeps the expiry recorded for it in the state dir;
// without a record it expires at its creation time plus its TTL (an upper
// bound: a restart never extends a sandbox's life).
//
// Hibernated sandboxes have no container: they are adopted from their
// records in the state dir (hibernate.go). A record and a container of
// the same sandbox mean a hibernation or a wake was cut short: a paused
// container (hibernation: its snapshot is taken and verified, the record
// written) is removed and the record adopted; a running one (a wake: it
// was filled and started) is adopted and the record dropped.
func (m *Manager) adopt(ctx context.Context, recorded map[string]time.Time) error {
	hibernated, err := m.loadHibernations()
	if err != nil {
		return err
	}
	list, err := m.api.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", LabelWorker+"="+m.cfg.Worker),
	})
	if err != nil {
		return fmt.Errorf("list this worker's containers: %w", err)
	}
	for _, c := range list.Items {
		id := c.Labels[LabelSandbox]
		volume := volumeName(id)
		t, created, user, perr := templateFromLabels(c.Labels)
		paused := c.State == container.StatePaused && c.Labels[LabelPool] == "" // suspended by PAUSE
		if _, ok := hibernated[id]; ok && id != "" {
			if c.State == container.StateRunning {
				m.lg.Info("a wake was cut short after its box started: adopting the box, not its hibernation record", zap.String("sandbox-id", id))
				delete(hibernated, id)
				m.forgetHibernation(id)
			} else {
				paused = false // a hibernation cut short: its record is adopted below
			}
		}
		if id == "" || perr != nil || (c.State != container.StateRunning && !paused) {
			m.lg.Info("removing orphan container", zap.String("container-id", c.ID), zap.String("sandbox-id", id), zap.String("state", string(c.State)))
			_ = m.removeContainer(ctx, c.ID, volume)
			continue
		}
		if c.Labels[LabelPool] != "" {
			m.adoptPooled(ctx, c.ID, c.ImageID, id, c.Names, c.Labels, t, created, recorded)
			continue
		}
		expires, ok := recorded[id]
		if !ok {
			expires = created.Add(t.TTL)
		}
		sb := &sandbox{info: Info{
			ID: id, Worker: m.cfg.Worker, ContainerID: c.ID, State: StateRunning, Template: c.Labels[LabelTemplate], Tenant: tenantOf(c.Labels[LabelTenant]),
			Settings: t, Labels: user, CreatedAt: created, LastUsedAt: created, ExpiresAt: expires,
		}}
		if paused {
			sb.info.State = StatePaused
		}
		mounts, merr := mountsFromLabel(c.Labels[LabelMounts])
		if merr != nil {
			m.lg.Warn("adopted sandbox with unreadable volume mounts (the engine still refuses to remove a volume in use)", zap.String("sandbox-id", id), zap.Error(merr))
		}
		sb.info.Volumes = mounts
		// Labels do not record the idle settings: the template's current
		// ones apply.
		sb.info.Settings.IdleSuspendAfter, sb.info.Settings.HibernateAfter = m.idleSettings(c.Labels[LabelTemplate])
		if t.Network == NetworkEgress {
			if err := m.ensureProxy(ctx, id, c.Labels[LabelEgressInject] == "true"); err != nil {
				m.lg.Warn("removing egress sandbox without its network", zap.String("sandbox-id", id), zap.Error(err))
				_ = m.removeContainer(ctx, c.ID, volume)
				continue
			}
		}
		m.sandboxes[id] = sb
		m.reserved += t.MemoryBytes
		m.lg.Info("adopted sandbox", zap.String("sandbox-id", id), zap.Time("expires-at", expires), zap.Bool("expiry-recorded", ok))
	}
	for _, id := range sortedKeys(hibernated) {
		if m.sandboxes[id] == nil {
			m.adoptHibernated(ctx, hibernated[id], recorded)
		}
	}
	if err := m.sweepEgress(ctx); err != nil {
		return err
	}
	return m.sweepVolumes(ctx)
}

// sweepVolumes removes this worker's workspace volumes that belong to no
// adopted sandbox. They are found by label, and by name too, since an
// engine that re-created a removed volume for a container's mount (before
// mounts carried labels) left it unlabelled.
func (m *Manager) sweepVolumes(ctx context.Context) error {
	seen := map[string]bool{}
	for _, f := range []client.Filters{
		client.Filters{}.Add("label", LabelWorker+"="+m.cfg.Worker),
		client.Filters{}.Add("name", volumeName("sbx-"+m.cfg.Worker+"-")), // a substring match
	} {
		list, err := m.api.VolumeList(ctx, client.VolumeListOptions{Filters: f})
		if err != nil {
			return fmt.Errorf("list this worker's volumes: %w", err)
		}
		for _, v := range list.Items {
			if v.Labels[LabelVolume] != "" {
				continue // a named volume: adoptVolumes and DeleteVolume own it
			}
			if id, ok := strings.CutPrefix(v.Name, diskVolumePrefix); ok && v.Labels[LabelWorker] == m.cfg.Worker {
				if !seen[v.Name] && !m.inUse(id) {
					seen[v.Name] = true
					m.lg.Info("removing orphan workspace image", zap.String("volume", v.Name))
					m.removeDisk(ctx, id)
				}
				continue
			}
			id, named := strings.CutPrefix(v.Name, volumePrefix)
			mine := v.Labels[LabelWorker] == m.cfg.Worker || named && WorkerOf(id) == m.cfg.Worker
			if seen[v.Name] || !mine || m.inUse(id) {
				continue
			}
			seen[v.Name] = true
			m.lg.Info("removing orphan volume", zap.String("volume", v.Name))
			m.removeVolume(ctx, v.Name)
		}
	}
	return nil
}

// inUse reports whether sandbox id is live, in creation or in a pool.
func (m *Manager) inUse(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sandboxes[id] != nil || m.pending[id] || m.isMember(id) || m.isVolume(id)
}

// idleSettings are the idle_suspend_after and hibernate_after of template
// name ("" or unknown: the defaults').
func (m *Manager) idleSettings(name string) (time.Duration, time.Duration) {
	t := m.cfg.Defaults
	if tt, ok := m.cfg.Templates[name]; ok {
		t = tt.Merge(m.cfg.Defaults)
	}
	if m.cfg.Snapshots == nil {
		t.HibernateAfter = 0
	}
	return t.IdleSuspendAfter, t.HibernateAfter
}
