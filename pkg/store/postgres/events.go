package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.LeaseStore = (*Store)(nil)

// AppendEvents implements store.RunEvents. The thread's row is share-locked
// so that no AcquireLease can slip between the fence check and the commit.
func (s *Store) AppendEvents(ctx context.Context, threadID string, f *agent.Fence, evs []store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	return s.tx(ctx, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM threads WHERE id = $1 FOR SHARE`, threadID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("events of %s: %w", threadID, agent.ErrThreadNotFound)
		}
		if err != nil {
			return fmt.Errorf("events of %s: %w", threadID, err)
		}
		if f != nil {
			cur, err := leaseRow(ctx, tx, threadID)
			if err != nil {
				return fmt.Errorf("events of %s: lease: %w", threadID, err)
			}
			if err := store.CheckFence(threadID, f, cur); err != nil {
				return err
			}
		}
		n := len(evs)
		runs, seqs := make([]string, n), make([]int64, n)
		starts, terms := make([]bool, n), make([]bool, n)
		bodies := make([][]byte, n)
		for i, e := range evs {
			runs[i], seqs[i], starts[i], terms[i], bodies[i] = e.RunID, int64(e.Sequence), e.Start, e.Terminal, e.Body
		}
		var b pgx.Batch
		b.Queue(`DELETE FROM run_events WHERE thread_id = $1 AND run_id <> ALL($2::text[])`, threadID, runs)
		b.Queue(`INSERT INTO run_events (thread_id, run_id, seq, start, terminal, body)
			SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::boolean[], $5::boolean[], $6::bytea[])
			ON CONFLICT (run_id, seq) DO NOTHING`, threadID, runs, seqs, starts, terms, bodies)
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return fmt.Errorf("events of %s: %w", threadID, err)
		}
		return nil
	})
}

// ReadEvents implements store.RunEvents.
func (s *Store) ReadEvents(ctx context.Context, threadID string, after uint64, limit int) (store.EventPage, error) {
	var page store.EventPage
	err := s.read(ctx, func(tx pgx.Tx) error {
		page = store.EventPage{}
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM threads WHERE id = $1`, threadID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("events of %s: %w", threadID, agent.ErrThreadNotFound)
		}
		if err != nil {
			return err
		}
		// The log holds one run: its events may be stored before its
		// record.
		err = tx.QueryRow(ctx, `SELECT run_id FROM run_events WHERE thread_id = $1 LIMIT 1`, threadID).Scan(&page.RunID)
		if errors.Is(err, pgx.ErrNoRows) {
			err = tx.QueryRow(ctx, `SELECT run_id FROM runs WHERE thread_id = $1 AND status <> $2 ORDER BY ord DESC LIMIT 1`, threadID, string(agent.StatusQueued)).Scan(&page.RunID)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
		}
		if err != nil {
			return err
		}
		var st string
		if err := tx.QueryRow(ctx, `SELECT status FROM runs WHERE run_id = $1`, page.RunID).Scan(&st); err == nil {
			page.Status = agent.RunStatus(st)
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		from := int64(after)
		rows, err := tx.Query(ctx, `SELECT seq, start, terminal, body FROM run_events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, page.RunID, from, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		page.Events, err = store.ScanEvents(rows, page.RunID)
		return err
	})
	return page, err
}

// LastSequence implements store.RunEvents.
func (s *Store) LastSequence(ctx context.Context, runID string) (uint64, error) {
	var seq int64
	if err := s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) FROM run_events WHERE run_id = $1`, runID).Scan(&seq); err != nil {
		return 0, classify(err)
	}
	return uint64(seq), nil
}
