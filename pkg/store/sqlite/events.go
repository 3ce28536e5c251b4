package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.LeaseStore = (*Store)(nil)

// AppendEvents implements store.RunEvents.
func (s *Store) AppendEvents(ctx context.Context, threadID string, f *agent.Fence, evs []store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM threads WHERE id = ?`, threadID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("events of %s: %w", threadID, agent.ErrThreadNotFound)
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
		keep := map[string]bool{}
		for _, e := range evs {
			keep[e.RunID] = true
		}
		rows, err := tx.QueryContext(ctx, `SELECT DISTINCT run_id FROM run_events WHERE thread_id = ?`, threadID)
		if err != nil {
			return err
		}
		var drop []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			if !keep[id] {
				drop = append(drop, id)
			}
		}
		rows.Close()
		for _, id := range drop {
			if _, err := tx.ExecContext(ctx, `DELETE FROM run_events WHERE thread_id = ? AND run_id = ?`, threadID, id); err != nil {
				return err
			}
		}
		for _, e := range evs {
			if _, err := tx.ExecContext(ctx, `INSERT INTO run_events (thread_id, run_id, seq, start, terminal, body) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (run_id, seq) DO NOTHING`, threadID, e.RunID, int64(e.Sequence), e.Start, e.Terminal, e.Body); err != nil {
				return fmt.Errorf("events of %s: %w", threadID, err)
			}
		}
		return nil
	})
}

// ReadEvents implements store.RunEvents.
func (s *Store) ReadEvents(ctx context.Context, threadID string, after uint64, limit int) (store.EventPage, error) {
	var page store.EventPage
	err := s.tx(ctx, func(tx *sql.Tx) error {
		page = store.EventPage{}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM threads WHERE id = ?`, threadID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("events of %s: %w", threadID, agent.ErrThreadNotFound)
		}
		// The log holds one run: its events may be stored before its
		// record.
		err := tx.QueryRowContext(ctx, `SELECT run_id FROM run_events WHERE thread_id = ? LIMIT 1`, threadID).Scan(&page.RunID)
		if errors.Is(err, sql.ErrNoRows) {
			err = tx.QueryRowContext(ctx, `SELECT run_id FROM runs WHERE thread_id = ? AND status != ? ORDER BY ord DESC LIMIT 1`, threadID, string(agent.StatusQueued)).Scan(&page.RunID)
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
		}
		if err != nil {
			return err
		}
		var st string
		if err := tx.QueryRowContext(ctx, `SELECT status FROM runs WHERE run_id = ?`, page.RunID).Scan(&st); err == nil {
			page.Status = agent.RunStatus(st)
		} else if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		from := int64(after)
		rows, err := tx.QueryContext(ctx, `SELECT seq, start, terminal, body FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`, page.RunID, from, limit)
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
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM run_events WHERE run_id = ?`, runID).Scan(&seq); err != nil {
		return 0, classify(err)
	}
	return uint64(seq), nil
}
