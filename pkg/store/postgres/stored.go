package postgres

import (
	"context"

	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.StorageMeter = (*Store)(nil)

// StoredBytes implements store.StorageMeter.
func (s *Store) StoredBytes(ctx context.Context, tenant string) (store.StoredBytes, error) {
	var b store.StoredBytes
	err := s.pool.QueryRow(ctx, `SELECT
		(SELECT COUNT(*) FROM threads WHERE tenant = $1),
		(SELECT COALESCE(SUM(octet_length(m.body)), 0)::BIGINT FROM messages m JOIN threads t ON t.id = m.thread_id WHERE t.tenant = $1),
		(SELECT COALESCE(SUM(octet_length(state) + octet_length(metadata) + COALESCE(octet_length(interrupt), 0)), 0)::BIGINT FROM threads WHERE tenant = $1),
		(SELECT COALESCE(SUM(octet_length(f.doc)), 0)::BIGINT FROM thread_files f JOIN threads t ON t.id = f.thread_id WHERE t.tenant = $1),
		(SELECT COALESCE(SUM(octet_length(r.record)), 0)::BIGINT FROM runs r JOIN threads t ON t.id = r.thread_id WHERE t.tenant = $1)
		+ (SELECT COALESCE(SUM(octet_length(c.thread_id) + octet_length(c.run_id) + octet_length(c.phase) + 32), 0)::BIGINT FROM checkpoints c JOIN threads t ON t.id = c.thread_id WHERE t.tenant = $1)`,
		store.TenantOrDefault(tenant)).Scan(&b.Threads, &b.Messages, &b.State, &b.Files, &b.Runs)
	return b, classify(err)
}
