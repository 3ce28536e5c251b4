package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Sessions = (*Store)(nil)

// AddSession implements store.Sessions.
func (s *Store) AddSession(ctx context.Context, se store.Session, now time.Time) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM http_sessions WHERE expires_at <= $1`, store.Nanos(now)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO http_sessions (id_hash, sealed, created_at, expires_at) VALUES ($1, $2, $3, $4)`,
			se.IDHash, se.Sealed, store.Nanos(se.Created), store.Nanos(se.Expires))
		return err
	})
}

// Session implements store.Sessions.
func (s *Store) Session(ctx context.Context, idHash string, now time.Time) (store.Session, error) {
	se := store.Session{IDHash: idHash}
	var created, expires int64
	err := s.pool.QueryRow(ctx, `SELECT sealed, created_at, expires_at FROM http_sessions WHERE id_hash = $1 AND expires_at > $2`,
		idHash, store.Nanos(now)).Scan(&se.Sealed, &created, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Session{}, fmt.Errorf("session: %w", store.ErrSessionNotFound)
	}
	if err != nil {
		return store.Session{}, classify(err)
	}
	se.Created, se.Expires = store.FromNanos(created), store.FromNanos(expires)
	return se, nil
}

// DeleteSession implements store.Sessions.
func (s *Store) DeleteSession(ctx context.Context, idHash string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM http_sessions WHERE id_hash = $1`, idHash)
	return classify(err)
}

// DeleteExpiredSessions implements store.Sessions.
func (s *Store) DeleteExpiredSessions(ctx context.Context, now time.Time, limit int) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM http_sessions WHERE id_hash IN (SELECT id_hash FROM http_sessions WHERE expires_at <= $1 LIMIT $2)`,
		store.Nanos(now), limit)
	if err != nil {
		return 0, classify(err)
	}
	return int(tag.RowsAffected()), nil
}
