package sqlite

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
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM runs r JOIN threads t ON t.id = r.thread_id
		WHERE r.status = ? AND t.tenant = ? AND r.thread_id <> ?`,
		string(agent.StatusRunning), store.TenantOrDefault(tenant), except).Scan(&n)
	return n, classify(err)
}

// RunsSince implements store.QuotaCounts.
func (s *Store) RunsSince(ctx context.Context, tenant string, since time.Time) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM runs r JOIN threads t ON t.id = r.thread_id
		WHERE r.created_at >= ? AND t.tenant = ?`,
		store.Nanos(since), store.TenantOrDefault(tenant)).Scan(&n)
	return n, classify(err)
}

// LiveSandboxes implements store.QuotaCounts.
func (s *Store) LiveSandboxes(ctx context.Context, tenant, except string) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM threads WHERE tenant = ? AND sandbox_id <> '' AND id <> ?`,
		store.TenantOrDefault(tenant), except).Scan(&n)
	return n, classify(err)
}
