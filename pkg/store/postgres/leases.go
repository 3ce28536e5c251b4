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

// leaseRow reads the thread's lease row (nil without one).
func leaseRow(ctx context.Context, q querier, id string) (*store.Lease, error) {
	l := store.Lease{ThreadID: id}
	var exp int64
	err := q.QueryRow(ctx, `SELECT holder, epoch, expires_at, released, cancel_requested AND NOT released, CASE WHEN released THEN '' ELSE stop_requested END FROM thread_leases WHERE thread_id = $1`, id).
		Scan(&l.Holder, &l.Epoch, &exp, &l.Released, &l.CancelRequested, &l.StopRequested)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	l.Expires = time.Unix(0, exp)
	return &l, nil
}

var _ store.Leases = (*Store)(nil)

// AcquireLease implements store.Leases. The thread's row is locked for the
// decision, so concurrent acquisitions by two replicas serialize.
func (s *Store) AcquireLease(ctx context.Context, id, holder string, now time.Time, ttl time.Duration) (store.Lease, error) {
	var next store.Lease
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM threads WHERE id = $1 FOR UPDATE`, id).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("lease of %s: %w", id, agent.ErrThreadNotFound)
		} else if err != nil {
			return err
		}
		cur, err := leaseRow(ctx, tx, id)
		if err != nil {
			return err
		}
		if next, err = store.NextLease(cur, id, holder, now, ttl); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO thread_leases (thread_id, holder, epoch, expires_at, released, cancel_requested, stop_requested) VALUES ($1, $2, $3, $4, false, $5, $6)
			ON CONFLICT (thread_id) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch, expires_at = excluded.expires_at, released = false,
				cancel_requested = excluded.cancel_requested, stop_requested = excluded.stop_requested`,
			id, next.Holder, next.Epoch, store.Nanos(next.Expires), next.CancelRequested, string(next.StopRequested))
		return err
	})
	return next, err
}

// RenewLease implements store.Leases.
func (s *Store) RenewLease(ctx context.Context, l store.Lease, now time.Time, ttl time.Duration) (store.Lease, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE thread_leases SET expires_at = $1 WHERE thread_id = $2 AND holder = $3 AND epoch = $4 AND NOT released AND expires_at > $5`,
		store.Nanos(now.Add(ttl)), l.ThreadID, l.Holder, l.Epoch, store.Nanos(now))
	if err != nil {
		return l, classify(err)
	}
	if tag.RowsAffected() == 0 {
		return l, fmt.Errorf("renew lease of %s: %w", l.ThreadID, store.ErrLeaseLost)
	}
	l.Expires = now.Add(ttl)
	return l, nil
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, l store.Lease) error {
	_, err := s.pool.Exec(ctx, `UPDATE thread_leases SET released = true WHERE thread_id = $1 AND holder = $2 AND epoch = $3`, l.ThreadID, l.Holder, l.Epoch)
	return classify(err)
}

// HandOffLease implements store.Leases.
func (s *Store) HandOffLease(ctx context.Context, l store.Lease, now time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE thread_leases SET expires_at = LEAST(expires_at, $4) WHERE thread_id = $1 AND holder = $2 AND epoch = $3 AND NOT released`,
		l.ThreadID, l.Holder, l.Epoch, store.Nanos(now))
	return classify(err)
}

// ExpiredLeases implements store.Leases.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time) ([]store.Lease, error) {
	return scanLeases(s.pool.Query(ctx, `SELECT `+leaseColumns+` FROM thread_leases WHERE NOT released AND expires_at <= $1 ORDER BY expires_at, thread_id`, store.Nanos(now)))
}

// leaseColumns are the columns scanLeases reads, in order. A released
// lease carries no cancel request (the next acquisition resets the
// column).
const leaseColumns = `thread_id, holder, epoch, expires_at, released, cancel_requested AND NOT released, CASE WHEN released THEN '' ELSE stop_requested END`

// scanLeases reads rows of leaseColumns.
func scanLeases(rows pgx.Rows, err error) ([]store.Lease, error) {
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []store.Lease
	for rows.Next() {
		var l store.Lease
		var exp int64
		if err := rows.Scan(&l.ThreadID, &l.Holder, &l.Epoch, &exp, &l.Released, &l.CancelRequested, &l.StopRequested); err != nil {
			return nil, classify(err)
		}
		l.Expires = time.Unix(0, exp)
		out = append(out, l)
	}
	return out, classify(rows.Err())
}

// RequestCancel implements store.Leases.
func (s *Store) RequestCancel(ctx context.Context, id string) (*store.Lease, error) {
	ls, err := scanLeases(s.pool.Query(ctx, `UPDATE thread_leases SET cancel_requested = true WHERE thread_id = $1 AND NOT released RETURNING `+leaseColumns, id))
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
	ls, err := scanLeases(s.pool.Query(ctx, `UPDATE thread_leases SET stop_requested = CASE WHEN stop_requested = $1 THEN stop_requested ELSE $2 END
		WHERE thread_id = $3 AND NOT released RETURNING `+leaseColumns, string(store.StopRollback), string(mode), id))
	if err != nil || len(ls) == 0 {
		return nil, err
	}
	return &ls[0], nil
}

// CancelRequests implements store.Leases.
func (s *Store) CancelRequests(ctx context.Context, holder string) ([]store.Lease, error) {
	return scanLeases(s.pool.Query(ctx, `SELECT `+leaseColumns+` FROM thread_leases WHERE holder = $1 AND (cancel_requested OR stop_requested <> '') AND NOT released ORDER BY thread_id`, holder))
}

// ThreadLeases implements store.Leases.
func (s *Store) ThreadLeases(ctx context.Context, ids []string) ([]store.Lease, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return scanLeases(s.pool.Query(ctx, `SELECT `+leaseColumns+` FROM thread_leases WHERE thread_id = ANY($1::text[]) ORDER BY thread_id`, ids))
}
