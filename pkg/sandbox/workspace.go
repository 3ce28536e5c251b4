package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/snapshot"
)

// Durable workspaces (docs/workspaces.md; threat analysis in
// docs/security.md, "Workspace snapshots and restore"): snapshots of a
// box's workspace, creates from one, and suspend (PAUSE, HIBERNATE) with a
// transparent wake on the next operation.

// SuspendMode is how SuspendSandbox suspends a box.
type SuspendMode string

// Suspend modes.
const (
	// SuspendPause freezes the container in place (docker pause): memory
	// and processes kept, no CPU.
	SuspendPause SuspendMode = "pause"
	// SuspendHibernate snapshots the workspace and removes the container:
	// only storage is kept. The processes end, except under gVisor on an
	// engine that can checkpoint, where their memory is kept too
	// (memory.go).
	SuspendHibernate SuspendMode = "hibernate"
)

// SuspendResult says what a suspend kept.
type SuspendResult struct {
	Info Info
	// ProcessesKept: the box's processes survive (PAUSE, or a hibernation
	// with its memory); false for a workspace-only hibernation.
	ProcessesKept bool
	// Snapshot is the hibernation's snapshot.
	Snapshot string
}

func (m *Manager) repo() (*snapshot.Repo, error) {
	if m.cfg.Snapshots == nil {
		return nil, errorf(CodeInvalid, "worker %s has no snapshot store (sandboxd's snapshots section)", m.cfg.Worker)
	}
	return m.cfg.Snapshots, nil
}

// snapErr converts a snapshot error into a lifecycle error.
func snapErr(err error) error {
	var se *snapshot.Error
	if !errors.As(err, &se) {
		return err
	}
	code := map[snapshot.Code]Code{
		snapshot.CodeNotFound: CodeSnapshotNotFound, snapshot.CodeDataLoss: CodeDataLoss,
		snapshot.CodeQuota: CodeQuota, snapshot.CodeInvalid: CodeInvalid,
	}[se.Code]
	if code == "" {
		return err
	}
	return &Error{Code: code, Message: se.Error(), Limit: se.Limit, Err: err}
}

// Snapshot captures sandbox id's workspace into a new snapshot of its
// tenant. The box is paused while the engine archives its workspace from
// the host side (its own agent is not asked), and unpaused after; a paused
// box stays paused; a hibernated box's snapshot is its hibernation's.
func (m *Manager) Snapshot(ctx context.Context, id string) (*snapshot.Manifest, error) {
	repo, err := m.repo()
	if err != nil {
		return nil, err
	}
	sb, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	sb.life.Lock()
	defer sb.life.Unlock()
	if info := m.snapshot(sb); info.State == StateHibernated {
		man, err := repo.Get(ctx, info.Tenant, info.Snapshot)
		return man, snapErr(err)
	}
	end := m.begin(sb)
	defer end()
	return m.capture(ctx, repo, sb)
}

// freezeTries bounds how often pause asks the runtime to freeze a box.
// Under cgroup v1 runc gives up ("unable to freeze") when a task of the box
// stays between states for its short poll, which a busy machine makes
// common; a later try succeeds.
const freezeTries = 8

// pause freezes the box's container, retrying a freeze the runtime could
// not finish with a doubling delay. One that never finishes is UNAVAILABLE
// (the box keeps running and the caller may retry), not an internal error.
func (m *Manager) pause(ctx context.Context, sandboxID, containerID string) error {
	delay := 20 * time.Millisecond
	for try := 1; ; try++ {
		_, err := m.api.ContainerPause(ctx, containerID, client.ContainerPauseOptions{})
		if err == nil || !strings.Contains(err.Error(), "unable to freeze") {
			return err
		}
		if try == freezeTries {
			return errorf(CodeUnavailable, "sandbox %s could not be frozen after %d tries (%v); it keeps running: retry", sandboxID, try, err)
		}
		m.lg.Info("the runtime did not finish freezing the box; retrying", zap.String("sandbox-id", sandboxID), zap.Int("try", try), zap.Error(err))
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay *= 2
	}
}

// capture snapshots sb's workspace; sb.life is held.
func (m *Manager) capture(ctx context.Context, repo *snapshot.Repo, sb *sandbox) (*snapshot.Manifest, error) {
	info := m.snapshot(sb)
	switch info.State {
	case StateRunning, StatePaused:
	case StateFailed:
		return nil, errorf(CodeFailed, "sandbox %s failed: %s", info.ID, info.FailureReason)
	default:
		return nil, errorf(CodeNotFound, "sandbox %s is %s", info.ID, info.State)
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineTimeout)
	defer cancel()
	if info.State == StateRunning {
		if err := m.pause(ectx, info.ID, info.ContainerID); err != nil {
			return nil, fmt.Errorf("pause sandbox %s for its snapshot: %w", info.ID, err)
		}
		defer func() {
			if _, err := m.api.ContainerUnpause(ectx, info.ContainerID, client.ContainerUnpauseOptions{}); err != nil {
				m.lg.Warn("unpause after snapshot", zap.String("sandbox-id", info.ID), zap.Error(err))
			}
		}()
	}
	res, err := m.api.CopyFromContainer(ctx, info.ContainerID, client.CopyFromContainerOptions{SourcePath: info.Settings.WorkingDir})
	if err != nil {
		return nil, fmt.Errorf("archive the workspace of %s: %w", info.ID, err)
	}
	defer res.Content.Close()
	sb.mu.Lock()
	parent := sb.last
	sb.mu.Unlock()
	man, err := repo.Capture(ctx, snapshot.Meta{Tenant: info.Tenant, Sandbox: info.ID, Template: info.Template, Parent: parent},
		res.Content, path.Base(info.Settings.WorkingDir), info.Settings.DiskBytes)
	if err != nil {
		return nil, snapErr(err)
	}
	sb.mu.Lock()
	sb.last = man.ID
	sb.mu.Unlock()
	m.lg.Info("sandbox snapshot taken", zap.String("sandbox-id", info.ID), zap.String("snapshot", man.ID), zap.Int64("size", man.Size), zap.Int64("stored-bytes", man.StoredBytes))
	return man, nil
}

// ListSnapshots lists a tenant's snapshots.
func (m *Manager) ListSnapshots(ctx context.Context, tenant string) ([]snapshot.Summary, error) {
	repo, err := m.repo()
	if err != nil {
		return nil, err
	}
	l, err := repo.List(ctx, tenantOf(tenant))
	return l, snapErr(err)
}

// DeleteSnapshot removes a tenant's snapshot; chunks no other snapshot of
// the tenant names are collected.
func (m *Manager) DeleteSnapshot(ctx context.Context, tenant, id string) error {
	repo, err := m.repo()
	if err != nil {
		return err
	}
	return snapErr(repo.Delete(ctx, tenantOf(tenant), id))
}

// restoreSource is what a restore fills a new workspace from: the tar to
// copy in (open) and, once the copy has ended with copyErr, the fill's
// outcome (done: nil only when the copy succeeded and what was copied is
// the whole verified snapshot).
type restoreSource interface {
	open(ctx context.Context) (tar io.Reader, done func(copyErr error) error)
	// extract writes the workspace under dir, owned by uid:gid (the host
	// fill, hostfill.go).
	extract(ctx context.Context, dir string, uid, gid int) error
}

// restoreTar is a verified snapshot's tar in an unlinked temporary file;
// each box filled from it reads its own section, so a fork fills its boxes
// from one verification concurrently.
type restoreTar struct {
	f    *os.File
	size int64
}

func (r *restoreTar) open(context.Context) (io.Reader, func(error) error) {
	return io.NewSectionReader(r.f, 0, r.size), func(copyErr error) error { return copyErr }
}

func (r *restoreTar) extract(_ context.Context, dir string, uid, gid int) error {
	return untar(io.NewSectionReader(r.f, 0, r.size), dir, uid, gid, true)
}

// Close releases the file.
func (r *restoreTar) Close() error { return r.f.Close() }

// prepareRestore verifies a tenant's snapshot completely and writes the
// tar a restore copies into a new workspace to a temporary file (nothing
// is created before it verifies; the caller closes it). Forks use it: one
// verification fills every box.
func (m *Manager) prepareRestore(ctx context.Context, tenant, id string, t Template) (*restoreTar, error) {
	repo, err := m.repo()
	if err != nil {
		return nil, err
	}
	uid, gid, _ := parseUser(m.cfg.User)
	f, err := os.CreateTemp("", "plumb-restore-*.tar")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name()) // the open file is all that is needed
	man, err := repo.Restore(ctx, tenantOf(tenant), id, f, uid, gid)
	if err == nil {
		err = fitsDisk(man, t)
	}
	var size int64
	if err == nil {
		size, err = f.Seek(0, io.SeekCurrent)
	}
	if err != nil {
		f.Close()
		return nil, snapErr(err)
	}
	return &restoreTar{f: f, size: size}, nil
}

// fitsDisk refuses a snapshot over the box's disk limit.
func fitsDisk(man *snapshot.Manifest, t Template) error {
	if t.DiskBytes > 0 && man.Size > t.DiskBytes {
		return invalidField("disk_bytes", "snapshot %s holds %d bytes, over the box's disk limit of %d", man.ID, man.Size, t.DiskBytes)
	}
	return nil
}

// restoreStream streams a snapshot into one box: its chunks are read
// ahead, decompressed and verified while the engine extracts the tar, so
// fetching, checking and the engine's write overlap, and no temporary
// copy is made. Its manifest is verified (and the disk limit checked)
// before anything is created; a chunk that fails mid-stream fails the
// fill, and the box, never started, is removed with its volume.
type restoreStream struct {
	repo     *snapshot.Repo
	man      *snapshot.Manifest
	uid, gid int
}

// streamRestore opens a tenant's snapshot for one box's restore.
func (m *Manager) streamRestore(ctx context.Context, tenant, id string, t Template) (*restoreStream, error) {
	repo, err := m.repo()
	if err != nil {
		return nil, err
	}
	man, err := repo.Get(ctx, tenantOf(tenant), id)
	if err == nil {
		err = fitsDisk(man, t)
	}
	if err != nil {
		return nil, snapErr(err)
	}
	uid, gid, _ := parseUser(m.cfg.User)
	return &restoreStream{repo: repo, man: man, uid: uid, gid: gid}, nil
}

// errFillEnded ends the stream's pipe once the engine's copy has returned.
var errFillEnded = errors.New("the workspace copy ended")

func (r *restoreStream) open(ctx context.Context) (io.Reader, func(error) error) {
	pr, pw := io.Pipe()
	produced := make(chan error, 1)
	go func() {
		err := r.repo.WriteTar(ctx, r.man, pw, r.uid, r.gid)
		pw.CloseWithError(err) // nil: the reader sees EOF
		produced <- err
	}()
	return pr, func(copyErr error) error {
		pr.CloseWithError(errFillEnded) // a producer still writing stops
		err := <-produced
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, errFillEnded):
			return snapErr(err) // the snapshot's own failure (DATA_LOSS) comes first
		case copyErr != nil:
			return copyErr
		default:
			// The engine answered before it had read the whole tar: what it
			// extracted is not the whole snapshot.
			return fmt.Errorf("the engine ended the copy of snapshot %s before its end", r.man.ID)
		}
	}
}

func (r *restoreStream) extract(ctx context.Context, dir string, uid, gid int) error {
	return extractSnapshot(ctx, r.repo, r.man, dir, uid, gid, true)
}

// fill copies a restore source into a created, not yet started
// container's workspace (the engine extracts it inside the container's
// root, owning each entry as its header says: the sandbox user). The fill
// fails when the copy or the source does, whatever the engine answered.
func (m *Manager) fill(ctx context.Context, cid string, t Template, src restoreSource) error {
	content, done := src.open(ctx)
	_, err := m.api.CopyToContainer(ctx, cid, client.CopyToContainerOptions{DestinationPath: t.WorkingDir, Content: content})
	if err != nil {
		err = fmt.Errorf("restore the workspace: %w", err)
	}
	return done(err)
}

// Suspend pauses or hibernates sandbox id. A box with operations or
// processes in flight is not suspended (CodeUnavailable: retry later).
func (m *Manager) Suspend(ctx context.Context, id string, mode SuspendMode) (SuspendResult, error) {
	sb, err := m.lookup(id)
	if err != nil {
		return SuspendResult{}, err
	}
	sb.life.Lock()
	defer sb.life.Unlock()
	return m.suspend(ctx, sb, mode, false)
}

// suspend does Suspend; sb.life is held. idle: the reaper's, which skips
// a box that became busy.
func (m *Manager) suspend(ctx context.Context, sb *sandbox, mode SuspendMode, idle bool) (SuspendResult, error) {
	sb.mu.Lock()
	info, busy := sb.info, sb.busy+sb.procs+sb.conns
	sb.mu.Unlock()
	switch info.State {
	case StateRunning, StatePaused, StateHibernated:
	case StateFailed:
		return SuspendResult{}, errorf(CodeFailed, "sandbox %s failed: %s", info.ID, info.FailureReason)
	default:
		return SuspendResult{}, errorf(CodeNotFound, "sandbox %s is %s", info.ID, info.State)
	}
	if busy > 0 && info.State == StateRunning {
		return SuspendResult{}, errorf(CodeUnavailable, "sandbox %s has operations or processes in flight; suspend it when they end", info.ID)
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineTimeout)
	defer cancel()
	switch mode {
	case SuspendPause:
		switch info.State {
		case StateHibernated:
			return SuspendResult{Info: info, Snapshot: info.Snapshot}, nil
		case StateRunning:
			if err := m.pause(ectx, info.ID, info.ContainerID); err != nil {
				return SuspendResult{}, fmt.Errorf("pause sandbox %s: %w", info.ID, err)
			}
			m.setState(sb, StatePaused, "")
			m.lg.Info("sandbox paused", zap.String("sandbox-id", info.ID), zap.Bool("idle", idle))
		}
		return SuspendResult{Info: m.snapshot(sb), ProcessesKept: true}, nil
	case SuspendHibernate:
		if info.State == StateHibernated {
			return SuspendResult{Info: info, Snapshot: info.Snapshot}, nil
		}
		repo, err := m.repo()
		if err != nil {
			return SuspendResult{}, err
		}
		if info.Settings.Network == NetworkEgress {
			return SuspendResult{}, errorf(CodeInvalid, "sandbox %s has network egress: hibernating egress sandboxes is not supported yet (pause it)", info.ID)
		}
		// The box stays paused from its snapshot to its removal: a call
		// arriving meanwhile waits in wake (sb.life) and then finds it
		// hibernated, so nothing it writes is lost with the container.
		if info.State == StateRunning {
			if err := m.pause(ectx, info.ID, info.ContainerID); err != nil {
				return SuspendResult{}, fmt.Errorf("pause sandbox %s: %w", info.ID, err)
			}
			m.setState(sb, StatePaused, "")
		}
		undo := func() {
			if info.State == StateRunning {
				if _, err := m.api.ContainerUnpause(ectx, info.ContainerID, client.ContainerUnpauseOptions{}); err != nil {
					m.lg.Warn("unpause after a failed hibernation", zap.String("sandbox-id", info.ID), zap.Error(err))
					return
				}
				m.setState(sb, StateRunning, "")
			}
		}
		man, err := m.capture(ctx, repo, sb)
		if err != nil {
			undo()
			return SuspendResult{}, err
		}
		// The snapshot verifies before the only copy of the workspace goes.
		if err := repo.Verify(ctx, info.Tenant, man.ID); err != nil {
			undo()
			return SuspendResult{}, snapErr(err)
		}
		// Under gVisor the box's processes are kept too, where the engine
		// allows it; from here the container may have exited, and the
		// hibernation goes on, workspace-only if its memory is not kept.
		mem, err := m.checkpointMemory(ctx, repo, sb, man.ID)
		if err != nil {
			m.lg.Warn("hibernating workspace-only: the box's memory was not kept (its processes end)", zap.String("sandbox-id", info.ID), zap.Error(err))
		}
		// From here it holds no memory and no slot of max_sandboxes: the
		// state and the worker's counts change together (m.mu first).
		m.mu.Lock()
		sb.mu.Lock()
		deleted := sb.released // a Delete took it meanwhile: it counts nothing
		if !deleted {
			sb.info.State, sb.info.Snapshot, sb.memory = StateHibernated, man.ID, mem
		}
		ch := sb.ch
		sb.ch = nil
		sb.mu.Unlock()
		if !deleted {
			m.hibernated++
			m.reserved -= info.Settings.MemoryBytes
		}
		m.mu.Unlock()
		if ch != nil {
			ch.close()
		}
		if deleted {
			if err := repo.Delete(context.WithoutCancel(ctx), info.Tenant, man.ID); err != nil {
				m.lg.Warn("remove the snapshot of a box deleted while it hibernated", zap.String("sandbox-id", info.ID), zap.Error(err))
			}
			if mem != nil {
				m.dropMemory(ctx, info.Tenant, mem.id)
			}
			return SuspendResult{}, m.NotFound(info.ID)
		}
		if err := m.saveHibernation(sb); err != nil {
			m.lg.Warn("hibernated sandbox not recorded in the state dir: a restart of this worker loses it (its snapshot stays)", zap.String("sandbox-id", info.ID), zap.Error(err))
		}
		// Unfrozen first: the engine's forced removal of a paused gVisor
		// box can report success and leave it (its snapshot is taken: what
		// box code does in these milliseconds is lost with the container).
		m.unfreeze(ectx, info.ContainerID)
		err = m.removeContainer(ectx, info.ContainerID, volumeName(info.ID))
		if err == nil {
			// A volume the engine kept would be taken up again, with its
			// files, by the wake's create of the same name.
			if _, verr := m.api.VolumeInspect(ectx, volumeName(info.ID), client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(verr) {
				err = fmt.Errorf("its workspace volume stays (%v)", verr)
			}
		}
		if err != nil {
			sb.mu.Lock()
			sb.leftover = true
			sb.mu.Unlock()
			m.lg.Warn("hibernated sandbox: its container is not removed yet (removed on wake or delete)", zap.String("sandbox-id", info.ID), zap.Error(err))
		}
		m.lg.Info("sandbox hibernated", zap.String("sandbox-id", info.ID), zap.String("snapshot", man.ID), zap.Bool("processes-kept", mem != nil), zap.Bool("idle", idle))
		return SuspendResult{Info: m.snapshot(sb), Snapshot: man.ID, ProcessesKept: mem != nil}, nil
	}
	return SuspendResult{}, invalidField("mode", "suspend mode %q is neither %q nor %q", mode, SuspendPause, SuspendHibernate)
}

func (m *Manager) setState(sb *sandbox, st State, snap string) {
	sb.mu.Lock()
	sb.info.State = st
	if snap != "" {
		sb.info.Snapshot = snap
	}
	sb.mu.Unlock()
}

// Resume wakes a suspended sandbox (a running one is left as it is).
func (m *Manager) Resume(ctx context.Context, id string) (Info, error) {
	sb, err := m.lookup(id)
	if err != nil {
		return Info{}, err
	}
	if err := m.wake(ctx, sb); err != nil {
		return Info{}, err
	}
	m.touch(sb)
	return m.snapshot(sb), nil
}

// wake unpauses a paused box or recreates a hibernated one from its
// snapshot under the same id; every operation calls it first, so a caller
// sees one slower call.
func (m *Manager) wake(ctx context.Context, sb *sandbox) error {
	sb.mu.Lock()
	st := sb.info.State
	sb.mu.Unlock()
	if st != StatePaused && st != StateHibernated {
		return nil
	}
	sb.life.Lock()
	defer sb.life.Unlock()
	info := m.snapshot(sb)
	switch info.State {
	case StatePaused:
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineTimeout)
		defer cancel()
		if _, err := m.api.ContainerUnpause(ectx, info.ContainerID, client.ContainerUnpauseOptions{}); err != nil && !cerrdefs.IsConflict(err) {
			return fmt.Errorf("unpause sandbox %s: %w", info.ID, err)
		}
		m.setState(sb, StateRunning, "")
		m.lg.Info("sandbox woken (unpaused)", zap.String("sandbox-id", info.ID))
	case StateHibernated:
		return m.wakeHibernated(ctx, sb, info)
	}
	return nil
}

// wakeHibernated recreates a hibernated box from its snapshot under the
// same id; sb.life is held. It first takes a slot and the box's memory
// from the worker's quotas, as a create does (a full worker refuses with
// CodeQuota, wakeRefused): until the new box runs nothing changes, and
// whatever fails leaves the box hibernated, its record and snapshot as
// they were, and nothing of the new box behind (start removes it).
func (m *Manager) wakeHibernated(ctx context.Context, sb *sandbox, info Info) error {
	start := time.Now()
	t := info.Settings
	if err := m.reserveOrEvict(ctx, t, info.Tenant); err != nil {
		return wakeRefused(info.ID, err)
	}
	woken := false
	defer func() {
		if !woken {
			m.mu.Lock()
			m.creating--
			m.unreserveTenant(info.Tenant, t)
			m.reserved -= t.MemoryBytes
			m.mu.Unlock()
		}
	}()
	src, err := m.streamRestore(ctx, info.Tenant, info.Snapshot, t)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	leftover, mem := sb.leftover, sb.memory
	sb.mu.Unlock()
	if leftover {
		// Its hibernation failed to remove its container or volume, which
		// would hold the names.
		if err := m.removeContainer(ctx, info.ID, volumeName(info.ID)); err != nil {
			return fmt.Errorf("wake sandbox %s: %w", info.ID, err)
		}
	}
	spec := CreateSpec{Template: info.Template, Labels: info.Labels, Tenant: info.Tenant, Snapshot: info.Snapshot, Volumes: info.Volumes, restore: src, memory: mem}
	m.mu.Lock()
	m.pending[info.ID] = true
	m.mu.Unlock()
	fresh, err := m.start(ctx, info.ID, spec, t)
	if mem != nil && (err == nil || ctx.Err() == nil) {
		// A memory image is restored at most once (two boxes never resume
		// the same processes); one that fails leaves the workspace.
		sb.mu.Lock()
		sb.memory = nil
		sb.mu.Unlock()
		m.dropMemory(ctx, info.Tenant, mem.id)
		if err != nil {
			m.lg.Warn("sandbox memory not restored: waking it from its workspace only (its processes start again)", zap.String("sandbox-id", info.ID), zap.String("memory", mem.id), zap.Error(err))
			spec.memory = nil
			fresh, err = m.start(ctx, info.ID, spec, t)
		}
	}
	m.mu.Lock()
	delete(m.pending, info.ID)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	// The record stays the caller's; it takes the new container and its
	// channel (whose callbacks then act on the record).
	fresh.mu.Lock()
	ch := fresh.ch
	fresh.ch = nil
	cid, image := fresh.info.ContainerID, fresh.image
	fresh.mu.Unlock()
	// The box holds the slot and memory the wake reserved from here: its
	// state and the worker's counts change together.
	m.mu.Lock()
	sb.mu.Lock()
	deleted := sb.released
	if !deleted {
		sb.info.ContainerID, sb.image, sb.info.State, sb.leftover = cid, image, StateRunning, false
		if ch != nil {
			if sb.ch != nil {
				sb.ch.close()
			}
			ch.owner.Store(sb)
			sb.ch, ch = ch, nil
		}
	}
	sb.mu.Unlock()
	if !deleted {
		m.creating--
		m.unreserveTenant(info.Tenant, t)
		m.hibernated--
		woken = true
	}
	m.mu.Unlock()
	if deleted {
		// Deleted while it woke: the new container is nobody's.
		if ch != nil {
			ch.close()
		}
		_ = m.removeContainer(ctx, cid, volumeName(info.ID))
		return m.NotFound(info.ID)
	}
	m.forgetHibernation(info.ID)
	m.lg.Info("sandbox woken (recreated from its hibernation snapshot)", zap.String("sandbox-id", info.ID), zap.String("snapshot", info.Snapshot),
		zap.Bool("processes-kept", spec.memory != nil), zap.Duration("took", time.Since(start)))
	return nil
}

// idleSuspend pauses or hibernates the idle boxes whose template asks for
// it (the reaper's round): hibernate_after first, then idle_suspend_after.
func (m *Manager) idleSuspend(ctx context.Context, sbs []*sandbox) {
	now := m.now()
	for _, sb := range sbs {
		sb.mu.Lock()
		st, t, idle := sb.info.State, sb.info.Settings, now.Sub(sb.info.LastUsedAt)
		busy := sb.busy + sb.procs + sb.conns
		sb.mu.Unlock()
		if busy > 0 || (st != StateRunning && st != StatePaused) || sb.member {
			continue
		}
		var mode SuspendMode
		switch {
		case t.HibernateAfter > 0 && idle >= t.HibernateAfter && m.cfg.Snapshots != nil && t.Network != NetworkEgress:
			mode = SuspendHibernate
		case t.IdleSuspendAfter > 0 && idle >= t.IdleSuspendAfter && st == StateRunning:
			mode = SuspendPause
		default:
			continue
		}
		if !sb.life.TryLock() {
			continue // a snapshot or wake in flight
		}
		if _, err := m.suspend(ctx, sb, mode, true); err != nil {
			m.lg.Warn("idle sandbox not suspended", zap.String("sandbox-id", m.snapshot(sb).ID), zap.String("mode", string(mode)), zap.Error(err))
		}
		sb.life.Unlock()
	}
}

// dropHibernation removes the snapshot a deleted hibernated box woke from
// (the TTL bounds how long it is kept), with its memory image.
func (m *Manager) dropHibernation(ctx context.Context, sb *sandbox, info Info) {
	if info.State != StateHibernated || info.Snapshot == "" || m.cfg.Snapshots == nil {
		return
	}
	sb.mu.Lock()
	mem := sb.memory
	sb.memory = nil
	sb.mu.Unlock()
	if mem != nil {
		m.dropMemory(ctx, info.Tenant, mem.id)
	}
	m.forgetHibernation(info.ID)
	if err := m.cfg.Snapshots.Delete(context.WithoutCancel(ctx), info.Tenant, info.Snapshot); err != nil && snapshot.CodeOf(err) != snapshot.CodeNotFound {
		m.lg.Warn("remove a deleted sandbox's hibernation snapshot", zap.String("sandbox-id", info.ID), zap.String("snapshot", info.Snapshot), zap.Error(err))
	}
}

// unfreeze unpauses a paused container before its removal.
func (m *Manager) unfreeze(ctx context.Context, cid string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := m.api.ContainerUnpause(ctx, cid, client.ContainerUnpauseOptions{}); err != nil && !cerrdefs.IsConflict(err) && !cerrdefs.IsNotFound(err) {
		m.lg.Warn("unpause a box for its removal", zap.String("container-id", cid), zap.Error(err))
	}
}
