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

var _ store.Previews = (*Store)(nil)

// AddPreview implements store.Previews. The thread's row is locked while
// the live previews are counted, so that two replicas adding at once
// cannot both pass the limit.
func (s *Store) AddPreview(ctx context.Context, p store.Preview, limit int, now time.Time) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM threads WHERE id = $1 FOR UPDATE`, p.ThreadID).Scan(&one); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("preview of thread %s: %w", p.ThreadID, agent.ErrThreadNotFound)
			}
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM previews WHERE thread_id = $1 AND expires_at <= $2`, p.ThreadID, store.Nanos(now)); err != nil {
			return err
		}
		var live int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM previews WHERE thread_id = $1 AND NOT revoked`, p.ThreadID).Scan(&live); err != nil {
			return err
		}
		if live >= limit {
			return fmt.Errorf("thread %s has %d live previews: %w", p.ThreadID, live, store.ErrPreviewLimit)
		}
		_, err := tx.Exec(ctx, `INSERT INTO previews (id, thread_id, tenant, port, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			p.ID, p.ThreadID, p.Tenant, p.Port, store.Nanos(p.Created), store.Nanos(p.Expires))
		return err
	})
}

const previewColumns = `id, thread_id, tenant, port, created_at, expires_at, revoked`

func scanPreview(sc interface{ Scan(...any) error }) (store.Preview, error) {
	var (
		p                store.Preview
		created, expires int64
	)
	if err := sc.Scan(&p.ID, &p.ThreadID, &p.Tenant, &p.Port, &created, &expires, &p.Revoked); err != nil {
		return store.Preview{}, err
	}
	p.Created, p.Expires = store.FromNanos(created), store.FromNanos(expires)
	return p, nil
}

// Preview implements store.Previews.
func (s *Store) Preview(ctx context.Context, id string) (store.Preview, error) {
	p, err := scanPreview(s.pool.QueryRow(ctx, `SELECT `+previewColumns+` FROM previews WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Preview{}, fmt.Errorf("preview %s: %w", id, store.ErrPreviewNotFound)
	}
	return p, classify(err)
}

// ListPreviews implements store.Previews.
func (s *Store) ListPreviews(ctx context.Context, threadID string, now time.Time) ([]store.Preview, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+previewColumns+` FROM previews WHERE thread_id = $1 AND expires_at > $2 ORDER BY created_at DESC, id DESC`,
		threadID, store.Nanos(now))
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []store.Preview
	for rows.Next() {
		p, err := scanPreview(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, p)
	}
	return out, classify(rows.Err())
}

// RevokePreview implements store.Previews.
func (s *Store) RevokePreview(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE previews SET revoked = true WHERE id = $1`, id)
	if err != nil {
		return classify(err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("preview %s: %w", id, store.ErrPreviewNotFound)
	}
	return nil
}
