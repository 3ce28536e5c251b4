package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Webhooks = (*Store)(nil)

// RotateWebhookKey implements store.Webhooks. Two rotations at once both
// insert their key; the later one's expiry update then covers the
// earlier's key, so one current key remains once both commit.
func (s *Store) RotateWebhookKey(ctx context.Context, k store.WebhookKey, oldExpires time.Time) error {
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM webhook_keys WHERE tenant = $1 AND expires_at <> 0 AND expires_at <= $2`, k.Tenant, store.Nanos(k.Created)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE webhook_keys SET expires_at = $1 WHERE tenant = $2 AND (expires_at = 0 OR expires_at > $1)`, store.Nanos(oldExpires), k.Tenant); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO webhook_keys (tenant, id, sealed, created_at, expires_at) VALUES ($1, $2, $3, $4, 0)`,
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
	rows, err := s.pool.Query(ctx, `SELECT `+store.WebhookKeyColumns+` FROM webhook_keys
		WHERE tenant = $1 AND (expires_at = 0 OR expires_at > $2) ORDER BY created_at DESC, id DESC`, tenant, store.Nanos(now))
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []store.WebhookKey
	for rows.Next() {
		k, err := store.ScanWebhookKey(rows, tenant)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, k)
	}
	return out, classify(rows.Err())
}

// EnqueueDelivery implements store.Webhooks.
func (s *Store) EnqueueDelivery(ctx context.Context, d store.Delivery) (bool, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO webhook_deliveries
		(id, tenant, thread_id, run_id, event, url, payload, status, next_attempt, give_up, created_at, agent)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (id) DO NOTHING`,
		d.ID, d.Tenant, d.ThreadID, d.RunID, d.Event, d.URL, d.Payload, string(store.DeliveryPending),
		store.Nanos(d.NextAttempt), store.Nanos(d.GiveUp), store.Nanos(d.Created), d.Agent)
	if err != nil {
		return false, fmt.Errorf("enqueue webhook delivery: %w", classify(err))
	}
	return tag.RowsAffected() > 0, nil
}

func scanDeliveries(rows pgx.Rows) ([]store.Delivery, error) {
	defer rows.Close()
	var out []store.Delivery
	for rows.Next() {
		d, err := store.ScanDelivery(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, d)
	}
	return out, classify(rows.Err())
}

// ClaimDeliveries implements store.Webhooks. The due rows are locked with
// FOR UPDATE SKIP LOCKED: replicas claiming at once each take rows the
// others did not, and none waits for another's.
func (s *Store) ClaimDeliveries(ctx context.Context, holder string, now time.Time, claimFor time.Duration, limit int) ([]store.Delivery, error) {
	n := store.Nanos(now)
	rows, err := s.pool.Query(ctx, `UPDATE webhook_deliveries
		SET status = 'delivering', claim_holder = $1, claim_expires = $2, attempts = attempts + 1
		WHERE id IN (SELECT id FROM webhook_deliveries
			WHERE status IN ('pending', 'delivering') AND next_attempt <= $3 AND claim_expires <= $3
			ORDER BY next_attempt, id LIMIT $4 FOR UPDATE SKIP LOCKED)
		RETURNING `+store.DeliveryColumns, holder, store.Nanos(now.Add(claimFor)), n, limit)
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", classify(err))
	}
	out, err := scanDeliveries(rows)
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", err)
	}
	return out, nil
}

// FinishAttempt implements store.Webhooks.
func (s *Store) FinishAttempt(ctx context.Context, r store.AttemptResult) error {
	tag, err := s.pool.Exec(ctx, `UPDATE webhook_deliveries
		SET status = $1, last_status_code = $2, last_error = $3, next_attempt = $4, finished_at = $5, claim_holder = '', claim_expires = 0
		WHERE id = $6 AND claim_holder = $7 AND status = 'delivering'`,
		string(r.Status), r.StatusCode, r.Error, store.OptNanos(r.NextAttempt), store.OptNanos(r.Finished), r.ID, r.Holder)
	if err != nil {
		return fmt.Errorf("finish webhook attempt: %w", classify(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delivery %s: %w", r.ID, store.ErrClaimLost)
	}
	return nil
}

// ListDeliveries implements store.Webhooks.
func (s *Store) ListDeliveries(ctx context.Context, q store.DeliveryQuery) ([]store.Delivery, string, error) {
	args := []any{q.Tenant}
	where := []string{"tenant = $1"}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	for _, f := range []struct{ col, v string }{{"thread_id", q.ThreadID}, {"run_id", q.RunID}, {"status", string(q.Status)}} {
		if f.v != "" {
			where = append(where, f.col+" = "+arg(f.v))
		}
	}
	if q.PageToken != "" {
		c, id, err := store.DecodePageToken(q.PageToken)
		if err != nil {
			return nil, "", err
		}
		cp := arg(c)
		where = append(where, "(created_at < "+cp+" OR (created_at = "+cp+" AND id < "+arg(id)+"))")
	}
	size := q.Size()
	rows, err := s.pool.Query(ctx, `SELECT `+store.DeliveryColumns+` FROM webhook_deliveries WHERE `+strings.Join(where, " AND ")+
		` ORDER BY created_at DESC, id DESC LIMIT `+arg(size+1), args...)
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
