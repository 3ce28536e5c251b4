package sandbox

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.uber.org/zap"
)

// begin marks an operation in flight and records the activity; the
// returned func ends it (and records activity again, so a long command
// does not leave its sandbox about to expire).
func (m *Manager) begin(sb *sandbox) (end func()) {
	m.touch(sb)
	sb.mu.Lock()
	sb.busy++
	sb.mu.Unlock()
	return func() {
		sb.mu.Lock()
		sb.busy--
		sb.mu.Unlock()
		m.touch(sb)
	}
}

// touch records activity: an operation extends the expiry by the TTL.
func (m *Manager) touch(sb *sandbox) {
	sb.mu.Lock()
	now := m.now()
	sb.info.LastUsedAt = now
	if exp := now.Add(sb.info.Settings.TTL); exp.After(sb.info.ExpiresAt) {
		sb.info.ExpiresAt = exp
	}
	sb.mu.Unlock()
}

// checkAlive inspects the container of a running sandbox and marks the
// sandbox failed when it is gone or stopped.
func (m *Manager) checkAlive(ctx context.Context, sb *sandbox) {
	sb.mu.Lock()
	cid, state := sb.info.ContainerID, sb.info.State
	sb.mu.Unlock()
	if state != StateRunning {
		return
	}
	reason := ""
	res, err := m.api.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
	switch {
	case cerrdefs.IsNotFound(err):
		reason = "its container was removed"
	case err != nil:
		return // the engine is unreachable: nothing is known about the sandbox
	case res.Container.State == nil || !res.Container.State.Running:
		reason = describeExit(res.Container.State)
	}
	if reason != "" {
		m.fail(sb, reason)
	}
}

func describeExit(s *container.State) string {
	if s == nil {
		return "its container is not running"
	}
	switch {
	case s.OOMKilled:
		return fmt.Sprintf("its container was killed for exceeding its memory limit (exit code %d)", s.ExitCode)
	case s.ExitCode != 0:
		return fmt.Sprintf("its container exited with code %d", s.ExitCode)
	default:
		return "its container stopped"
	}
}

// fail marks a running sandbox failed and closes its channel; it reports
// whether it did (false when the sandbox had already failed or is being
// deleted).
func (m *Manager) fail(sb *sandbox, reason string) bool {
	defer m.releaseFailed(sb) // after sb.mu is unlocked
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.info.State != StateRunning {
		return false
	}
	sb.info.State = StateFailed
	sb.info.FailureReason = reason
	if sb.ch != nil {
		sb.ch.close()
	}
	m.lg.Warn("sandbox failed", zap.String("sandbox-id", sb.info.ID), zap.String("reason", reason))
	return true
}
