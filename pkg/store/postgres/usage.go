package postgres

import (
	"context"

	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Ledger = (*Store)(nil)

// RecordUsage implements store.Ledger.
func (s *Store) RecordUsage(ctx context.Context, e store.UsageEntry) error {
	u := e.Usage
	est := 0
	if u.Estimated {
		est = 1
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO usage_ledger (tenant, thread_id, run_id, model, at, prompt, completion, total, cached, reasoning, estimated)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		store.TenantOrDefault(e.Tenant), e.ThreadID, e.RunID, e.Model, store.Nanos(e.At),
		int64(u.Prompt), int64(u.Completion), int64(u.Total), int64(u.Cached), int64(u.Reasoning), est)
	return classify(err)
}

// UsageRows implements store.Ledger.
func (s *Store) UsageRows(ctx context.Context, q store.UsageQuery) ([]store.UsageRow, error) {
	rows, err := s.pool.Query(ctx, `SELECT thread_id, run_id, at / $1, SUM(prompt)::BIGINT, SUM(completion)::BIGINT, SUM(total)::BIGINT,
			SUM(cached)::BIGINT, SUM(reasoning)::BIGINT, MAX(estimated), COUNT(*)
		FROM usage_ledger WHERE tenant = $2 AND at >= $3 AND at < $4
		GROUP BY 1, 2, 3 ORDER BY thread_id, run_id, 3`,
		store.DayNanos, store.TenantOrDefault(q.Tenant), store.Nanos(q.From), store.ToNanos(q.To))
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []store.UsageRow
	for rows.Next() {
		var (
			r                                  store.UsageRow
			day, p, c, tot, cached, rsn, calls int64
			est                                int32
		)
		if err := rows.Scan(&r.ThreadID, &r.RunID, &day, &p, &c, &tot, &cached, &rsn, &est, &calls); err != nil {
			return nil, classify(err)
		}
		r.Usage.Prompt, r.Usage.Completion, r.Usage.Total, r.Usage.Cached, r.Usage.Reasoning = int(p), int(c), int(tot), int(cached), int(rsn)
		r.Day, r.Usage.Estimated, r.Calls = store.FromNanos(day*store.DayNanos), est != 0, int(calls)
		out = append(out, r)
	}
	return out, classify(rows.Err())
}
