package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Webhooks = (*Store)(nil)

// RotateWebhookKey implements store.Webhooks.
func (s *Store) RotateWebhookKey(ctx context.Context, k store.WebhookKey, oldExpires time.Time) error {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM webhook_keys WHERE tenant = ? AND expires_at <> 0 AND expires_at <= ?`, k.Tenant, store.Nanos(k.Created)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE webhook_keys SET expires_at = ? WHERE tenant = ? AND (expires_at = 0 OR expires_at > ?)`, store.Nanos(oldExpires), k.Tenant, store.Nanos(oldExpires)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO webhook_keys (tenant, id, sealed, created_at, expires_at) VALUES (?, ?, ?, ?, 0)`,
			k.Tenant, k.ID, k.Sealed, store.Nanos(k.Created))
		return err
	})
	if err != nil {
		return fmt.Errorf("rotate webhook key: %w", err)
	}
	return nil
}

// WebhookKeys implements store.Webhooks.
func (s *Store) WebhookKeys(ctx context.Context, tenant string, now time.Time) ([]store.WebhookKey, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+store.WebhookKeyColumns+` FROM webhook_keys
		WHERE tenant = ? AND (expires_at = 0 OR expires_at > ?) ORDER BY created_at DESC, id DESC`, tenant, store.Nanos(now))
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []store.WebhookKey
	for rows.Next() {
		k, err := store.ScanWebhookKey(rows, tenant)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, classify(rows.Err())
}

// EnqueueDelivery implements store.Webhooks.
func (s *Store) EnqueueDelivery(ctx context.Context, d store.Delivery) (bool, error) {
	res, err := s.db.ExecContext(ctx, `INSERT INTO webhook_deliveries
		(id, tenant, thread_id, run_id, event, url, payload, status, next_attempt, give_up, created_at, agent)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
		d.ID, d.Tenant, d.ThreadID, d.RunID, d.Event, d.URL, d.Payload, string(store.DeliveryPending),
		store.Nanos(d.NextAttempt), store.Nanos(d.GiveUp), store.Nanos(d.Created), d.Agent)
	if err != nil {
		return false, fmt.Errorf("enqueue webhook delivery: %w", classify(err))
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

func scanDeliveries(rows *sql.Rows) ([]store.Delivery, error) {
	defer rows.Close()
	var out []store.Delivery
	for rows.Next() {
		d, err := store.ScanDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, classify(rows.Err())
}

// ClaimDeliveries implements store.Webhooks. SQLite has one writer at a
// time: the UPDATE takes the due rows and claims them at once.
func (s *Store) ClaimDeliveries(ctx context.Context, holder string, now time.Time, claimFor time.Duration, limit int) ([]store.Delivery, error) {
	n := store.Nanos(now)
	var out []store.Delivery
	err := s.tx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `UPDATE webhook_deliveries
			SET status = 'delivering', claim_holder = ?, claim_expires = ?, attempts = attempts + 1
			WHERE id IN (SELECT id FROM webhook_deliveries
				WHERE status IN ('pending', 'delivering') AND next_attempt <= ? AND claim_expires <= ?
				ORDER BY next_attempt, id LIMIT ?)
			RETURNING `+store.DeliveryColumns, holder, store.Nanos(now.Add(claimFor)), n, n, limit)
		if err != nil {
			return err
		}
		out, err = scanDeliveries(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", err)
	}
	return out, nil
}

// FinishAttempt implements store.Webhooks.
func (s *Store) FinishAttempt(ctx context.Context, r store.AttemptResult) error {
	res, err := s.db.ExecContext(ctx, `UPDATE webhook_deliveries
		SET status = ?, last_status_code = ?, last_error = ?, next_attempt = ?, finished_at = ?, claim_holder = '', claim_expires = 0
		WHERE id = ? AND claim_holder = ? AND status = 'delivering'`,
		string(r.Status), r.StatusCode, r.Error, store.OptNanos(r.NextAttempt), store.OptNanos(r.Finished), r.ID, r.Holder)
	if err != nil {
		return fmt.Errorf("finish webhook attempt: %w", classify(err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("delivery %s: %w", r.ID, store.ErrClaimLost)
	}
	return nil
}

// ListDeliveries implements store.Webhooks.
func (s *Store) ListDeliveries(ctx context.Context, q store.DeliveryQuery) ([]store.Delivery, string, error) {
	where, args := []string{"tenant = ?"}, []any{q.Tenant}
	for _, f := range []struct{ col, v string }{{"thread_id", q.ThreadID}, {"run_id", q.RunID}, {"status", string(q.Status)}} {
		if f.v != "" {
			where, args = append(where, f.col+" = ?"), append(args, f.v)
		}
	}
	if q.PageToken != "" {
		c, id, err := store.DecodePageToken(q.PageToken)
		if err != nil {
			return nil, "", err
		}
		where, args = append(where, "(created_at < ? OR (created_at = ? AND id < ?))"), append(args, c, c, id)
	}
	size := q.Size()
	rows, err := s.db.QueryContext(ctx, `SELECT `+store.DeliveryColumns+` FROM webhook_deliveries WHERE `+strings.Join(where, " AND ")+
		` ORDER BY created_at DESC, id DESC LIMIT ?`, append(args, size+1)...)
	if err != nil {
		return nil, "", classify(err)
	}
	out, err := scanDeliveries(rows)
	if err != nil {
		return nil, "", err
	}
	page, next := store.DeliveryPage(out, size)
	return page, next, nil
}
