package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.ThreadSnapshots = (*Store)(nil)

// queueUnshared queues the thread's snapshot records that cond (an SQL
// condition on s, with its arguments) selects and no other thread names
// for deletion from the workers.
func queueUnshared(ctx context.Context, tx *sql.Tx, threadID string, now time.Time, cond string, args ...any) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO snapshot_deletions (snapshot_id, tenant, sandbox_id, queued_at)
		SELECT s.snapshot_id, s.tenant, s.sandbox_id, ? FROM thread_snapshots s
		WHERE s.thread_id = ? AND `+cond+` AND NOT EXISTS
			(SELECT 1 FROM thread_snapshots o WHERE o.snapshot_id = s.snapshot_id AND o.thread_id <> s.thread_id)
		ON CONFLICT (snapshot_id) DO NOTHING`, append([]any{store.Nanos(now), threadID}, args...)...)
	if err != nil {
		return fmt.Errorf("queue the snapshots of thread %s for deletion: %w", threadID, err)
	}
	return nil
}

// AddThreadSnapshot implements store.ThreadSnapshots.
func (s *Store) AddThreadSnapshot(ctx context.Context, sn store.ThreadSnapshot) (store.ThreadSnapshot, error) {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var tenant string
		err := tx.QueryRowContext(ctx, `SELECT tenant FROM threads WHERE id = ?`, sn.ThreadID).Scan(&tenant)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("snapshot of thread %s: %w", sn.ThreadID, agent.ErrThreadNotFound)
		}
		if err != nil {
			return err
		}
		sn.Tenant = tenant
		if sn.CheckpointID == 0 {
			if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM checkpoints WHERE thread_id = ?`, sn.ThreadID).Scan(&sn.CheckpointID); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO thread_snapshots (thread_id, snapshot_id, tenant, checkpoint_id, sandbox_id, created_at)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (thread_id, snapshot_id) DO NOTHING`,
			sn.ThreadID, sn.SnapshotID, tenant, sn.CheckpointID, sn.SandboxID, store.Nanos(sn.CreatedAt)); err != nil {
			return fmt.Errorf("record snapshot %s of thread %s: %w", sn.SnapshotID, sn.ThreadID, err)
		}
		const pruned = `s.snapshot_id <> ? AND s.checkpoint_id < (SELECT MIN(id) FROM checkpoints WHERE thread_id = ?)`
		if err := queueUnshared(ctx, tx, sn.ThreadID, sn.CreatedAt, pruned, sn.SnapshotID, sn.ThreadID); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM thread_snapshots AS s WHERE s.thread_id = ? AND `+pruned, sn.ThreadID, sn.SnapshotID, sn.ThreadID)
		return err
	})
	return sn, classify(err)
}

// ThreadSnapshots implements store.ThreadSnapshots.
func (s *Store) ThreadSnapshots(ctx context.Context, threadID string) ([]store.ThreadSnapshot, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT s.thread_id, s.tenant, s.checkpoint_id, s.snapshot_id, s.sandbox_id, s.created_at,
		EXISTS (SELECT 1 FROM thread_snapshots o WHERE o.snapshot_id = s.snapshot_id AND o.thread_id <> s.thread_id)
		FROM thread_snapshots s WHERE s.thread_id = ? ORDER BY s.checkpoint_id, s.created_at, s.snapshot_id`, threadID)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []store.ThreadSnapshot
	for rows.Next() {
		var sn store.ThreadSnapshot
		var created int64
		if err := rows.Scan(&sn.ThreadID, &sn.Tenant, &sn.CheckpointID, &sn.SnapshotID, &sn.SandboxID, &created, &sn.Shared); err != nil {
			return nil, classify(err)
		}
		sn.CreatedAt = store.FromNanos(created)
		out = append(out, sn)
	}
	return out, classify(rows.Err())
}

// ForgetThreadSnapshot implements store.ThreadSnapshots.
func (s *Store) ForgetThreadSnapshot(ctx context.Context, threadID, snapshotID string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM thread_snapshots WHERE thread_id = ? AND snapshot_id = ?`, threadID, snapshotID)
	return classify(err)
}

// QueuedSnapshotDeletions implements store.ThreadSnapshots.
func (s *Store) QueuedSnapshotDeletions(ctx context.Context, limit int) ([]store.SnapshotDeletion, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT snapshot_id, tenant, sandbox_id, queued_at FROM snapshot_deletions
		ORDER BY queued_at, snapshot_id LIMIT ?`, store.BatchSize(limit, 100))
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []store.SnapshotDeletion
	for rows.Next() {
		var d store.SnapshotDeletion
		var at int64
		if err := rows.Scan(&d.SnapshotID, &d.Tenant, &d.SandboxID, &at); err != nil {
			return nil, classify(err)
		}
		d.QueuedAt = store.FromNanos(at)
		out = append(out, d)
	}
	return out, classify(rows.Err())
}

// SnapshotDeleted implements store.ThreadSnapshots.
func (s *Store) SnapshotDeleted(ctx context.Context, snapshotID string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM snapshot_deletions WHERE snapshot_id = ?`, snapshotID)
	return classify(err)
}
