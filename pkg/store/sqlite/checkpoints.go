package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

// SaveCheckpoint implements agent.Store: one transaction.
func (s *Store) SaveCheckpoint(ctx context.Context, cp *agent.Checkpoint) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		var count int
		var md string
		var updated int64
		err := tx.QueryRowContext(ctx, `SELECT message_count, metadata, updated_at FROM threads WHERE id = ?`, cp.ThreadID).Scan(&count, &md, &updated)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("checkpoint %s: %w", cp.ThreadID, agent.ErrThreadNotFound)
		}
		if err != nil {
			return err
		}
		if cp.Fence != nil {
			cur, err := leaseRow(ctx, tx, cp.ThreadID)
			if err != nil {
				return fmt.Errorf("checkpoint %s: lease: %w", cp.ThreadID, err)
			}
			if err := store.CheckFence(cp.ThreadID, cp.Fence, cur); err != nil {
				return err
			}
		}
		if cp.Truncate && cp.Base <= count {
			if _, err := tx.ExecContext(ctx, `DELETE FROM messages WHERE thread_id = ? AND idx >= ?`, cp.ThreadID, cp.Base); err != nil {
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
		for _, e := range cp.EditCalls {
			if err := editCall(ctx, tx, cp.ThreadID, e); err != nil {
				return err
			}
		}
		for i, m := range cp.Append {
			body, err := store.JSON(m)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO messages (thread_id, idx, body) VALUES (?, ?, ?)`, cp.ThreadID, count+i, body); err != nil {
				return fmt.Errorf("append message %d: %w", count+i, err)
			}
		}
		count += len(cp.Append)
		for p, doc := range cp.Files {
			var err error
			if doc == nil || string(doc) == "null" {
				_, err = tx.ExecContext(ctx, `DELETE FROM thread_files WHERE thread_id = ? AND path = ?`, cp.ThreadID, p)
			} else {
				_, err = tx.ExecContext(ctx, `INSERT INTO thread_files (thread_id, path, doc) VALUES (?, ?, ?)
					ON CONFLICT (thread_id, path) DO UPDATE SET doc = excluded.doc`, cp.ThreadID, p, string(doc))
			}
			if err != nil {
				return fmt.Errorf("state file %s: %w", p, err)
			}
		}
		if cp.Metadata != nil {
			var err error
			if md, err = store.MergeMetadata(md, cp.Metadata); err != nil {
				return err
			}
			if err := writeLabels(ctx, tx, cp.ThreadID, cp.Metadata); err != nil {
				return err
			}
		}
		st, err := store.JSON(store.State{Todos: cp.Todos, Summary: cp.Summary, Private: cp.Private, Pending: cp.Pending})
		if err != nil {
			return err
		}
		var intr any
		if cp.Interrupt != nil {
			b, err := store.JSON(cp.Interrupt)
			if err != nil {
				return err
			}
			intr = b
		}
		if n := store.Nanos(cp.CreatedAt); n > updated {
			updated = n
		}
		if _, err := tx.ExecContext(ctx, `UPDATE threads SET message_count = ?, metadata = ?, state = ?, interrupt = ?, updated_at = ? WHERE id = ?`,
			count, md, st, intr, updated, cp.ThreadID); err != nil {
			return err
		}
		if cp.Run.RunID != "" {
			rec, err := store.JSON(cp.Run)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO runs (run_id, thread_id, status, record, created_at) VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, record = excluded.record`,
				cp.Run.RunID, cp.ThreadID, string(cp.Run.Status), rec, store.RunCreatedNanos(cp.Run)); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO checkpoints (thread_id, run_id, phase, step, message_count, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
			cp.ThreadID, cp.Run.RunID, string(cp.Phase), cp.Step, count, store.Nanos(cp.CreatedAt)); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM checkpoints WHERE thread_id = ? AND id NOT IN
			(SELECT id FROM checkpoints WHERE thread_id = ? ORDER BY id DESC LIMIT ?)`, cp.ThreadID, cp.ThreadID,
			store.CheckpointsKept(s.retention, s.agentRetention, cp.Run.Spec.Agent))
		return err
	})
}

// editCall rewrites the arguments of one stored tool call.
func editCall(ctx context.Context, tx *sql.Tx, threadID string, e agent.CallEdit) error {
	var body string
	err := tx.QueryRowContext(ctx, `SELECT body FROM messages WHERE thread_id = ? AND idx = ?`, threadID, e.MessageIndex).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("checkpoint %s: no message %d: %w", threadID, e.MessageIndex, agent.ErrConflict)
	}
	if err != nil {
		return err
	}
	nb, err := store.EditCall(body, e)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", threadID, err)
	}
	_, err = tx.ExecContext(ctx, `UPDATE messages SET body = ? WHERE thread_id = ? AND idx = ?`, nb, threadID, e.MessageIndex)
	return err
}

// FailRunningRuns implements agent.Store.
func (s *Store) FailRunningRuns(ctx context.Context, message string) (int, error) {
	return s.failRuns(ctx, `SELECT run_id, record FROM runs WHERE status = ?`, message)
}

// FailUnleasedRuns implements store.LeaseStore.
func (s *Store) FailUnleasedRuns(ctx context.Context, message string) (int, error) {
	return s.failRuns(ctx, `SELECT r.run_id, r.record FROM runs r LEFT JOIN thread_leases l ON l.thread_id = r.thread_id
		WHERE r.status = ? AND (l.thread_id IS NULL OR l.released)`, message)
}

// failRuns marks the runs query selects (its parameter is RUNNING) FAILED.
func (s *Store) failRuns(ctx context.Context, query, message string) (int, error) {
	n := 0
	err := s.tx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, query, string(agent.StatusRunning))
		if err != nil {
			return err
		}
		var recs []agent.RunRecord
		for rows.Next() {
			var id, rec string
			if err := rows.Scan(&id, &rec); err != nil {
				rows.Close()
				return err
			}
			var r agent.RunRecord
			if err := json.Unmarshal([]byte(rec), &r); err != nil {
				rows.Close()
				return err
			}
			recs = append(recs, r)
		}
		rows.Close()
		for _, r := range recs {
			r.Status = agent.StatusFailed
			r.Error = &agent.RunError{Code: agent.CodeInternal, Message: message}
			b, err := store.JSON(r)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE runs SET status = ?, record = ? WHERE run_id = ?`, string(r.Status), b, r.RunID); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}
