package postgres

import (
	"context"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.QuotaCounts = (*Store)(nil)

// RunningRuns implements store.QuotaCounts.
func (s *Store) RunningRuns(ctx context.Context, tenant, except string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM runs r JOIN threads t ON t.id = r.thread_id
		WHERE r.status = $1 AND t.tenant = $2 AND r.thread_id <> $3`,
		string(agent.StatusRunning), store.TenantOrDefault(tenant), except).Scan(&n)
	return n, classify(err)
}

// RunsSince implements store.QuotaCounts.
func (s *Store) RunsSince(ctx context.Context, tenant string, since time.Time) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM runs r JOIN threads t ON t.id = r.thread_id
		WHERE r.created_at >= $1 AND t.tenant = $2`,
		store.Nanos(since), store.TenantOrDefault(tenant)).Scan(&n)
	return n, classify(err)
}

// LiveSandboxes implements store.QuotaCounts.
func (s *Store) LiveSandboxes(ctx context.Context, tenant, except string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM threads WHERE tenant = $1 AND sandbox_id <> '' AND id <> $2`,
		store.TenantOrDefault(tenant), except).Scan(&n)
	return n, classify(err)
}
