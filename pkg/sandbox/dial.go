package sandbox

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"go.uber.org/zap"
)

// channel returns the sandbox's open agent channel, opening a new one when
// there is none or the last one was reset. A box has at most one dial in
// flight: every caller that finds no channel waits for that dial and
// shares its result, so a herd of first calls (after a worker restart, or
// a reset) starts one agent, not one per call. The dial runs on its own,
// bounded by dialTimeout and the manager's life but not by any caller: a
// caller whose ctx ends stops waiting and the others keep their dial. The
// engine is dialled without holding the sandbox's lock (a hung engine
// call must not stall the reaper or List).
func (m *Manager) channel(ctx context.Context, sb *sandbox) (*channel, error) {
	sb.mu.Lock()
	if err := sb.unusable(); err != nil {
		sb.mu.Unlock()
		return nil, err
	}
	if sb.ch != nil && !sb.ch.broken() {
		ch := sb.ch
		sb.mu.Unlock()
		return ch, nil
	}
	d := sb.dialing
	if d == nil {
		if m.isClosing() {
			sb.mu.Unlock()
			return nil, errorf(CodeShuttingDown, "the sandbox worker is shutting down")
		}
		d = &dialing{done: make(chan struct{})}
		sb.dialing = d
		m.bg.Add(1)
		go m.openChannel(sb, d)
	}
	sb.mu.Unlock()
	select {
	case <-d.done:
		return d.ch, d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dialing is the dial of a sandbox's agent channel in flight; ch or err
// is set when done is closed.
type dialing struct {
	done chan struct{}
	ch   *channel
	err  error
}

// openChannel dials sb's agent, installs the channel unless sb became
// unusable or the manager closed meanwhile, and hands the result to the
// callers waiting on d. A failed dial is logged here, once for all of
// them.
func (m *Manager) openChannel(sb *sandbox, d *dialing) {
	defer m.bg.Done()
	sb.mu.Lock()
	id, cid, t := sb.info.ID, sb.info.ContainerID, sb.info.Settings
	sb.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	go func() { // Close ends a dial in flight
		select {
		case <-m.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	s, err := m.dial(ctx, cid, t)
	if err != nil && !m.isClosing() {
		// Find out, once for every caller, whether the box is gone.
		ictx, cancel := context.WithTimeout(context.Background(), engineTimeout)
		m.checkAlive(ictx, sb)
		cancel()
	}
	var ch *channel
	if err == nil {
		ch = m.newAgentChannel(sb, s, false)
	}
	sb.mu.Lock()
	sb.dialing = nil
	switch uerr := sb.unusable(); {
	case uerr != nil:
		// Failed or deleted meanwhile: that, not how the dial ended, is
		// what the callers need to know.
		err = uerr
	case m.isClosing():
		// Close has closed, or is closing, the channels it found; this
		// one would outlive it.
		err = errorf(CodeShuttingDown, "the sandbox worker is shutting down")
	case err == nil:
		sb.ch, d.ch = ch, ch
	}
	if ch != nil && d.ch == nil {
		ch.close()
	}
	d.err = err
	sb.mu.Unlock()
	// Logged before the callers wake: once they have the failure, its
	// log line is written.
	if err != nil && CodeOf(err) == "" {
		m.lg.Warn("open the sandbox agent channel", zap.String("sandbox-id", id), zap.Error(err))
	}
	close(d.done)
}

// newAgentChannel opens a channel to sb's agent on s. Its violations count
// against its owner (sb, until wake hands the channel to another record).
// pid1 says the agent at the other end is the box's PID 1 (the container's
// stdio): when that stream ends by itself, the box has most likely ended
// with its agent, and the container is checked at once (agentLost) so the
// sandbox says so, instead of its next call finding out. That check is
// armed (ch.armed) once the box is created: a create that fails cleans up
// after itself and must not also fail a record that was never handed out.
func (m *Manager) newAgentChannel(sb *sandbox, s stream, pid1 bool) *channel {
	sb.mu.Lock()
	id := sb.info.ID
	sb.mu.Unlock()
	owner := new(atomic.Pointer[sandbox])
	owner.Store(sb)
	armed := new(atomic.Bool)
	opts := channelOptions{
		budget:      m.budget,
		onViolation: func(err error) { m.violation(owner.Load(), err) },
		lentStreams: &m.lentStreams,
	}
	if pid1 {
		opts.onLost = func(error) {
			if m.isClosing() || !armed.Load() {
				return
			}
			m.bg.Add(1)
			go m.agentLost(owner.Load())
		}
	}
	ch := newChannel(s, m.lg.With(zap.String("sandbox-id", id)), opts)
	ch.owner, ch.armed, ch.pid1 = owner, armed, pid1
	return ch
}

// agentLost runs when the stdio channel of sb, whose agent is PID 1,
// ended by itself: it checks the container and fails the sandbox with the
// reason when it is no longer running. The engine ends the attach as the
// container exits but may record the exit a moment later, so it asks again
// for a while before concluding the box still runs (then only the channel
// was lost, and the next call dials an exec'd agent).
func (m *Manager) agentLost(sb *sandbox) {
	defer m.bg.Done()
	for range 40 {
		ctx, cancel := context.WithTimeout(context.Background(), engineTimeout)
		m.checkAlive(ctx, sb)
		cancel()
		sb.mu.Lock()
		st := sb.info.State
		sb.mu.Unlock()
		if st != StateRunning {
			return
		}
		select {
		case <-m.closing:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// dialTimeout bounds opening an agent channel (two engine calls).
const dialTimeout = 30 * time.Second

// isClosing reports whether Close has begun.
func (m *Manager) isClosing() bool {
	select {
	case <-m.closing:
		return true
	default:
		return false
	}
}

// unusable returns why no channel may be opened to the sandbox, or nil;
// sb.mu is held.
func (sb *sandbox) unusable() error {
	switch sb.info.State {
	case StateFailed:
		return errorf(CodeFailed, "sandbox %s failed: %s; delete it and create a new one", sb.info.ID, sb.info.FailureReason)
	case StateDeleting:
		return errorf(CodeNotFound, "sandbox %s is being deleted", sb.info.ID)
	}
	return nil
}

// violation counts a protocol violation of sb's agent channel. Past the
// allowance the sandbox is failed with a reason naming the violation and
// its container is killed in the background (Close waits for it).
func (m *Manager) violation(sb *sandbox, err error) {
	sb.mu.Lock()
	sb.violations++
	n, id, cid := sb.violations, sb.info.ID, sb.info.ContainerID
	sb.mu.Unlock()
	m.lg.Warn("sandbox agent broke the channel protocol", zap.String("sandbox-id", id), zap.Int("violations", n), zap.Error(err))
	if n <= m.cfg.ViolationAllowance {
		return
	}
	if !m.fail(sb, fmt.Sprintf("its agent broke the channel protocol %d times (allowance %d); last: %v", n, m.cfg.ViolationAllowance, err)) {
		return
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := m.api.ContainerKill(ctx, cid, client.ContainerKillOptions{Signal: "KILL"}); err != nil && !cerrdefs.IsNotFound(err) {
			m.lg.Warn("kill failed sandbox", zap.String("sandbox-id", id), zap.Error(err))
		}
	}()
}

// dial starts `sandbox-agent serve` with one exec and attaches its stdio.
func (m *Manager) dial(ctx context.Context, cid string, t Template) (stream, error) {
	root := t.FilesRoot
	if root == "" {
		root = "/"
	}
	uid, gid, err := parseUser(m.cfg.User)
	if err != nil {
		return stream{}, err
	}
	// The agent runs as container root with only SETUID, SETGID and KILL
	// (see containerSpec); it drops to the sandbox user for files and
	// commands, which therefore cannot reach it.
	ex, err := m.api.ExecCreate(ctx, cid, client.ExecCreateOptions{
		User:         AgentUser,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		WorkingDir:   t.WorkingDir,
		Cmd:          agentCmd(root, t.WorkingDir, uid, gid, m.cfg.Unhardened),
	})
	if err != nil {
		return stream{}, fmt.Errorf("exec sandbox agent: %w", err)
	}
	att, err := m.api.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return stream{}, fmt.Errorf("attach sandbox agent: %w", err)
	}
	// Agent stderr is diagnostics only; it is logged, bounded.
	return attachStream(att.HijackedResponse, &logWriter{lg: m.lg, max: 64 << 10}), nil
}

type closerFunc func() error

// logWriter logs what the agent writes to stderr, up to max bytes.
type logWriter struct {
	lg      *zap.Logger
	max     int
	written int
}
