package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Steers = (*Store)(nil)

// AddSteer implements store.Steers. The thread's row is locked first, as
// SaveCheckpoint locks it (the same order, so the two never deadlock):
// a final checkpoint commits before (the status read is not RUNNING) or
// after (its SteersToQueue sees the steer).
func (s *Store) AddSteer(ctx context.Context, threadID, runID string, input []string, at time.Time) (int64, error) {
	in, err := store.SteerInput(input)
	if err != nil {
		return 0, err
	}
	var id int64
	err = s.tx(ctx, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM threads WHERE id = $1 FOR UPDATE`, threadID).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("steer run %s: %w", runID, store.ErrRunNotRunning)
		} else if err != nil {
			return err
		}
		var status string
		err := tx.QueryRow(ctx, `SELECT status FROM runs WHERE run_id = $1 AND thread_id = $2`, runID, threadID).Scan(&status)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && status != string(agent.StatusRunning) {
			return fmt.Errorf("steer run %s: %w", runID, store.ErrRunNotRunning)
		}
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO run_steers (thread_id, run_id, input, created_at) VALUES ($1, $2, $3, $4) RETURNING id`,
			threadID, runID, in, store.Nanos(at)).Scan(&id)
	})
	return id, err
}

// PendingSteers implements agent.SteerStore.
func (s *Store) PendingSteers(ctx context.Context, threadID, runID string) ([]agent.Steer, error) {
	return pendingSteers(ctx, s.pool, threadID, runID, "")
}

type rowsQuerier interface {
	Query(ctx context.Context, q string, args ...any) (pgx.Rows, error)
}

func pendingSteers(ctx context.Context, q rowsQuerier, threadID, runID, lock string) ([]agent.Steer, error) {
	rows, err := q.Query(ctx, `SELECT id, input, created_at FROM run_steers WHERE thread_id = $1 AND run_id = $2 ORDER BY id`+lock, threadID, runID)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []agent.Steer
	for rows.Next() {
		st, err := store.ScanSteer(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, st)
	}
	return out, classify(rows.Err())
}

// consumeSteers deletes the steers a checkpoint delivers, or fails with
// agent.ErrConflict when one is gone.
func consumeSteers(ctx context.Context, tx pgx.Tx, threadID string, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	tag, err := tx.Exec(ctx, `DELETE FROM run_steers WHERE thread_id = $1 AND id = ANY($2::bigint[])`, threadID, ids)
	if err != nil {
		return err
	}
	if n := tag.RowsAffected(); n != int64(len(ids)) {
		return fmt.Errorf("checkpoint %s: %d of %d steers were delivered already: %w", threadID, int64(len(ids))-n, len(ids), agent.ErrConflict)
	}
	return nil
}

// SteersToQueue implements store.Steers.
func (s *Store) SteersToQueue(ctx context.Context, threadID, runID string, rec agent.RunRecord) (bool, error) {
	var queued bool
	err := s.tx(ctx, func(tx pgx.Tx) error {
		// The thread's row first, as AddSteer and SaveCheckpoint lock it.
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM threads WHERE id = $1 FOR UPDATE`, threadID).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
			return nil // deleted: its steers went with it
		} else if err != nil {
			return err
		}
		steers, err := pendingSteers(ctx, tx, threadID, runID, "")
		if err != nil || len(steers) == 0 {
			return err
		}
		b, err := store.QueuedFromSteers(rec, steers)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM run_steers WHERE thread_id = $1 AND run_id = $2`, threadID, runID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO runs (run_id, thread_id, status, record) VALUES ($1, $2, $3, $4)`,
			rec.RunID, threadID, string(agent.StatusQueued), b); err != nil {
			return err
		}
		queued = true
		return nil
	})
	return queued, err
}
