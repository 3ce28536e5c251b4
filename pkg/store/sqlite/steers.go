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

var _ store.Steers = (*Store)(nil)

// AddSteer implements store.Steers. The transaction is immediate (the
// store's txlock), so a run's final checkpoint commits before or after
// it, never in between.
func (s *Store) AddSteer(ctx context.Context, threadID, runID string, input []string, at time.Time) (int64, error) {
	in, err := store.SteerInput(input)
	if err != nil {
		return 0, err
	}
	var id int64
	err = s.tx(ctx, func(tx *sql.Tx) error {
		var status string
		err := tx.QueryRowContext(ctx, `SELECT status FROM runs WHERE run_id = ? AND thread_id = ?`, runID, threadID).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) || err == nil && status != string(agent.StatusRunning) {
			return fmt.Errorf("steer run %s: %w", runID, store.ErrRunNotRunning)
		}
		if err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `INSERT INTO run_steers (thread_id, run_id, input, created_at) VALUES (?, ?, ?, ?) RETURNING id`,
			threadID, runID, in, store.Nanos(at)).Scan(&id)
	})
	return id, err
}

// PendingSteers implements agent.SteerStore.
func (s *Store) PendingSteers(ctx context.Context, threadID, runID string) ([]agent.Steer, error) {
	return pendingSteers(ctx, s.db, threadID, runID)
}

type rowQuerier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

func pendingSteers(ctx context.Context, q rowQuerier, threadID, runID string) ([]agent.Steer, error) {
	rows, err := q.QueryContext(ctx, `SELECT id, input, created_at FROM run_steers WHERE thread_id = ? AND run_id = ? ORDER BY id`, threadID, runID)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []agent.Steer
	for rows.Next() {
		st, err := store.ScanSteer(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, classify(rows.Err())
}

// consumeSteers deletes the steers a checkpoint delivers, or fails with
// agent.ErrConflict when one is gone.
func consumeSteers(ctx context.Context, tx *sql.Tx, threadID string, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	args := []any{threadID}
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM run_steers WHERE thread_id = ? AND id IN (`+strings.Repeat(", ?", len(ids))[2:]+`)`, args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != int64(len(ids)) {
		return fmt.Errorf("checkpoint %s: %d of %d steers were delivered already: %w", threadID, int64(len(ids))-n, len(ids), agent.ErrConflict)
	}
	return nil
}

// SteersToQueue implements store.Steers.
func (s *Store) SteersToQueue(ctx context.Context, threadID, runID string, rec agent.RunRecord) (bool, error) {
	var queued bool
	err := s.tx(ctx, func(tx *sql.Tx) error {
		steers, err := pendingSteers(ctx, tx, threadID, runID)
		if err != nil || len(steers) == 0 {
			return err
		}
		b, err := store.QueuedFromSteers(rec, steers)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM run_steers WHERE thread_id = ? AND run_id = ?`, threadID, runID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO runs (run_id, thread_id, status, record) VALUES (?, ?, ?, ?)`,
			rec.RunID, threadID, string(agent.StatusQueued), b); err != nil {
			return classify(err)
		}
		queued = true
		return nil
	})
	return queued, err
}
