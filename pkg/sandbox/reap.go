package sandbox

import (
	"context"
	"sort"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"go.uber.org/zap"
)

func (m *Manager) reapLoop(ctx context.Context) {
	defer close(m.reaperDone)
	tick := time.NewTicker(m.cfg.ReapInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			m.Reap(ctx)
			if m.now().Sub(m.collected) >= collectInterval {
				m.Collect(ctx)
				m.collected = m.now()
			}
		}
	}
}

// collectInterval is how often the reaper loop runs the collector.
const collectInterval = time.Minute

// deriveGrace is how old a never-started derive container must be before
// the collector takes it (a derive in flight has one for a few seconds).
const deriveGrace = 10 * time.Minute

// Collect removes what no sandbox uses any more: this worker's workspace
// volumes of no live or in-creation sandbox, derive containers (the
// never-started containers images are committed from) older than
// deriveGrace, left by a worker that died mid-derive, and superseded
// derived images that no container uses (see images.collect). The reaper loop
// runs it every collectInterval; errors only reach the log.
func (m *Manager) Collect(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	if err := m.sweepVolumes(ctx); err != nil {
		m.lg.Warn("collect orphan volumes", zap.Error(err))
	}
	if err := m.sweepEgress(ctx); err != nil {
		m.lg.Warn("collect orphan egress networks", zap.Error(err))
	}
	removed, err := m.images.collect(ctx, m.now(), deriveGrace)
	if len(removed) > 0 {
		m.lg.Info("removed superseded derived images", zap.Strings("images", removed))
	}
	if err != nil {
		m.lg.Warn("collect derived images", zap.Error(err))
	}
	list, err := m.api.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", LabelDerivedFrom).Add("status", "created"),
	})
	if err != nil {
		m.lg.Warn("collect derive containers", zap.Error(err))
		return
	}
	for _, c := range list.Items {
		if c.Labels[LabelSandbox] != "" || m.now().Sub(time.Unix(c.Created, 0)) < deriveGrace {
			continue
		}
		m.lg.Info("removing leftover derive container", zap.String("container-id", c.ID), zap.String("derived-from", c.Labels[LabelDerivedFrom]))
		m.removeContainerOnly(ctx, c.ID)
	}
}

func (m *Manager) removeContainerOnly(ctx context.Context, cid string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := m.api.ContainerRemove(ctx, cid, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		m.lg.Warn("remove container", zap.String("container-id", cid), zap.Error(err))
	}
}

// Reap deletes every sandbox whose expiry has passed and that has no
// operation in flight, and returns their ids. It also retries the deletes
// whose container the engine did not remove (sandboxes left deleting).
func (m *Manager) Reap(ctx context.Context) []string {
	now := m.now()
	var expired []string
	m.mu.Lock()
	sbs := slicesOf(m.sandboxes)
	m.mu.Unlock()
	for _, sb := range sbs {
		sb.mu.Lock()
		if sb.busy == 0 && (!sb.info.ExpiresAt.After(now) || sb.info.State == StateDeleting) {
			expired = append(expired, sb.info.ID)
		}
		sb.mu.Unlock()
	}
	sort.Strings(expired)
	for _, id := range expired {
		m.lg.Info("sandbox expired, or its delete is retried", zap.String("sandbox-id", id))
		_ = m.Delete(ctx, id)
	}
	m.mu.Lock()
	sbs = slicesOf(m.sandboxes)
	m.mu.Unlock()
	m.idleSuspend(ctx, sbs)
	m.saveExpiry()
	return expired
}

// saveExpiry records every sandbox's expiry in the state dir (when there
// is one and something changed). The reaper calls it on every round, and
// creates, deletes and keep-alives at once.
func (m *Manager) saveExpiry() {
	if m.expiry == nil {
		return
	}
	m.mu.Lock()
	sbs := slicesOf(m.sandboxes)
	m.mu.Unlock()
	exp := make(map[string]time.Time, len(sbs))
	for _, sb := range sbs {
		sb.mu.Lock()
		exp[sb.info.ID] = sb.info.ExpiresAt
		sb.mu.Unlock()
	}
	if err := m.expiry.save(exp); err != nil {
		m.lg.Warn("record sandbox expiry", zap.Error(err))
	}
}

// diskLoop runs the disk watchdog every DiskCheckInterval, off the reaper
// loop: a slow measurement never delays TTL reaping.
func (m *Manager) diskLoop(ctx context.Context) {
	tick := time.NewTicker(m.cfg.DiskCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			m.CheckDisk(ctx)
		}
	}
}
