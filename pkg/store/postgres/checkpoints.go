package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// SaveCheckpoint implements agent.Store: one transaction, holding the
// thread's row lock from the Base check to the commit.
func (s *Store) SaveCheckpoint(ctx context.Context, cp *agent.Checkpoint) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		var (
			count   int
			md      string
			updated int64
		)
		err := tx.QueryRow(ctx, `SELECT message_count, metadata, updated_at FROM threads WHERE id = $1 FOR UPDATE`, cp.ThreadID).Scan(&count, &md, &updated)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("checkpoint %s: %w", cp.ThreadID, agent.ErrThreadNotFound)
		}
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", cp.ThreadID, err)
		}
		// The thread's row lock also holds off AcquireLease, so the fence
		// checked here is the lease when the commit lands.
		if err := checkFence(ctx, tx, cp); err != nil {
			return err
		}
		if cp.Truncate && cp.Base <= count {
			if _, err := tx.Exec(ctx, `DELETE FROM messages WHERE thread_id = $1 AND idx >= $2`, cp.ThreadID, cp.Base); err != nil {
				return fmt.Errorf("checkpoint %s: truncate the log: %w", cp.ThreadID, err)
			}
			count = cp.Base
		}
		if cp.Base != count {
			return fmt.Errorf("checkpoint %s: base %d, stored %d messages: %w", cp.ThreadID, cp.Base, count, agent.ErrConflict)
		}
		if err := consumeSteers(ctx, tx, cp.ThreadID, cp.ConsumeSteers); err != nil {
			return err
		}
		// Edits run one by one: two may touch the same message.
		for _, e := range cp.EditCalls {
			var body string
			err := tx.QueryRow(ctx, `SELECT body FROM messages WHERE thread_id = $1 AND idx = $2`, cp.ThreadID, e.MessageIndex).Scan(&body)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("checkpoint %s: no message %d: %w", cp.ThreadID, e.MessageIndex, agent.ErrConflict)
			}
			if err != nil {
				return fmt.Errorf("checkpoint %s: message %d: %w", cp.ThreadID, e.MessageIndex, err)
			}
			nb, err := store.EditCall(body, e)
			if err != nil {
				return fmt.Errorf("checkpoint %s: %w", cp.ThreadID, err)
			}
			if _, err := tx.Exec(ctx, `UPDATE messages SET body = $1 WHERE thread_id = $2 AND idx = $3`, nb, cp.ThreadID, e.MessageIndex); err != nil {
				return fmt.Errorf("checkpoint %s: message %d: %w", cp.ThreadID, e.MessageIndex, err)
			}
		}
		// The rest goes to the server in one round trip.
		var b pgx.Batch
		if len(cp.Append) > 0 {
			idx := make([]int32, len(cp.Append))
			bodies := make([]string, len(cp.Append))
			for i, m := range cp.Append {
				if bodies[i], err = store.JSON(m); err != nil {
					return err
				}
				idx[i] = int32(count + i)
			}
			b.Queue(`INSERT INTO messages (thread_id, idx, body) SELECT $1, * FROM unnest($2::integer[], $3::text[])`, cp.ThreadID, idx, bodies)
		}
		count += len(cp.Append)
		for p, doc := range cp.Files {
			if doc == nil || string(doc) == "null" {
				b.Queue(`DELETE FROM thread_files WHERE thread_id = $1 AND path = $2`, cp.ThreadID, p)
			} else {
				b.Queue(`INSERT INTO thread_files (thread_id, path, doc) VALUES ($1, $2, $3)
					ON CONFLICT (thread_id, path) DO UPDATE SET doc = excluded.doc`, cp.ThreadID, p, string(doc))
			}
		}
		if cp.Metadata != nil {
			if md, err = store.MergeMetadata(md, cp.Metadata); err != nil {
				return fmt.Errorf("checkpoint %s: %w", cp.ThreadID, err)
			}
			if err := writeLabels(ctx, tx, cp.ThreadID, cp.Metadata); err != nil {
				return err
			}
		}
		st, err := store.JSON(store.State{Todos: cp.Todos, Summary: cp.Summary, Private: cp.Private, Pending: cp.Pending})
		if err != nil {
			return err
		}
		var intr *string
		if cp.Interrupt != nil {
			js, err := store.JSON(cp.Interrupt)
			if err != nil {
				return err
			}
			intr = &js
		}
		updated = max(updated, store.Nanos(cp.CreatedAt))
		b.Queue(`UPDATE threads SET message_count = $1, metadata = $2, state = $3, interrupt = $4, updated_at = $5 WHERE id = $6`,
			count, md, st, intr, updated, cp.ThreadID)
		if cp.Run.RunID != "" {
			rec, err := store.JSON(cp.Run)
			if err != nil {
				return err
			}
			b.Queue(`INSERT INTO runs (run_id, thread_id, status, record, created_at) VALUES ($1, $2, $3, $4, $5)
				ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, record = excluded.record`,
				cp.Run.RunID, cp.ThreadID, string(cp.Run.Status), rec, store.RunCreatedNanos(cp.Run))
		}
		b.Queue(`INSERT INTO checkpoints (thread_id, run_id, phase, step, message_count, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			cp.ThreadID, cp.Run.RunID, string(cp.Phase), cp.Step, count, store.Nanos(cp.CreatedAt))
		b.Queue(`DELETE FROM checkpoints WHERE thread_id = $1 AND id NOT IN
			(SELECT id FROM checkpoints WHERE thread_id = $1 ORDER BY id DESC LIMIT $2)`, cp.ThreadID,
			store.CheckpointsKept(s.retention, s.agentRetention, cp.Run.Spec.Agent))
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return fmt.Errorf("checkpoint %s: %w", cp.ThreadID, err)
		}
		return nil
	})
}

// checkFence refuses cp when its fence is not the thread's lease.
func checkFence(ctx context.Context, tx pgx.Tx, cp *agent.Checkpoint) error {
	if cp.Fence == nil {
		return nil
	}
	cur, err := leaseRow(ctx, tx, cp.ThreadID)
	if err != nil {
		return fmt.Errorf("checkpoint %s: lease: %w", cp.ThreadID, err)
	}
	return store.CheckFence(cp.ThreadID, cp.Fence, cur)
}

// FailRunningRuns implements agent.Store.
func (s *Store) FailRunningRuns(ctx context.Context, message string) (int, error) {
	return s.failRuns(ctx, `SELECT record FROM runs WHERE status = $1 FOR UPDATE`, message)
}

// FailUnleasedRuns implements store.LeaseStore.
func (s *Store) FailUnleasedRuns(ctx context.Context, message string) (int, error) {
	return s.failRuns(ctx, `SELECT r.record FROM runs r LEFT JOIN thread_leases l ON l.thread_id = r.thread_id
		WHERE r.status = $1 AND (l.thread_id IS NULL OR l.released) FOR UPDATE OF r`, message)
}

// failRuns marks the runs query selects (its $1 is RUNNING) FAILED.
func (s *Store) failRuns(ctx context.Context, query, message string) (int, error) {
	n := 0
	err := s.tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, query, string(agent.StatusRunning))
		if err != nil {
			return fmt.Errorf("running runs: %w", err)
		}
		recs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("running runs: %w", err)
		}
		var b pgx.Batch
		for _, rec := range recs {
			var r agent.RunRecord
			if err := json.Unmarshal([]byte(rec), &r); err != nil {
				return fmt.Errorf("run record: %w", err)
			}
			r.Status = agent.StatusFailed
			r.Error = &agent.RunError{Code: agent.CodeInternal, Message: message}
			js, err := store.JSON(r)
			if err != nil {
				return err
			}
			b.Queue(`UPDATE runs SET status = $1, record = $2 WHERE run_id = $3`, string(r.Status), js, r.RunID)
		}
		n = len(recs)
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return fmt.Errorf("fail running runs: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
