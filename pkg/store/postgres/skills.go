package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Skills = (*Store)(nil)

// PutSkill implements store.Skills.
func (s *Store) PutSkill(ctx context.Context, sk store.Skill) (bool, error) {
	var created bool
	err := s.pool.QueryRow(ctx, `INSERT INTO skills (tenant, name, description, archive, size, files, sha256, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (tenant, name) DO UPDATE SET description = EXCLUDED.description, archive = EXCLUDED.archive, size = EXCLUDED.size,
			files = EXCLUDED.files, sha256 = EXCLUDED.sha256, updated_at = EXCLUDED.updated_at
		RETURNING (xmax = 0)`, sk.Tenant, sk.Name, sk.Description, sk.Archive, sk.Size, sk.Files, sk.SHA256,
		sk.CreatedAt.UnixNano(), sk.UpdatedAt.UnixNano()).Scan(&created)
	if err != nil {
		return false, classify(fmt.Errorf("put skill %s: %w", sk.Name, err))
	}
	return created, nil
}

// GetSkill implements store.Skills.
func (s *Store) GetSkill(ctx context.Context, tenant, name string) (store.Skill, error) {
	sk := store.Skill{Tenant: tenant, Name: name}
	var c, u int64
	err := s.pool.QueryRow(ctx, `SELECT description, archive, size, files, sha256, created_at, updated_at FROM skills WHERE tenant = $1 AND name = $2`,
		tenant, name).Scan(&sk.Description, &sk.Archive, &sk.Size, &sk.Files, &sk.SHA256, &c, &u)
	if errors.Is(err, pgx.ErrNoRows) {
		return sk, fmt.Errorf("skill %s: %w", name, store.ErrSkillNotFound)
	}
	if err != nil {
		return sk, classify(fmt.Errorf("get skill %s: %w", name, err))
	}
	sk.CreatedAt, sk.UpdatedAt = time.Unix(0, c).UTC(), time.Unix(0, u).UTC()
	return sk, nil
}

// ListSkills implements store.Skills.
func (s *Store) ListSkills(ctx context.Context, tenant string) ([]store.Skill, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+store.SkillSummaryColumns+` FROM skills WHERE tenant = $1 ORDER BY name`, tenant)
	if err != nil {
		return nil, classify(fmt.Errorf("list skills: %w", err))
	}
	defer rows.Close()
	var out []store.Skill
	for rows.Next() {
		sk, err := store.ScanSkillSummary(rows, tenant)
		if err != nil {
			return nil, classify(fmt.Errorf("list skills: %w", err))
		}
		out = append(out, sk)
	}
	return out, classify(rows.Err())
}

// DeleteSkill implements store.Skills.
func (s *Store) DeleteSkill(ctx context.Context, tenant, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM skills WHERE tenant = $1 AND name = $2`, tenant, name)
	if err != nil {
		return classify(fmt.Errorf("delete skill %s: %w", name, err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("skill %s: %w", name, store.ErrSkillNotFound)
	}
	return nil
}
