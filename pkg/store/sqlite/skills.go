package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/plumbhq/plumb/pkg/store"
)

var _ store.Skills = (*Store)(nil)

// PutSkill implements store.Skills.
func (s *Store) PutSkill(ctx context.Context, sk store.Skill) (bool, error) {
	created := false
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE skills SET description = ?, archive = ?, size = ?, files = ?, sha256 = ?, updated_at = ? WHERE tenant = ? AND name = ?`,
			sk.Description, sk.Archive, sk.Size, sk.Files, sk.SHA256, sk.UpdatedAt.UnixNano(), sk.Tenant, sk.Name)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		created = true
		_, err = tx.ExecContext(ctx, `INSERT INTO skills (tenant, name, description, archive, size, files, sha256, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			sk.Tenant, sk.Name, sk.Description, sk.Archive, sk.Size, sk.Files, sk.SHA256, sk.CreatedAt.UnixNano(), sk.UpdatedAt.UnixNano())
		return err
	})
	if err != nil {
		return false, fmt.Errorf("put skill %s: %w", sk.Name, err)
	}
	return created, nil
}

// GetSkill implements store.Skills.
func (s *Store) GetSkill(ctx context.Context, tenant, name string) (store.Skill, error) {
	sk := store.Skill{Tenant: tenant, Name: name}
	var c, u int64
	err := s.db.QueryRowContext(ctx, `SELECT description, archive, size, files, sha256, created_at, updated_at FROM skills WHERE tenant = ? AND name = ?`,
		tenant, name).Scan(&sk.Description, &sk.Archive, &sk.Size, &sk.Files, &sk.SHA256, &c, &u)
	if errors.Is(err, sql.ErrNoRows) {
		return sk, fmt.Errorf("skill %s: %w", name, store.ErrSkillNotFound)
	}
	if err != nil {
		return sk, fmt.Errorf("get skill %s: %w", name, err)
	}
	sk.CreatedAt, sk.UpdatedAt = time.Unix(0, c).UTC(), time.Unix(0, u).UTC()
	return sk, nil
}

// ListSkills implements store.Skills.
func (s *Store) ListSkills(ctx context.Context, tenant string) ([]store.Skill, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+store.SkillSummaryColumns+` FROM skills WHERE tenant = ? ORDER BY name`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list skills: %w", err)
	}
	defer rows.Close()
	var out []store.Skill
	for rows.Next() {
		sk, err := store.ScanSkillSummary(rows, tenant)
		if err != nil {
			return nil, fmt.Errorf("list skills: %w", err)
		}
		out = append(out, sk)
	}
	return out, rows.Err()
}

// DeleteSkill implements store.Skills.
func (s *Store) DeleteSkill(ctx context.Context, tenant, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM skills WHERE tenant = ? AND name = ?`, tenant, name)
	if err != nil {
		return fmt.Errorf("delete skill %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("skill %s: %w", name, store.ErrSkillNotFound)
	}
	return nil
}
