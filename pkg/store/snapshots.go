package store

import (
	"context"
	"errors"
	"time"
)

// ThreadSnapshots records the workspace snapshots agentd takes of a
// thread's sandbox at its checkpoints (docs/workspaces.md, "Threads"), and
// the queue of snapshots to delete from the sandboxd workers once no
// thread names them. Every implementation must pass
// storetest.RunThreadSnapshots.
//
// A snapshot may be named by several threads (a fork names the snapshot of
// the checkpoint it was forked at). A snapshot is queued for deletion
// (QueuedSnapshotDeletions) when the last thread naming it lets it go: the
// thread is deleted (Threads.DeleteThread queues its snapshots in the
// same transaction, so none is lost), or the snapshot was pruned with the
// checkpoints it belonged to (AddThreadSnapshot).
type ThreadSnapshots interface {
	// AddThreadSnapshot records s. A zero s.CheckpointID is the thread's
	// latest checkpoint (0 when it has none). It returns the record as
	// stored; an unknown thread is agent.ErrThreadNotFound. In the same
	// transaction it prunes the thread's older records whose checkpoint
	// is no longer retained, queuing those no other thread names for
	// deletion; the thread's newest record is always kept.
	AddThreadSnapshot(ctx context.Context, s ThreadSnapshot) (ThreadSnapshot, error)
	// ThreadSnapshots returns a thread's records, oldest checkpoint first
	// (then oldest snapshot), with Shared set on those another thread
	// names too. An unknown thread has none.
	ThreadSnapshots(ctx context.Context, threadID string) ([]ThreadSnapshot, error)
	// ForgetThreadSnapshot removes a thread's record of snapshotID (the
	// snapshot was deleted from the workers, or given up): nothing is
	// queued. Unknown records are not an error.
	ForgetThreadSnapshot(ctx context.Context, threadID, snapshotID string) error
	// QueuedSnapshotDeletions returns up to limit (default 100) snapshots
	// waiting to be deleted from the workers, oldest queued first.
	QueuedSnapshotDeletions(ctx context.Context, limit int) ([]SnapshotDeletion, error)
	// SnapshotDeleted takes snapshotID off the deletion queue (deleted,
	// or found gone). Unknown ids are not an error.
	SnapshotDeleted(ctx context.Context, snapshotID string) error
}

// ThreadSnapshot is one workspace snapshot of a thread's sandbox, taken
// at (or restored for) one of its checkpoints.
type ThreadSnapshot struct {
	// ThreadID is the thread; Tenant its tenant (DefaultTenant when "").
	ThreadID, Tenant string
	// CheckpointID is the checkpoint the workspace belongs to.
	CheckpointID int64
	// SnapshotID is sandboxd's snapshot (`snap-…`).
	SnapshotID string
	// SandboxID is the box it was taken of: its worker holds the snapshot
	// when the workers' store is local to each.
	SandboxID string
	// CreatedAt is when it was taken.
	CreatedAt time.Time
	// Shared is set by ThreadSnapshots when another thread names the same
	// snapshot (a fork, or the thread it was forked from).
	Shared bool
}

// SnapshotDeletion is a snapshot queued for deletion from the workers.
type SnapshotDeletion struct {
	// SnapshotID is the snapshot; Tenant owns it; SandboxID is the box it
	// was taken of (its worker first).
	SnapshotID, Tenant, SandboxID string
	// QueuedAt is when it was queued.
	QueuedAt time.Time
}

// ErrNoSuchCheckpoint: a checkpoint id names no retained checkpoint of
// the thread.
var ErrNoSuchCheckpoint = errors.New("no such checkpoint")

// LatestSnapshotAt returns the newest of list (as ThreadSnapshots orders
// it) taken at or before checkpoint (0 = any), and whether there is one.
func LatestSnapshotAt(list []ThreadSnapshot, checkpoint int64) (ThreadSnapshot, bool) {
	for i := len(list) - 1; i >= 0; i-- {
		if checkpoint == 0 || list[i].CheckpointID <= checkpoint {
			return list[i], true
		}
	}
	return ThreadSnapshot{}, false
}
