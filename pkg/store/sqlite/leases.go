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

var _ store.Leases = (*Store)(nil)

// AcquireLease implements store.Leases.
func (s *Store) AcquireLease(ctx context.Context, id, holder string, now time.Time, ttl time.Duration) (store.Lease, error) {
	var next store.Lease
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var exists int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM threads WHERE id = ?`, id).Scan(&exists); err != nil {
			return err
		}
		if exists == 0 {
			return fmt.Errorf("lease of %s: %w", id, agent.ErrThreadNotFound)
		}
		cur, err := leaseRow(ctx, tx, id)
		if err != nil {
			return err
		}
		if next, err = store.NextLease(cur, id, holder, now, ttl); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO thread_leases (thread_id, holder, epoch, expires_at, released, cancel_requested, stop_requested) VALUES (?, ?, ?, ?, 0, ?, ?)
			ON CONFLICT (thread_id) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch, expires_at = excluded.expires_at, released = 0,
				cancel_requested = excluded.cancel_requested, stop_requested = excluded.stop_requested`,
			id, next.Holder, next.Epoch, store.Nanos(next.Expires), next.CancelRequested, string(next.StopRequested))
		return err
	})
	return next, err
}

// leaseRow reads the thread's lease row (nil without one).
func leaseRow(ctx context.Context, tx *sql.Tx, id string) (*store.Lease, error) {
	l := store.Lease{ThreadID: id}
	var exp int64
	err := tx.QueryRowContext(ctx, `SELECT holder, epoch, expires_at, released, cancel_requested AND NOT released, CASE WHEN released THEN '' ELSE stop_requested END FROM thread_leases WHERE thread_id = ?`, id).
		Scan(&l.Holder, &l.Epoch, &exp, &l.Released, &l.CancelRequested, &l.StopRequested)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	l.Expires = time.Unix(0, exp)
	return &l, nil
}

// RenewLease implements store.Leases.
func (s *Store) RenewLease(ctx context.Context, l store.Lease, now time.Time, ttl time.Duration) (store.Lease, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE thread_leases SET expires_at = ? WHERE thread_id = ? AND holder = ? AND epoch = ? AND released = 0 AND expires_at > ?`,
		store.Nanos(now.Add(ttl)), l.ThreadID, l.Holder, l.Epoch, store.Nanos(now))
	if err != nil {
		return l, classify(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return l, fmt.Errorf("renew lease of %s: %w", l.ThreadID, store.ErrLeaseLost)
	}
	l.Expires = now.Add(ttl)
	return l, nil
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, l store.Lease) error {
	_, err := s.db.ExecContext(ctx, `UPDATE thread_leases SET released = 1 WHERE thread_id = ? AND holder = ? AND epoch = ?`, l.ThreadID, l.Holder, l.Epoch)
	return classify(err)
}

// HandOffLease implements store.Leases.
func (s *Store) HandOffLease(ctx context.Context, l store.Lease, now time.Time) error {
	_, err := s.db.ExecContext(ctx, `UPDATE thread_leases SET expires_at = MIN(expires_at, ?) WHERE thread_id = ? AND holder = ? AND epoch = ? AND released = 0`,
		store.Nanos(now), l.ThreadID, l.Holder, l.Epoch)
	return classify(err)
}

// ExpiredLeases implements store.Leases.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time) ([]store.Lease, error) {
	return scanLeases(s.db.QueryContext(ctx, `SELECT `+leaseColumns+` FROM thread_leases WHERE released = 0 AND expires_at <= ? ORDER BY expires_at, thread_id`, store.Nanos(now)))
}

// leaseColumns are the columns scanLeases reads, in order. A released
// lease carries no cancel request (the next acquisition resets the
// column).
const leaseColumns = `thread_id, holder, epoch, expires_at, released, cancel_requested AND NOT released, CASE WHEN released THEN '' ELSE stop_requested END`

// scanLeases reads rows of leaseColumns.
func scanLeases(rows *sql.Rows, err error) ([]store.Lease, error) {
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []store.Lease
	for rows.Next() {
		var l store.Lease
		var exp int64
		if err := rows.Scan(&l.ThreadID, &l.Holder, &l.Epoch, &exp, &l.Released, &l.CancelRequested, &l.StopRequested); err != nil {
			return nil, err
		}
		l.Expires = time.Unix(0, exp)
		out = append(out, l)
	}
	return out, classify(rows.Err())
}

// RequestCancel implements store.Leases.
func (s *Store) RequestCancel(ctx context.Context, id string) (*store.Lease, error) {
	ls, err := scanLeases(s.db.QueryContext(ctx, `UPDATE thread_leases SET cancel_requested = 1 WHERE thread_id = ? AND released = 0 RETURNING `+leaseColumns, id))
	if err != nil || len(ls) == 0 {
		return nil, err
	}
	return &ls[0], nil
}

// RequestStop implements store.Leases.
func (s *Store) RequestStop(ctx context.Context, id string, mode store.StopMode) (*store.Lease, error) {
	if !mode.Valid() {
		return nil, fmt.Errorf("stop mode %q", mode)
	}
	ls, err := scanLeases(s.db.QueryContext(ctx, `UPDATE thread_leases SET stop_requested = CASE WHEN stop_requested = ? THEN stop_requested ELSE ? END
		WHERE thread_id = ? AND released = 0 RETURNING `+leaseColumns, string(store.StopRollback), string(mode), id))
	if err != nil || len(ls) == 0 {
		return nil, err
	}
	return &ls[0], nil
}

// CancelRequests implements store.Leases.
func (s *Store) CancelRequests(ctx context.Context, holder string) ([]store.Lease, error) {
	return scanLeases(s.db.QueryContext(ctx, `SELECT `+leaseColumns+` FROM thread_leases WHERE holder = ? AND (cancel_requested OR stop_requested != '') AND released = 0 ORDER BY thread_id`, holder))
}

// ThreadLeases implements store.Leases.
func (s *Store) ThreadLeases(ctx context.Context, ids []string) ([]store.Lease, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	marks := strings.Repeat(", ?", len(ids))[2:]
	return scanLeases(s.db.QueryContext(ctx, `SELECT `+leaseColumns+` FROM thread_leases WHERE thread_id IN (`+marks+`) ORDER BY thread_id`, args...))
}
