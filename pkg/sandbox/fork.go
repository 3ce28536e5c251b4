package sandbox

import (
	"context"
	"errors"
	"sync"

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
// created or none: a failure removes every box the fork made. Forks never
// take warm-pool boxes (a pooled box is already started; the restore's
// guarantees rest on filling a box before it starts).
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
	// it reads the snapshot or makes anything.
	tenant := tenantOf(spec.Tenant)
	reserved := 0
	installed := 0
	defer func() {
		m.mu.Lock()
		for i := range reserved {
			m.creating--
			m.unreserveTenant(tenant, t)
			if i >= installed {
				m.reserved -= t.MemoryBytes
			}
		}
		m.mu.Unlock()
	}()
	for range count {
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if fctx.Err() != nil {
				errs[i] = fctx.Err()
				return
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
	m.mu.Lock()
	for i, sb := range sbs {
		m.sandboxes[ids[i]] = sb
		installed++
	}
	m.mu.Unlock()
	m.saveExpiry()
	for i := range out {
		out[i] = m.snapshot(sbs[i])
	}
	m.lg.Info("sandboxes forked", zap.String("snapshot", spec.Snapshot), zap.Int("count", count), zap.Strings("sandbox-ids", ids))
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
