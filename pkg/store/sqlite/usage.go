package sqlite

import (
	"context"

	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Ledger = (*Store)(nil)

// RecordUsage implements store.Ledger.
func (s *Store) RecordUsage(ctx context.Context, e store.UsageEntry) error {
	u := e.Usage
	_, err := s.db.ExecContext(ctx, `INSERT INTO usage_ledger (tenant, thread_id, run_id, model, at, prompt, completion, total, cached, reasoning, estimated)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		store.TenantOrDefault(e.Tenant), e.ThreadID, e.RunID, e.Model, store.Nanos(e.At),
		u.Prompt, u.Completion, u.Total, u.Cached, u.Reasoning, u.Estimated)
	return classify(err)
}

// UsageRows implements store.Ledger.
func (s *Store) UsageRows(ctx context.Context, q store.UsageQuery) ([]store.UsageRow, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT thread_id, run_id, at / ?, SUM(prompt), SUM(completion), SUM(total), SUM(cached), SUM(reasoning), MAX(estimated), COUNT(*)
		FROM usage_ledger WHERE tenant = ? AND at >= ? AND at < ?
		GROUP BY 1, 2, 3 ORDER BY thread_id, run_id, 3`,
		store.DayNanos, store.TenantOrDefault(q.Tenant), store.Nanos(q.From), store.ToNanos(q.To))
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []store.UsageRow
	for rows.Next() {
		var (
			r   store.UsageRow
			day int64
			est int
		)
		if err := rows.Scan(&r.ThreadID, &r.RunID, &day, &r.Usage.Prompt, &r.Usage.Completion, &r.Usage.Total,
			&r.Usage.Cached, &r.Usage.Reasoning, &est, &r.Calls); err != nil {
			return nil, classify(err)
		}
		r.Day, r.Usage.Estimated = store.FromNanos(day*store.DayNanos), est != 0
		out = append(out, r)
	}
	return out, classify(rows.Err())
}
