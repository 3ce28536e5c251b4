package agentd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/fleet"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
	"github.com/plumbhq/plumb/pkg/store"
)

// A thread's durable workspace (docs/workspaces.md, "Threads"): agentd
// snapshots the thread's box when a run ends or pauses (OnRunEnd, under
// the thread's lease, so the snapshot is the workspace of that checkpoint),
// suspends the box of a run that waits on an interrupt, restores a lost
// box from the thread's latest snapshot (ThreadBackends.sandbox), and
// deletes the snapshots no thread names any more (DeleteThread,
// DeleteQueuedSnapshots).

// defaultSnapshotTimeout bounds one snapshot (sandbox.snapshots.timeout).
const defaultSnapshotTimeout = 5 * time.Minute

// restoreCandidates bounds the snapshots a restore tries, newest first,
// before it gives up and creates an empty box.
const restoreCandidates = 3

// suspender holds the timers that suspend the boxes of interrupted runs.
type suspender struct {
	mu     sync.Mutex
	timers map[string]*time.Timer // by thread
	closed bool
	wg     sync.WaitGroup
}

// OnRunEnd is agentd's runhost.Config.OnRunEnd part for workspaces: it
// snapshots the thread's box at the checkpoint the run ended or paused at
// (sandbox.snapshots) and, for a pause, schedules the box's suspension
// (sandbox.suspend_on_interrupt_after). A failed snapshot never fails
// anything: the run has ended; it is logged, and that checkpoint has no
// snapshot (ListCheckpoints shows it).
func (tb *ThreadBackends) OnRunEnd(ctx context.Context, end runhost.RunEnd) error {
	if tb.pool == nil {
		return nil
	}
	_, paused := end.Payload.(agent.Interrupted)
	sc := tb.cfg.Sandbox.Snapshots
	if tb.snaps != nil && (paused && sc.Interrupt() || !paused && sc.RunEnd()) {
		timeout := sc.Timeout
		if timeout <= 0 {
			timeout = defaultSnapshotTimeout
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		rec, err := tb.SnapshotThread(sctx, end.ThreadID)
		cancel()
		switch {
		case err != nil:
			tb.lg.Warn("snapshot of the thread's sandbox failed; this checkpoint has none", zap.String("thread-id", end.ThreadID),
				zap.String("run-id", end.RunID), zap.Error(err))
		case rec.SnapshotID != "":
			tb.lg.Info("snapshot of the thread's sandbox", zap.String("thread-id", end.ThreadID), zap.String("run-id", end.RunID),
				zap.String("snapshot-id", rec.SnapshotID), zap.Int64("checkpoint-id", rec.CheckpointID))
		}
	}
	if paused && tb.cfg.Sandbox.SuspendOnInterruptAfter > 0 {
		if in, ok := end.Payload.(agent.Interrupted); ok {
			tb.suspendLater(end.ThreadID, in.InterruptID)
		}
	}
	return nil
}

// SnapshotThread snapshots the thread's box and records it at the
// thread's latest checkpoint. A thread without a box, or whose worker has
// no snapshot store, takes none (a zero record, no error).
func (tb *ThreadBackends) SnapshotThread(ctx context.Context, threadID string) (store.ThreadSnapshot, error) {
	if tb.pool == nil || tb.snaps == nil {
		return store.ThreadSnapshot{}, nil
	}
	th, err := tb.threads.Thread(ctx, threadID)
	if err != nil || th.SandboxID == "" {
		return store.ThreadSnapshot{}, err
	}
	ctx = tenant.With(ctx, tenant.Norm(th.Tenant))
	c, err := tb.pool.Client(ctx, th.SandboxID)
	if err != nil {
		return store.ThreadSnapshot{}, err
	}
	resp, err := c.SnapshotSandbox(ctx, &plumbv1.SnapshotSandboxRequest{SandboxId: th.SandboxID})
	switch status.Code(err) {
	case codes.OK:
	case codes.InvalidArgument, codes.Unimplemented:
		// The worker keeps no snapshots (no snapshot store): nothing to
		// take, and nothing wrong with the thread.
		tb.lg.Debug("the thread's sandbox worker takes no snapshots", zap.String("thread-id", threadID), zap.String("sandbox-id", th.SandboxID), zap.Error(err))
		return store.ThreadSnapshot{}, nil
	case codes.NotFound:
		return store.ThreadSnapshot{}, nil // the box is gone: nothing to take
	default:
		return store.ThreadSnapshot{}, fmt.Errorf("snapshot sandbox %s: %w", th.SandboxID, err)
	}
	sn := resp.GetSnapshot()
	rec, err := tb.snaps.AddThreadSnapshot(ctx, store.ThreadSnapshot{ThreadID: threadID, SnapshotID: sn.GetId(), SandboxID: th.SandboxID, CreatedAt: sn.GetCreatedAt().AsTime()})
	if err != nil {
		// Unrecorded, nobody would ever delete it.
		if _, derr := c.DeleteSnapshot(ctx, &plumbv1.DeleteSnapshotRequest{SnapshotId: sn.GetId()}); derr != nil {
			tb.lg.Warn("delete an unrecorded snapshot", zap.String("snapshot-id", sn.GetId()), zap.Error(derr))
		}
		return store.ThreadSnapshot{}, fmt.Errorf("record snapshot %s: %w", sn.GetId(), err)
	}
	return rec, nil
}

// suspendLater suspends the thread's box after
// sandbox.suspend_on_interrupt_after unless the thread no longer waits on
// interruptID by then.
func (tb *ThreadBackends) suspendLater(threadID, interruptID string) {
	s := &tb.suspend
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if s.timers == nil {
		s.timers = map[string]*time.Timer{}
	}
	if old := s.timers[threadID]; old != nil && old.Stop() {
		s.wg.Done() // its func will not run
	}
	s.wg.Add(1)
	var tm *time.Timer
	tm = time.AfterFunc(tb.cfg.Sandbox.SuspendOnInterruptAfter, func() {
		defer s.wg.Done()
		s.mu.Lock()
		if s.timers[threadID] == tm {
			delete(s.timers, threadID)
		}
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), defaultSnapshotTimeout)
		defer cancel()
		if err := tb.suspendWaiting(ctx, threadID, interruptID); err != nil {
			tb.lg.Warn("suspend the sandbox of an interrupted thread", zap.String("thread-id", threadID), zap.Error(err))
		}
	})
	s.timers[threadID] = tm
}

// stopSuspends stops the pending suspensions and waits for one in flight.
func (tb *ThreadBackends) stopSuspends() {
	s := &tb.suspend
	s.mu.Lock()
	s.closed = true
	for id, tm := range s.timers {
		if tm.Stop() {
			s.wg.Done()
		}
		delete(s.timers, id)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// suspendWaiting suspends the thread's box if the thread still waits on
// interruptID.
func (tb *ThreadBackends) suspendWaiting(ctx context.Context, threadID, interruptID string) error {
	td, err := tb.threads.LoadThread(ctx, threadID)
	if errors.Is(err, agent.ErrThreadNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if td.Interrupt == nil || td.Interrupt.InterruptID != interruptID || td.Thread.SandboxID == "" {
		return nil // resumed (or abandoned) meanwhile
	}
	id := td.Thread.SandboxID
	ctx = tenant.With(ctx, tenant.Norm(td.Thread.Tenant))
	c, err := tb.pool.Client(ctx, id)
	if err != nil {
		return err
	}
	mode := plumbv1.SuspendMode_SUSPEND_MODE_PAUSE
	if tb.cfg.Sandbox.SuspendOnInterruptMode == "hibernate" {
		mode = plumbv1.SuspendMode_SUSPEND_MODE_HIBERNATE
	}
	resp, err := c.SuspendSandbox(ctx, &plumbv1.SuspendSandboxRequest{SandboxId: id, Mode: mode})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		return fmt.Errorf("suspend sandbox %s: %w", id, err)
	}
	tb.lg.Info("suspended the sandbox of a thread waiting on an interrupt", zap.String("thread-id", threadID), zap.String("sandbox-id", id),
		zap.String("state", resp.GetSandbox().GetState().String()))
	return nil
}

// restorable returns the thread's snapshots a new box may be created
// from, newest first (at most restoreCandidates).
func (tb *ThreadBackends) restorable(ctx context.Context, threadID string) []store.ThreadSnapshot {
	if tb.snaps == nil {
		return nil
	}
	list, err := tb.snaps.ThreadSnapshots(ctx, threadID)
	if err != nil {
		tb.lg.Warn("list the thread's snapshots", zap.String("thread-id", threadID), zap.Error(err))
		return nil
	}
	var out []store.ThreadSnapshot
	for i := len(list) - 1; i >= 0 && len(out) < restoreCandidates; i-- {
		out = append(out, list[i])
	}
	return out
}

// createFrom creates the thread's new box from the newest of snaps that
// restores, or an empty one when none does (or there is none). It
// returns the snapshot used (zero when none) and why the others did not
// restore.
func (tb *ThreadBackends) createFrom(ctx context.Context, req *plumbv1.CreateSandboxRequest, snaps []store.ThreadSnapshot) (*plumbv1.Sandbox, store.ThreadSnapshot, []string, error) {
	var failed []string
	for _, sn := range snaps {
		r := proto.CloneOf(req)
		r.SnapshotId = sn.SnapshotID
		sb, err := tb.pool.CreatePreferring(ctx, r, sandboxapi.WorkerOf(sn.SandboxID))
		switch status.Code(err) {
		case codes.OK:
			return sb, sn, failed, nil
		case codes.NotFound, codes.DataLoss, codes.FailedPrecondition, codes.InvalidArgument:
			tb.lg.Warn("the thread's snapshot does not restore; trying an older one", zap.String("snapshot-id", sn.SnapshotID), zap.Error(err))
			failed = append(failed, fmt.Sprintf("%s: %s", sn.SnapshotID, status.Convert(err).Message()))
			continue
		}
		return nil, store.ThreadSnapshot{}, failed, err
	}
	sb, err := tb.pool.Create(ctx, req)
	return sb, store.ThreadSnapshot{}, failed, err
}

// deleteThreadSnapshots deletes the thread's snapshots no other thread
// names from the workers, forgetting each one deleted; the rest stay
// recorded, and the thread's deletion queues them for the retention
// sweeper (store.ThreadSnapshots).
func (tb *ThreadBackends) deleteThreadSnapshots(ctx context.Context, threadID string) {
	if tb.snaps == nil || tb.pool == nil {
		return
	}
	list, err := tb.snaps.ThreadSnapshots(ctx, threadID)
	if err != nil {
		tb.lg.Warn("list the snapshots of a thread being deleted (the sweeper deletes them)", zap.String("thread-id", threadID), zap.Error(err))
		return
	}
	for _, sn := range list {
		if sn.Shared {
			continue
		}
		if err := tb.deleteSnapshot(ctx, sn.Tenant, sn.SandboxID, sn.SnapshotID); err != nil {
			tb.lg.Warn("delete a snapshot of a deleted thread (the retention sweeper retries)", zap.String("thread-id", threadID),
				zap.String("snapshot-id", sn.SnapshotID), zap.Error(err))
			continue
		}
		if err := tb.snaps.ForgetThreadSnapshot(ctx, threadID, sn.SnapshotID); err != nil {
			tb.lg.Warn("forget a deleted snapshot", zap.String("snapshot-id", sn.SnapshotID), zap.Error(err))
		}
	}
}

// DeleteQueuedSnapshots deletes up to limit snapshots of the deletion
// queue from the workers (the retention sweeper calls it every pass); one
// that fails stays queued for the next pass. It returns how many it
// deleted.
func (tb *ThreadBackends) DeleteQueuedSnapshots(ctx context.Context, limit int) (int, error) {
	if tb.snaps == nil || tb.pool == nil {
		return 0, nil
	}
	queued, err := tb.snaps.QueuedSnapshotDeletions(ctx, limit)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, d := range queued {
		if err := tb.deleteSnapshot(ctx, d.Tenant, d.SandboxID, d.SnapshotID); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := tb.snaps.SnapshotDeleted(ctx, d.SnapshotID); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// deleteSnapshot deletes a tenant's snapshot taken of sandboxID: on that
// box's worker (its local store may be the only one holding it) or, when
// that worker is no longer part of the fleet, on any worker (a shared S3
// store). NOT_FOUND from the box's own worker, or from every worker when
// it is gone, means there is nothing left to delete.
func (tb *ThreadBackends) deleteSnapshot(ctx context.Context, tenantName, sandboxID, snapshotID string) error {
	ctx = tenant.With(ctx, tenant.Norm(tenantName))
	req := &plumbv1.DeleteSnapshotRequest{SnapshotId: snapshotID}
	c, err := tb.pool.Client(ctx, sandboxID)
	if err == nil {
		_, err = c.DeleteSnapshot(ctx, req)
		if status.Code(err) == codes.NotFound {
			return nil
		}
		return err
	}
	if !errors.Is(err, fleet.ErrUnknownWorker) {
		return fmt.Errorf("delete snapshot %s: %w", snapshotID, err)
	}
	others := tb.pool.Healthy()
	if len(others) == 0 {
		return fmt.Errorf("delete snapshot %s: no healthy worker", snapshotID)
	}
	for name, c := range others {
		_, err := c.DeleteSnapshot(ctx, req)
		switch status.Code(err) {
		case codes.OK:
			return nil
		case codes.NotFound:
			continue
		}
		return fmt.Errorf("delete snapshot %s on worker %s: %w", snapshotID, name, err)
	}
	return nil
}

// restoredNotice tells the model that the thread's sandbox was lost and
// recreated from a snapshot.
func restoredNotice(home string, sn store.ThreadSnapshot, why string) string {
	return fmt.Sprintf("Notice: this thread's sandbox %s, so a new sandbox was created for this call from the thread's workspace snapshot %s "+
		"(taken %s). The files of its workspace (%s) are as they were then; changes made after that snapshot, installed system packages "+
		"outside the workspace, and background processes are gone: processes must be started again.",
		why, sn.SnapshotID, sn.CreatedAt.UTC().Format(time.RFC3339), home)
}

// forkNotice tells the model that the thread's first sandbox was created
// from a snapshot (a fork of another thread).
func forkNotice(home string, sn store.ThreadSnapshot) string {
	return fmt.Sprintf("Notice: this thread's sandbox was created for this call from the workspace snapshot %s (taken %s): "+
		"the files of its workspace (%s) are as they were then; background processes of that time are not running.",
		sn.SnapshotID, sn.CreatedAt.UTC().Format(time.RFC3339), home)
}

// withHibernation puts the newest snapshot the workers' store lists for
// the lost box id first in snaps (newest first) when it is newer than
// the thread's own: a box hibernated after the thread's last snapshot was
// taken. The list comes from the first healthy worker that answers (a
// shared store lists the same everywhere); without one, snaps is
// returned as it is.
func (tb *ThreadBackends) withHibernation(ctx context.Context, threadID, id string, snaps []store.ThreadSnapshot) []store.ThreadSnapshot {
	for _, c := range tb.pool.Healthy() {
		resp, err := c.ListSnapshots(ctx, &plumbv1.ListSnapshotsRequest{})
		if err != nil {
			continue
		}
		var best *plumbv1.Snapshot
		for _, sn := range resp.GetSnapshots() {
			if sn.GetSandboxId() == id && !sn.GetCorrupt() && (best == nil || sn.GetCreatedAt().AsTime().After(best.GetCreatedAt().AsTime())) {
				best = sn
			}
		}
		if best == nil || len(snaps) > 0 && (snaps[0].SnapshotID == best.GetId() || !best.GetCreatedAt().AsTime().After(snaps[0].CreatedAt)) {
			return snaps
		}
		own := store.ThreadSnapshot{ThreadID: threadID, SnapshotID: best.GetId(), SandboxID: id, CreatedAt: best.GetCreatedAt().AsTime()}
		return append([]store.ThreadSnapshot{own}, snaps...)
	}
	return snaps
}
