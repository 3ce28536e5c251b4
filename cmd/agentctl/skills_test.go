package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeSkills records the skills agentctl stores.
type fakeSkills struct {
	plumbv1.UnimplementedAgentServiceServer
	mu    sync.Mutex
	files map[string]map[string][]byte
}

func (f *fakeSkills) PutSkill(_ context.Context, r *plumbv1.PutSkillRequest) (*plumbv1.PutSkillResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, had := f.files[r.GetName()]
	f.files[r.GetName()] = r.GetFiles()
	return &plumbv1.PutSkillResponse{Skill: &plumbv1.SkillInfo{Name: r.GetName(), FileCount: int32(len(r.GetFiles()))}, Created: !had}, nil
}

func (f *fakeSkills) ListSkills(context.Context, *plumbv1.ListSkillsRequest) (*plumbv1.ListSkillsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &plumbv1.ListSkillsResponse{}
	for n, fs := range f.files {
		resp.Skills = append(resp.Skills, &plumbv1.SkillInfo{Name: n, Description: "Greets.", FileCount: int32(len(fs))})
	}
	return resp, nil
}

func (f *fakeSkills) GetSkill(_ context.Context, r *plumbv1.GetSkillRequest) (*plumbv1.GetSkillResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, ok := f.files[r.GetName()]
	if !ok {
		return nil, status.Error(codes.NotFound, "skill not found")
	}
	return &plumbv1.GetSkillResponse{Skill: &plumbv1.SkillInfo{Name: r.GetName()}, Files: fs}, nil
}

func (f *fakeSkills) DeleteSkill(_ context.Context, r *plumbv1.DeleteSkillRequest) (*plumbv1.DeleteSkillResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.files[r.GetName()]; !ok {
		return nil, status.Error(codes.NotFound, "skill not found")
	}
	delete(f.files, r.GetName())
	return &plumbv1.DeleteSkillResponse{}, nil
}

func TestSkillsCommands(t *testing.T) {
	dir := t.TempDir()
	mk := func(p, c string) {
		t.Helper()
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("hello/SKILL.md", "---\nname: hello\ndescription: Greets.\n---\nSay hi.\n")
	mk("hello/scripts/hi.sh", "echo hi\n")
	mk("bad/SKILL.md", "no front matter\n")
	out := filepath.Join(t.TempDir(), "copy")
	f := &fakeSkills{files: map[string]map[string][]byte{}}
	addr := serve(t, f)
	ctx := t.Context()
	tests := []struct {
		name     string
		args     []string
		out, err string
	}{
		{name: "put", args: []string{"skills", "put", filepath.Join(dir, "hello")}, out: "skill hello created (2 files"},
		{name: "put again", args: []string{"skills", "put", filepath.Join(dir, "hello")}, out: "skill hello updated"},
		{name: "put a bad skill", args: []string{"skills", "put", filepath.Join(dir, "bad")}, err: "front_matter"},
		{name: "list", args: []string{"skills", "list"}, out: "hello  2"},
		{name: "get", args: []string{"skills", "get", "hello"}, out: "scripts/hi.sh (8 bytes)"},
		{name: "get into a dir", args: []string{"skills", "get", "--out", out, "hello"}},
		{name: "delete", args: []string{"skills", "delete", "hello"}, out: "skill hello deleted\n"},
		{name: "delete missing", args: []string{"skills", "delete", "hello"}, err: "not found"},
		{name: "no verb", args: []string{"skills"}, err: "want put"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &cli{}
			err := c.run(ctx, addr, tc.args...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !strings.Contains(c.out.String(), tc.out) {
				t.Fatalf("out %q, err %v; want %q", c.out.String(), err, tc.out)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(out, "scripts", "hi.sh")); err != nil || string(b) != "echo hi\n" {
		t.Fatalf("get --out wrote %q, %v", b, err)
	}
}
