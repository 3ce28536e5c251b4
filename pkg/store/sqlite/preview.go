package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Previews = (*Store)(nil)

// AddPreview implements store.Previews.
func (s *Store) AddPreview(ctx context.Context, p store.Preview, limit int, now time.Time) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM threads WHERE id = ?`, p.ThreadID).Scan(&one); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("preview of thread %s: %w", p.ThreadID, agent.ErrThreadNotFound)
			}
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM previews WHERE thread_id = ? AND expires_at <= ?`, p.ThreadID, store.Nanos(now)); err != nil {
			return err
		}
		var live int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM previews WHERE thread_id = ? AND NOT revoked`, p.ThreadID).Scan(&live); err != nil {
			return err
		}
		if live >= limit {
			return fmt.Errorf("thread %s has %d live previews: %w", p.ThreadID, live, store.ErrPreviewLimit)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO previews (id, thread_id, tenant, port, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)`,
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
	p, err := scanPreview(s.db.QueryRowContext(ctx, `SELECT `+previewColumns+` FROM previews WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Preview{}, fmt.Errorf("preview %s: %w", id, store.ErrPreviewNotFound)
	}
	return p, classify(err)
}

// ListPreviews implements store.Previews.
func (s *Store) ListPreviews(ctx context.Context, threadID string, now time.Time) ([]store.Preview, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+previewColumns+` FROM previews WHERE thread_id = ? AND expires_at > ? ORDER BY created_at DESC, id DESC`,
		threadID, store.Nanos(now))
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []store.Preview
	for rows.Next() {
		p, err := scanPreview(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, classify(rows.Err())
}

// RevokePreview implements store.Previews.
func (s *Store) RevokePreview(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE previews SET revoked = 1 WHERE id = ?`, id)
	if err != nil {
		return classify(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("preview %s: %w", id, store.ErrPreviewNotFound)
	}
	return nil
}
