package agentsvc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/skills"
	"github.com/plumbhq/plumb/pkg/store"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The skill RPCs act on the caller's tenant only: another tenant's skill
// is NOT_FOUND, as if it did not exist. pkg/skills validates every
// upload; its errors name the request field they are about.

// MaxTenantSkills bounds a tenant's stored skills: each run segment lists
// them all, and copies them all into a box that it uses.
const MaxTenantSkills = 100

// errSkillLimit is PutSkill's error for a tenant at MaxTenantSkills.
var errSkillLimit = errors.New("skill limit reached")

// errNoSkillStore is the skill RPCs' error on a service built without a
// skill store.
var errNoSkillStore = errors.New("skills are not available on this agentd")

func skillInfo(s store.Skill) *plumbv1.SkillInfo {
	return &plumbv1.SkillInfo{
		Name: s.Name, Description: s.Description, SizeBytes: s.Size, FileCount: int32(s.Files), Sha256: s.SHA256,
		CreateTime: timestamppb.New(s.CreatedAt), UpdateTime: timestamppb.New(s.UpdatedAt),
	}
}

func (s *Service) skillStore() (store.Skills, error) {
	if s.cfg.Skills == nil {
		return nil, errNoSkillStore
	}
	return s.cfg.Skills, nil
}

// skillField maps a pkg/skills error to the request field it is about:
// files or files[<path>] (front matter, name, description and body are
// the content of files[SKILL.md]).
func skillField(err error) error {
	var e *skills.Error
	if !errors.As(err, &e) {
		return err
	}
	field := e.Field
	switch field {
	case "front_matter", "name", "description", "body":
		// The request's name was checked first: a bad or different
		// name here is the one in SKILL.md.
		field = "files[" + skills.FileName + "]"
	}
	return InvalidField(field, "%s", e.Error())
}

// PutSkill validates and stores a skill of the caller's tenant.
func (s *Service) PutSkill(ctx context.Context, req *plumbv1.PutSkillRequest) (*plumbv1.PutSkillResponse, error) {
	if err := skills.ValidName(req.GetName()); err != nil {
		return nil, Status(InvalidField("name", "%v", err))
	}
	if len(req.GetFiles()) == 0 {
		return nil, Status(InvalidField("files", "no files; a skill needs at least a %s", skills.FileName))
	}
	st, err := s.skillStore()
	if err != nil {
		return nil, Status(err)
	}
	sk, err := skills.Parse(req.GetName(), req.GetFiles())
	if err != nil {
		return nil, Status(skillField(err))
	}
	t := tenant.From(ctx)
	list, err := st.ListSkills(ctx, t)
	if err != nil {
		return nil, s.status("put skill", err)
	}
	if len(list) >= MaxTenantSkills && !slices.ContainsFunc(list, func(x store.Skill) bool { return x.Name == sk.Name }) {
		return nil, Status(fmt.Errorf("%w: the tenant has %d skills, the most it may store; delete one first", errSkillLimit, len(list)))
	}
	archive, err := skills.Pack(sk.Files)
	if err != nil {
		return nil, s.status("put skill", err)
	}
	now := time.Now().UTC()
	rec := store.Skill{
		Tenant: t, Name: sk.Name, Description: sk.Description, Archive: archive,
		Size: sk.Size(), Files: len(sk.Files), SHA256: skills.Digest(archive), CreatedAt: now, UpdatedAt: now,
	}
	created, err := st.PutSkill(ctx, rec)
	if err != nil {
		return nil, s.status("put skill", err)
	}
	if !created {
		if got, err := st.GetSkill(ctx, rec.Tenant, rec.Name); err == nil {
			rec.CreatedAt = got.CreatedAt
		}
	}
	s.lg.Info("skill stored", zap.String("tenant", rec.Tenant), zap.String("skill", rec.Name), zap.Int64("size", rec.Size), zap.Bool("created", created))
	return &plumbv1.PutSkillResponse{Skill: skillInfo(rec), Created: created}, nil
}

// ListSkills lists the caller's tenant's skills, without files.
func (s *Service) ListSkills(ctx context.Context, _ *plumbv1.ListSkillsRequest) (*plumbv1.ListSkillsResponse, error) {
	st, err := s.skillStore()
	if err != nil {
		return nil, Status(err)
	}
	list, err := st.ListSkills(ctx, tenant.From(ctx))
	if err != nil {
		return nil, s.status("list skills", err)
	}
	resp := &plumbv1.ListSkillsResponse{}
	for _, sk := range list {
		resp.Skills = append(resp.Skills, skillInfo(sk))
	}
	return resp, nil
}

// GetSkill returns a skill of the caller's tenant with its files.
func (s *Service) GetSkill(ctx context.Context, req *plumbv1.GetSkillRequest) (*plumbv1.GetSkillResponse, error) {
	if err := skills.ValidName(req.GetName()); err != nil {
		return nil, Status(InvalidField("name", "%v", err))
	}
	st, err := s.skillStore()
	if err != nil {
		return nil, Status(err)
	}
	sk, err := st.GetSkill(ctx, tenant.From(ctx), req.GetName())
	if err != nil {
		return nil, s.status("get skill", err)
	}
	files, err := skills.Unpack(sk.Archive)
	if err != nil {
		return nil, s.status("get skill", fmt.Errorf("skill %s: %w", sk.Name, err))
	}
	return &plumbv1.GetSkillResponse{Skill: skillInfo(sk), Files: files}, nil
}

// DeleteSkill deletes a skill of the caller's tenant.
func (s *Service) DeleteSkill(ctx context.Context, req *plumbv1.DeleteSkillRequest) (*plumbv1.DeleteSkillResponse, error) {
	if err := skills.ValidName(req.GetName()); err != nil {
		return nil, Status(InvalidField("name", "%v", err))
	}
	st, err := s.skillStore()
	if err != nil {
		return nil, Status(err)
	}
	if err := st.DeleteSkill(ctx, tenant.From(ctx), req.GetName()); err != nil {
		return nil, s.status("delete skill", err)
	}
	return &plumbv1.DeleteSkillResponse{}, nil
}
