package sqlite

import (
	"context"

	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.StorageMeter = (*Store)(nil)

// StoredBytes implements store.StorageMeter.
func (s *Store) StoredBytes(ctx context.Context, tenant string) (store.StoredBytes, error) {
	var b store.StoredBytes
	err := s.db.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM threads WHERE tenant = ?1),
		(SELECT COALESCE(SUM(length(CAST(m.body AS BLOB))), 0) FROM messages m JOIN threads t ON t.id = m.thread_id WHERE t.tenant = ?1),
		(SELECT COALESCE(SUM(length(CAST(state AS BLOB)) + length(CAST(metadata AS BLOB)) + COALESCE(length(CAST(interrupt AS BLOB)), 0)), 0) FROM threads WHERE tenant = ?1),
		(SELECT COALESCE(SUM(length(CAST(f.doc AS BLOB))), 0) FROM thread_files f JOIN threads t ON t.id = f.thread_id WHERE t.tenant = ?1),
		(SELECT COALESCE(SUM(length(CAST(r.record AS BLOB))), 0) FROM runs r JOIN threads t ON t.id = r.thread_id WHERE t.tenant = ?1)
		+ (SELECT COALESCE(SUM(length(c.thread_id) + length(c.run_id) + length(c.phase) + 32), 0) FROM checkpoints c JOIN threads t ON t.id = c.thread_id WHERE t.tenant = ?1)`,
		store.TenantOrDefault(tenant)).Scan(&b.Threads, &b.Messages, &b.State, &b.Files, &b.Runs)
	return b, classify(err)
}
