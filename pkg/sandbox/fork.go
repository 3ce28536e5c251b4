package sandbox

import (
	"context"
	"errors"
	"os"
	"sync"

	"github.com/moby/moby/client"
	"go.uber.org/zap"
)

// MaxForkCount bounds how many boxes one ForkSandbox makes.
const MaxForkCount = 32

// forkParallel is how many boxes of a fork are created at once.
const forkParallel = 16

// Fork creates count boxes whose workspaces hold spec.Snapshot
// (docs/workspaces.md, "Forks"): the snapshot is read and verified once,
// the quota for all count boxes is reserved before the first is made, and
// every box is filled from the one verified tar before it starts. All are
// created or none: a failure removes every box the fork made. Under runc
// a fork takes warm-pool boxes of its template first (their workspaces
// filled on the host before anyone can reach them: claimForFork); the
// rest are created cold, filled before they serve.
func (m *Manager) Fork(ctx context.Context, spec CreateSpec, count int) ([]Info, error) {
	switch {
	case count < 1 || count > MaxForkCount:
		return nil, invalidField("count", "count %d out of range 1..%d", count, MaxForkCount)
	case spec.Snapshot == "":
		return nil, invalidField("snapshot_id", "a fork needs a snapshot")
	case len(spec.Inject) > 0:
		return nil, invalidField("egress_secrets", "a fork cannot carry egress secrets")
	}
	spec.pool = ""
	t, err := m.resolve(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := checkMounts(spec.Volumes, t); err != nil {
		return nil, err
	}
	mounts, unpin, err := m.pinMounts(tenantOf(spec.Tenant), spec.Volumes)
	if err != nil {
		return nil, err
	}
	defer unpin()
	spec.Volumes = mounts

	// Quota for every box first: a fork over the capacity fails before
	// it reads the snapshot or makes anything. Warm-pool boxes come with
	// theirs (claimForFork).
	tenant := tenantOf(spec.Tenant)
	claimed := m.claimForFork(spec, t, count)
	reserved, installed := len(claimed), 0
	claimedIDs := make([]string, len(claimed))
	for i, sb := range claimed {
		claimedIDs[i] = sb.info.ID
	}
	defer func() {
		m.mu.Lock()
		for i := range reserved {
			m.creating--
			m.unreserveTenant(tenant, t)
			if i >= installed {
				m.reserved -= t.MemoryBytes
			}
		}
		for _, id := range claimedIDs {
			delete(m.pending, id)
		}
		m.mu.Unlock()
	}()
	defer func() {
		// The claimed boxes no box of the fork took.
		for _, sb := range claimed {
			if sb != nil {
				m.discard(ctx, sb)
			}
		}
	}()
	for range count - len(claimed) {
		if err := m.reserveOrEvict(ctx, t, tenant); err != nil {
			return nil, err
		}
		reserved++
	}

	tar, err := m.prepareRestore(ctx, spec.Tenant, spec.Snapshot, t)
	if err != nil {
		return nil, err
	}
	defer tar.Close()
	spec.restore = tar

	ids := make([]string, count)
	m.mu.Lock()
	for i := range ids {
		ids[i] = newID(m.cfg.Worker)
		m.pending[ids[i]] = true
	}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		for _, id := range ids {
			delete(m.pending, id)
		}
		m.mu.Unlock()
	}()

	// The first failure stops the boxes not yet made (start checks its
	// context between engine calls) and undoes the ones made.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sbs := make([]*sandbox, count)
	errs := make([]error, count)
	sem := make(chan struct{}, forkParallel)
	var wg sync.WaitGroup
	for i := range count {
		var warm *sandbox
		if i < len(claimed) {
			warm, claimed[i] = claimed[i], nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if fctx.Err() != nil {
				errs[i] = fctx.Err()
				if warm != nil {
					m.discard(ctx, warm)
				}
				return
			}
			if warm != nil {
				ok, err := m.fillClaimed(fctx, warm, t, spec)
				if ok || err != nil {
					sbs[i], errs[i] = warm, err
					if err != nil {
						cancel()
					}
					return
				}
				m.discard(ctx, warm) // a cold box takes its reservation
			}
			sbs[i], errs[i] = m.start(fctx, ids[i], spec, t)
			if errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	if err := firstCause(errs); err != nil {
		for _, sb := range sbs {
			if sb != nil {
				m.discard(ctx, sb)
			}
		}
		m.lg.Info("sandbox fork undone", zap.String("snapshot", spec.Snapshot), zap.Int("count", count), zap.Error(err))
		return nil, err
	}

	out := make([]Info, count)
	made := make([]string, count)
	m.mu.Lock()
	for i, sb := range sbs {
		made[i] = sb.info.ID
		m.sandboxes[made[i]] = sb
		installed++
	}
	m.mu.Unlock()
	m.saveExpiry()
	for i := range out {
		out[i] = m.snapshot(sbs[i])
	}
	m.lg.Info("sandboxes forked", zap.String("snapshot", spec.Snapshot), zap.Int("count", count), zap.Int("from-the-pool", len(claimedIDs)), zap.Strings("sandbox-ids", made))
	return out, nil
}

// firstCause returns the first error that is not the cancellation the
// fork's own first failure caused (or the first error when all are).
func firstCause(errs []error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if first == nil {
			first = err
		}
		if !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return first
}

// claimForFork takes up to n warm boxes of the pool spec may use, each
// holding what a create's reservation holds (a slot, its memory, the
// tenant's share) and out of sight (pending, in no list) until the fork
// installs it. Only where a claimed box can be filled while it runs: under
// runc (docs/security.md, "The host fill of a restored workspace"), and
// for a fork without named volumes (a pooled box has none).
func (m *Manager) claimForFork(spec CreateSpec, t Template, n int) []*sandbox {
	if len(spec.Volumes) > 0 || !m.overlapsStart(t, spec) {
		return nil
	}
	tenant := tenantOf(spec.Tenant)
	var out []*sandbox
	m.mu.Lock()
	p := m.pools.poolFor(spec.Template, t)
	for p != nil && !m.closed && len(out) < n && m.checkTenant(tenant, t) == nil {
		sb := m.takeMember(p, spec, t)
		if sb == nil {
			p.misses++
			break
		}
		p.hits++
		m.pending[sb.info.ID] = true
		m.creating++
		m.tenantNew[tenant] = m.tenantNew[tenant].add(t, 1)
		out = append(out, sb)
	}
	m.mu.Unlock()
	if len(out) > 0 {
		m.kickPools()
	}
	return out
}

// fillClaimed marks a pool box a fork claimed as claimed and fills its
// workspace, which must be empty, from spec's restore on the host. ok
// false with no error: the box cannot be used so (not pristine, its volume
// not on this host); the caller removes it.
func (m *Manager) fillClaimed(ctx context.Context, sb *sandbox, t Template, spec CreateSpec) (ok bool, err error) {
	id := sb.info.ID
	if err := m.markClaimed(sb, claimOf(sb)); err != nil {
		m.lg.Warn("claim a pool box for a fork; dropping the box", zap.String("sandbox-id", id), zap.Error(err))
		return false, nil
	}
	ectx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	vol, err := m.api.VolumeInspect(ectx, volumeName(id), client.VolumeInspectOptions{})
	if err != nil {
		return false, nil
	}
	dir := m.hostFillDir(vol.Volume, t)
	if dir == "" {
		return false, nil
	}
	if names, err := os.ReadDir(dir); err != nil || len(names) > 0 {
		return false, nil // an image with files at its working dir: not the snapshot alone
	}
	uid, gid, _ := parseUser(m.cfg.User)
	if err := fillHost(ectx, dir, spec.restore, uid, gid); err != nil {
		return true, err
	}
	sb.mu.Lock()
	sb.info.Snapshot = spec.Snapshot
	sb.mu.Unlock()
	return true, nil
}
