package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Runs = (*Store)(nil)

// GetRun implements store.Runs.
func (s *Store) GetRun(ctx context.Context, runID string) (store.RunInfo, error) {
	ri, _, err := store.ScanRun(s.db.QueryRowContext(ctx, `SELECT `+store.RunColumns+` FROM runs r JOIN threads t ON t.id = r.thread_id WHERE r.run_id = ?`, runID))
	if errors.Is(err, sql.ErrNoRows) {
		return ri, fmt.Errorf("run %s: %w", runID, store.ErrRunNotFound)
	}
	return ri, classify(err)
}

// ListRuns implements store.Runs.
func (s *Store) ListRuns(ctx context.Context, q store.RunQuery) ([]store.RunInfo, string, error) {
	var (
		where []string
		args  []any
	)
	if q.PageToken != "" {
		ord, err := store.DecodeRunPageToken(q.PageToken)
		if err != nil {
			return nil, "", err
		}
		where = append(where, `r.ord < ?`)
		args = append(args, ord)
	}
	if q.Tenant != "" {
		where = append(where, `t.tenant = ?`)
		args = append(args, q.Tenant)
	}
	if q.ThreadID != "" {
		where = append(where, `r.thread_id = ?`)
		args = append(args, q.ThreadID)
	}
	if q.Status != "" {
		where = append(where, `r.status = ?`)
		args = append(args, string(q.Status))
	}
	query := `SELECT ` + store.RunColumns + ` FROM runs r JOIN threads t ON t.id = r.thread_id`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	size := q.Size()
	query += ` ORDER BY r.ord DESC LIMIT ?`
	args = append(args, size+1)
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", classify(err)
	}
	defer rows.Close()
	var (
		out  []store.RunInfo
		last int64
	)
	for rows.Next() {
		ri, ord, err := store.ScanRun(rows)
		if err != nil {
			return nil, "", err
		}
		if len(out) == size {
			return out, store.EncodeRunPageToken(last), nil
		}
		out, last = append(out, ri), ord
	}
	return out, "", classify(rows.Err())
}

// EnqueueRun implements store.Runs.
func (s *Store) EnqueueRun(ctx context.Context, threadID string, rec agent.RunRecord) error {
	rec.Status = agent.StatusQueued
	b, err := store.JSON(rec)
	if err != nil {
		return err
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM threads WHERE id = ?`, threadID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("enqueue a run on %s: %w", threadID, agent.ErrThreadNotFound)
		}
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM runs WHERE run_id = ?`, rec.RunID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("enqueue run %s: %w", rec.RunID, agent.ErrConflict)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO runs (run_id, thread_id, status, record, created_at) VALUES (?, ?, ?, ?, ?)`,
			rec.RunID, threadID, string(agent.StatusQueued), b, store.RunCreatedNanos(rec))
		return err
	})
}

// NextQueuedRun implements store.Runs.
func (s *Store) NextQueuedRun(ctx context.Context, threadID string) (*store.RunInfo, error) {
	ri, _, err := store.ScanRun(s.db.QueryRowContext(ctx, `SELECT `+store.RunColumns+` FROM runs r JOIN threads t ON t.id = r.thread_id
		WHERE r.thread_id = ? AND r.status = ? ORDER BY r.ord LIMIT 1`, threadID, string(agent.StatusQueued)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, classify(err)
	}
	return &ri, nil
}

// QueuedThreads implements store.Runs.
func (s *Store) QueuedThreads(ctx context.Context, limit int) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT thread_id FROM runs WHERE status = ? GROUP BY thread_id ORDER BY min(ord) LIMIT ?`,
		string(agent.StatusQueued), limit)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, classify(rows.Err())
}

// EndQueuedRun implements store.Runs.
func (s *Store) EndQueuedRun(ctx context.Context, runID string, status agent.RunStatus, rerr *agent.RunError, finishedAt time.Time) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		var st, rec string
		err := tx.QueryRowContext(ctx, `SELECT status, record FROM runs WHERE run_id = ?`, runID).Scan(&st, &rec)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("run %s: %w", runID, store.ErrRunNotFound)
		}
		if err != nil {
			return err
		}
		if agent.RunStatus(st) != agent.StatusQueued {
			return fmt.Errorf("run %s is %s: %w", runID, st, store.ErrNotQueued)
		}
		r, err := store.EndQueued(rec, status, rerr, finishedAt)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE runs SET status = ?, record = ? WHERE run_id = ?`, string(status), r, runID)
		return err
	})
}
