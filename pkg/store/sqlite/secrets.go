package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Secrets = (*Store)(nil)

// PutSecret implements store.Secrets.
func (s *Store) PutSecret(ctx context.Context, sec store.Secret) (bool, error) {
	created := false
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE secrets SET sealed = ?, updated_at = ? WHERE tenant = ? AND name = ?`,
			sec.Sealed, sec.UpdatedAt.UnixNano(), sec.Tenant, sec.Name)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		created = true
		_, err = tx.ExecContext(ctx, `INSERT INTO secrets (tenant, name, sealed, created_at, updated_at) VALUES (?, ?, ?, ?, ?)`,
			sec.Tenant, sec.Name, sec.Sealed, sec.CreatedAt.UnixNano(), sec.UpdatedAt.UnixNano())
		return err
	})
	if err != nil {
		return false, fmt.Errorf("put secret %s: %w", sec.Name, err)
	}
	return created, nil
}

// GetSecret implements store.Secrets.
func (s *Store) GetSecret(ctx context.Context, tenant, name string) (store.Secret, error) {
	sec := store.Secret{Tenant: tenant, Name: name}
	var c, u int64
	err := s.db.QueryRowContext(ctx, `SELECT sealed, created_at, updated_at FROM secrets WHERE tenant = ? AND name = ?`, tenant, name).Scan(&sec.Sealed, &c, &u)
	if errors.Is(err, sql.ErrNoRows) {
		return sec, fmt.Errorf("secret %s: %w", name, store.ErrSecretNotFound)
	}
	if err != nil {
		return sec, fmt.Errorf("get secret %s: %w", name, err)
	}
	sec.CreatedAt, sec.UpdatedAt = time.Unix(0, c).UTC(), time.Unix(0, u).UTC()
	return sec, nil
}

// ListSecrets implements store.Secrets.
func (s *Store) ListSecrets(ctx context.Context, tenant string) ([]store.Secret, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, created_at, updated_at FROM secrets WHERE tenant = ? ORDER BY name`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	var out []store.Secret
	for rows.Next() {
		sec := store.Secret{Tenant: tenant}
		var c, u int64
		if err := rows.Scan(&sec.Name, &c, &u); err != nil {
			return nil, fmt.Errorf("list secrets: %w", err)
		}
		sec.CreatedAt, sec.UpdatedAt = time.Unix(0, c).UTC(), time.Unix(0, u).UTC()
		out = append(out, sec)
	}
	return out, rows.Err()
}

// DeleteSecret implements store.Secrets.
func (s *Store) DeleteSecret(ctx context.Context, tenant, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM secrets WHERE tenant = ? AND name = ?`, tenant, name)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("secret %s: %w", name, store.ErrSecretNotFound)
	}
	return nil
}
