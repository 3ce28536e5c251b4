package postgres

import (
	"context"
	"time"

	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.SandboxLedger = (*Store)(nil)

// SandboxStarted implements store.SandboxLedger.
func (s *Store) SandboxStarted(ctx context.Context, sp store.SandboxSpan) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO sandbox_usage (sandbox_id, tenant, thread_id, started_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (sandbox_id) DO NOTHING`, sp.ID, store.TenantOrDefault(sp.Tenant), sp.ThreadID, store.Nanos(sp.Started))
	return classify(err)
}

// SandboxEnded implements store.SandboxLedger.
func (s *Store) SandboxEnded(ctx context.Context, id string, at time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE sandbox_usage SET ended_at = $1 WHERE sandbox_id = $2 AND ended_at = 0`, store.Nanos(at), id)
	return classify(err)
}

// SandboxSpans implements store.SandboxLedger.
func (s *Store) SandboxSpans(ctx context.Context, q store.UsageQuery) ([]store.SandboxSpan, error) {
	rows, err := s.pool.Query(ctx, `SELECT sandbox_id, tenant, thread_id, started_at, ended_at FROM sandbox_usage
		WHERE tenant = $1 AND started_at < $2 AND (ended_at = 0 OR ended_at > $3) ORDER BY started_at, sandbox_id`,
		store.TenantOrDefault(q.Tenant), store.ToNanos(q.To), store.Nanos(q.From))
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []store.SandboxSpan
	for rows.Next() {
		sp, err := store.ScanSandboxSpan(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, sp)
	}
	return out, classify(rows.Err())
}
