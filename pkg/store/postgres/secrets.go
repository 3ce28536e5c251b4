package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Secrets = (*Store)(nil)

// PutSecret implements store.Secrets.
func (s *Store) PutSecret(ctx context.Context, sec store.Secret) (bool, error) {
	var created bool
	err := s.pool.QueryRow(ctx, `INSERT INTO secrets (tenant, name, sealed, created_at, updated_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (tenant, name) DO UPDATE SET sealed = EXCLUDED.sealed, updated_at = EXCLUDED.updated_at
		RETURNING (xmax = 0)`, sec.Tenant, sec.Name, sec.Sealed, sec.CreatedAt.UnixNano(), sec.UpdatedAt.UnixNano()).Scan(&created)
	if err != nil {
		return false, classify(fmt.Errorf("put secret %s: %w", sec.Name, err))
	}
	return created, nil
}

// GetSecret implements store.Secrets.
func (s *Store) GetSecret(ctx context.Context, tenant, name string) (store.Secret, error) {
	sec := store.Secret{Tenant: tenant, Name: name}
	var c, u int64
	err := s.pool.QueryRow(ctx, `SELECT sealed, created_at, updated_at FROM secrets WHERE tenant = $1 AND name = $2`, tenant, name).Scan(&sec.Sealed, &c, &u)
	if errors.Is(err, pgx.ErrNoRows) {
		return sec, fmt.Errorf("secret %s: %w", name, store.ErrSecretNotFound)
	}
	if err != nil {
		return sec, classify(fmt.Errorf("get secret %s: %w", name, err))
	}
	sec.CreatedAt, sec.UpdatedAt = time.Unix(0, c).UTC(), time.Unix(0, u).UTC()
	return sec, nil
}

// ListSecrets implements store.Secrets.
func (s *Store) ListSecrets(ctx context.Context, tenant string) ([]store.Secret, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, created_at, updated_at FROM secrets WHERE tenant = $1 ORDER BY name`, tenant)
	if err != nil {
		return nil, classify(fmt.Errorf("list secrets: %w", err))
	}
	defer rows.Close()
	var out []store.Secret
	for rows.Next() {
		sec := store.Secret{Tenant: tenant}
		var c, u int64
		if err := rows.Scan(&sec.Name, &c, &u); err != nil {
			return nil, classify(fmt.Errorf("list secrets: %w", err))
		}
		sec.CreatedAt, sec.UpdatedAt = time.Unix(0, c).UTC(), time.Unix(0, u).UTC()
		out = append(out, sec)
	}
	return out, classify(rows.Err())
}

// DeleteSecret implements store.Secrets.
func (s *Store) DeleteSecret(ctx context.Context, tenant, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM secrets WHERE tenant = $1 AND name = $2`, tenant, name)
	if err != nil {
		return classify(fmt.Errorf("delete secret %s: %w", name, err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("secret %s: %w", name, store.ErrSecretNotFound)
	}
	return nil
}
