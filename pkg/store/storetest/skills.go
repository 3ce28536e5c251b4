package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/store"
)

// RunSkills checks a store.Skills: put creates then replaces (keeping
// CreatedAt), get with the archive, list without archives and by name,
// tenant scoping (another tenant's skill is not found), delete.
func RunSkills(t *testing.T, s store.Skills) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Unix(1700000000, 0).UTC()
	put := func(tenant, name, desc, archive string, at time.Time) bool {
		t.Helper()
		created, err := s.PutSkill(ctx, store.Skill{Tenant: tenant, Name: name, Description: desc, Archive: []byte(archive),
			Size: int64(len(archive)), Files: 1, SHA256: "sha-" + archive, CreatedAt: at, UpdatedAt: at})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	if !put("a", "pdf", "d1", "v1", t0) || !put("a", "alpha", "x", "x", t0) || !put("b", "pdf", "other", "o", t0) {
		t.Fatal("first puts did not create")
	}
	if put("a", "pdf", "d2", "v2-longer", t0.Add(time.Hour)) {
		t.Fatal("a second put created")
	}
	got, err := s.GetSkill(ctx, "a", "pdf")
	if err != nil || string(got.Archive) != "v2-longer" || got.Description != "d2" || got.Size != 9 || got.Files != 1 || got.SHA256 != "sha-v2-longer" ||
		!got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(t0.Add(time.Hour)) || got.Tenant != "a" {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if _, err := s.GetSkill(ctx, "c", "pdf"); !errors.Is(err, store.ErrSkillNotFound) {
		t.Fatalf("another tenant's get = %v, want ErrSkillNotFound", err)
	}
	list, err := s.ListSkills(ctx, "a")
	if err != nil || len(list) != 2 || list[0].Name != "alpha" || list[1].Name != "pdf" || list[0].Archive != nil || list[1].Archive != nil ||
		list[1].Description != "d2" || list[1].Size != 9 {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if list, err := s.ListSkills(ctx, "nobody"); err != nil || len(list) != 0 {
		t.Fatalf("empty tenant list = %+v, %v", list, err)
	}
	if err := s.DeleteSkill(ctx, "c", "pdf"); !errors.Is(err, store.ErrSkillNotFound) {
		t.Fatalf("another tenant's delete = %v", err)
	}
	if err := s.DeleteSkill(ctx, "a", "pdf"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSkill(ctx, "a", "pdf"); !errors.Is(err, store.ErrSkillNotFound) {
		t.Fatalf("get after delete = %v", err)
	}
	if err := s.DeleteSkill(ctx, "a", "pdf"); !errors.Is(err, store.ErrSkillNotFound) {
		t.Fatalf("second delete = %v", err)
	}
	if got, err := s.GetSkill(ctx, "b", "pdf"); err != nil || string(got.Archive) != "o" {
		t.Fatalf("the other tenant's skill = %+v, %v", got, err)
	}
}
