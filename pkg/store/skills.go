package store

import (
	"context"
	"errors"
	"time"
)

// ErrSkillNotFound is returned for a skill the tenant does not have.
var ErrSkillNotFound = errors.New("skill not found")

// Skill is a tenant's stored Agent Skill. Archive holds its files as
// pkg/skills packed them; the store does not look inside.
type Skill struct {
	Tenant      string
	Name        string
	Description string
	// Archive is the skill's files (skills.Pack); empty in lists.
	Archive []byte
	// Size is the bytes of all its files, Files their number.
	Size  int64
	Files int
	// SHA256 is the hex digest of Archive.
	SHA256    string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Skills stores tenants' skills, keyed by (tenant, name). Both durable
// stores keep them in a table of the same shape.
type Skills interface {
	// PutSkill creates or replaces a skill (CreatedAt is kept on
	// replace); it reports whether it created one.
	PutSkill(ctx context.Context, s Skill) (created bool, err error)
	// GetSkill returns one skill with its archive, or ErrSkillNotFound.
	GetSkill(ctx context.Context, tenant, name string) (Skill, error)
	// ListSkills returns a tenant's skills by name, without archives.
	ListSkills(ctx context.Context, tenant string) ([]Skill, error)
	// DeleteSkill removes a skill, or returns ErrSkillNotFound.
	DeleteSkill(ctx context.Context, tenant, name string) error
}

// SkillSummaryColumns are the skills columns ScanSkillSummary reads, in
// order: all but the archive, for listings.
const SkillSummaryColumns = `name, description, size, files, sha256, created_at, updated_at`

// ScanSkillSummary reads one row of SkillSummaryColumns as a skill of
// tenant (without its Archive).
func ScanSkillSummary(r Scanner, tenant string) (Skill, error) {
	sk := Skill{Tenant: tenant}
	var c, u int64
	if err := r.Scan(&sk.Name, &sk.Description, &sk.Size, &sk.Files, &sk.SHA256, &c, &u); err != nil {
		return Skill{}, err
	}
	sk.CreatedAt, sk.UpdatedAt = FromNanos(c), FromNanos(u)
	return sk, nil
}
