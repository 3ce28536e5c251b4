package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Runs = (*Store)(nil)

// GetRun implements store.Runs.
func (s *Store) GetRun(ctx context.Context, runID string) (store.RunInfo, error) {
	ri, _, err := store.ScanRun(s.pool.QueryRow(ctx, `SELECT `+store.RunColumns+` FROM runs r JOIN threads t ON t.id = r.thread_id WHERE r.run_id = $1`, runID))
	if errors.Is(err, pgx.ErrNoRows) {
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
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if q.PageToken != "" {
		ord, err := store.DecodeRunPageToken(q.PageToken)
		if err != nil {
			return nil, "", err
		}
		where = append(where, `r.ord < `+arg(ord))
	}
	if q.Tenant != "" {
		where = append(where, `t.tenant = `+arg(q.Tenant))
	}
	if q.ThreadID != "" {
		where = append(where, `r.thread_id = `+arg(q.ThreadID))
	}
	if q.Status != "" {
		where = append(where, `r.status = `+arg(string(q.Status)))
	}
	query := `SELECT ` + store.RunColumns + ` FROM runs r JOIN threads t ON t.id = r.thread_id`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	size := q.Size()
	query += ` ORDER BY r.ord DESC LIMIT ` + arg(size+1)
	rows, err := s.pool.Query(ctx, query, args...)
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
	return s.tx(ctx, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM threads WHERE id = $1`, threadID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("enqueue a run on %s: %w", threadID, agent.ErrThreadNotFound)
		}
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO runs (run_id, thread_id, status, record, created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id) DO NOTHING`,
			rec.RunID, threadID, string(agent.StatusQueued), b, store.RunCreatedNanos(rec))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("enqueue run %s: %w", rec.RunID, agent.ErrConflict)
		}
		return nil
	})
}

// NextQueuedRun implements store.Runs.
func (s *Store) NextQueuedRun(ctx context.Context, threadID string) (*store.RunInfo, error) {
	ri, _, err := store.ScanRun(s.pool.QueryRow(ctx, `SELECT `+store.RunColumns+` FROM runs r JOIN threads t ON t.id = r.thread_id
		WHERE r.thread_id = $1 AND r.status = $2 ORDER BY r.ord LIMIT 1`, threadID, string(agent.StatusQueued)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, classify(err)
	}
	return &ri, nil
}

// QueuedThreads implements store.Runs.
func (s *Store) QueuedThreads(ctx context.Context, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT thread_id FROM runs WHERE status = $1 GROUP BY thread_id ORDER BY min(ord) LIMIT $2`,
		string(agent.StatusQueued), limit)
	if err != nil {
		return nil, classify(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, classify(err)
}

// EndQueuedRun implements store.Runs.
func (s *Store) EndQueuedRun(ctx context.Context, runID string, status agent.RunStatus, rerr *agent.RunError, finishedAt time.Time) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		var st, rec string
		err := tx.QueryRow(ctx, `SELECT status, record FROM runs WHERE run_id = $1 FOR UPDATE`, runID).Scan(&st, &rec)
		if errors.Is(err, pgx.ErrNoRows) {
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
		_, err = tx.Exec(ctx, `UPDATE runs SET status = $1, record = $2 WHERE run_id = $3`, string(status), r, runID)
		return err
	})
}
