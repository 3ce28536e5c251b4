package storefs

import (
	"context"
	"fmt"
	"time"
)

// DeleteModifiedBefore deletes up to limit files (every namespace) last
// modified before before, with their content, and returns how many: the
// retention sweeper's store_items TTL. Modification times are compared as
// their stored RFC 3339 text, so the cutoff is exact to the second.
func (d *DB) DeleteModifiedBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		limit = 500
	}
	cutoff := before.UTC().Truncate(time.Second).Format(time.RFC3339)
	tx, release, err := d.beginWrite(ctx)
	if err != nil {
		return 0, dbErr(err)
	}
	defer release()
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	const pick = `SELECT id FROM store_files WHERE modified_at < ? ORDER BY modified_at, id LIMIT ?`
	if _, err := tx.ExecContext(ctx, `DELETE FROM store_chunks WHERE file_id IN (`+pick+`)`, cutoff, limit); err != nil {
		return 0, dbErr(fmt.Errorf("expire store files: %w", err))
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM store_files WHERE id IN (`+pick+`)`, cutoff, limit)
	if err != nil {
		return 0, dbErr(fmt.Errorf("expire store files: %w", err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, dbErr(err)
	}
	if err := tx.Commit(); err != nil {
		return 0, dbErr(err)
	}
	return int(n), nil
}
