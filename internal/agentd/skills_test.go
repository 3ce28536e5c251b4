package agentd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
)

const helloSkill = "---\nname: hello-skill\ndescription: Greets someone with the house greeting. Use when asked to greet.\n---\n" +
	"# Greeting\n\nRun `sh scripts/hello.sh NAME` from this folder and repeat its output.\n"

// TestSkillsEndToEnd: a tenant puts a skill; its run's model sees the
// name and description (not the body), reads the body through the
// /skills/ route and runs the skill's script in the thread's sandbox,
// where agentd copied it; another tenant neither lists, reads, deletes
// nor sees it; bad skills are INVALID_ARGUMENT naming the field.
func TestSkillsEndToEnd(t *testing.T) {
	w := sandboxsvctest.StartWorker(t, sandbox.Config{})
	s := startStack(t, w, "backends: {default: sandbox}\n")
	s.tenant = "acme"
	files := map[string][]byte{"SKILL.md": []byte(helloSkill), "scripts/hello.sh": []byte("echo \"hello-from-skill $1\"\n")}
	put, err := s.c.PutSkill(s.ctx(), &plumbv1.PutSkillRequest{Name: "hello-skill", Files: files})
	if err != nil || !put.GetCreated() || put.GetSkill().GetFileCount() != 2 || len(put.GetSkill().GetSha256()) != 64 {
		t.Fatalf("put = %v, %v", put, err)
	}
	again, err := s.c.PutSkill(s.ctx(), &plumbv1.PutSkillRequest{Name: "hello-skill", Files: files})
	if err != nil || again.GetCreated() || !again.GetSkill().GetCreateTime().AsTime().Equal(put.GetSkill().GetCreateTime().AsTime()) {
		t.Fatalf("replace = %v, %v", again, err)
	}
	for _, tc := range []struct {
		name  string
		req   *plumbv1.PutSkillRequest
		field string
	}{
		{"bad name", &plumbv1.PutSkillRequest{Name: "Hello_Skill", Files: files}, "name"},
		{"no files", &plumbv1.PutSkillRequest{Name: "x"}, "files"},
		{"no front matter", &plumbv1.PutSkillRequest{Name: "x", Files: map[string][]byte{"SKILL.md": []byte("# x\n")}}, "files[SKILL.md]"},
		{"other name", &plumbv1.PutSkillRequest{Name: "x", Files: files}, "files[SKILL.md]"},
		{"huge body", &plumbv1.PutSkillRequest{Name: "x", Files: map[string][]byte{"SKILL.md": []byte("---\nname: x\ndescription: y\n---\n" + strings.Repeat("b", 65<<10))}}, "files[SKILL.md]"},
		{"dot dot", &plumbv1.PutSkillRequest{Name: "hello-skill", Files: map[string][]byte{"SKILL.md": []byte(helloSkill), "../evil.sh": nil}}, "files[../evil.sh]"},
		{"absolute", &plumbv1.PutSkillRequest{Name: "hello-skill", Files: map[string][]byte{"SKILL.md": []byte(helloSkill), "/etc/x": nil}}, "files[/etc/x]"},
	} {
		_, err := s.c.PutSkill(s.ctx(), tc.req)
		if status.Code(err) != codes.InvalidArgument || len(pbconv.FieldViolations(err)) != 1 || pbconv.FieldViolations(err)[0].Field != tc.field {
			t.Errorf("%s: %v, want INVALID_ARGUMENT on %s", tc.name, err, tc.field)
		}
	}
	if l, err := s.c.ListSkills(s.ctx(), &plumbv1.ListSkillsRequest{}); err != nil || len(l.GetSkills()) != 1 || l.GetSkills()[0].GetDescription() == "" {
		t.Fatalf("list = %v, %v", l, err)
	}
	if g, err := s.c.GetSkill(s.ctx(), &plumbv1.GetSkillRequest{Name: "hello-skill"}); err != nil || string(g.GetFiles()["scripts/hello.sh"]) != string(files["scripts/hello.sh"]) {
		t.Fatalf("get = %v, %v", g, err)
	}

	s.model.Script("main",
		modeltest.Calls(mcall("r1", "read_file", `{"file_path":"/skills/hello-skill/SKILL.md"}`)),
		modeltest.Calls(mcall("e1", "execute", `{"command":"cd .skills/hello-skill && sh scripts/hello.sh world"}`)),
		modeltest.Text("hello-from-skill world"))
	_, results := s.mustRun(input("", "Greet the world."))
	wantResult(t, results, "r1", false, "Run `sh scripts/hello.sh NAME`")
	wantResult(t, results, "e1", false, "hello-from-skill world")
	sys := systemPrompt(s.model.Requests("main")[0])
	if !strings.Contains(sys, "- hello-skill: Greets someone with the house greeting. Use when asked to greet. (read /skills/hello-skill/SKILL.md; in the sandbox: /workspace/.skills/hello-skill/)") {
		t.Errorf("the system prompt does not list the skill:\n%s", sys)
	}
	if strings.Contains(sys, "# Greeting") {
		t.Errorf("the system prompt holds the body:\n%s", sys)
	}

	s.tenant = "beta"
	if l, err := s.c.ListSkills(s.ctx(), &plumbv1.ListSkillsRequest{}); err != nil || len(l.GetSkills()) != 0 {
		t.Fatalf("beta lists %v, %v", l, err)
	}
	if _, err := s.c.GetSkill(s.ctx(), &plumbv1.GetSkillRequest{Name: "hello-skill"}); status.Code(err) != codes.NotFound {
		t.Fatalf("beta gets acme's skill: %v", err)
	}
	if _, err := s.c.DeleteSkill(s.ctx(), &plumbv1.DeleteSkillRequest{Name: "hello-skill"}); status.Code(err) != codes.NotFound {
		t.Fatalf("beta deletes acme's skill: %v", err)
	}
	s.model.Script("main", modeltest.Calls(mcall("r2", "read_file", `{"file_path":"/skills/hello-skill/SKILL.md"}`)), modeltest.Text("no"))
	_, results = s.mustRun(input("", "Greet the world."))
	wantResult(t, results, "r2", true)
	reqs := s.model.Requests("main")
	if sys := systemPrompt(reqs[len(reqs)-2]); strings.Contains(sys, "hello-skill") || strings.Contains(sys, "## Skills") {
		t.Errorf("beta's run sees acme's skill:\n%s", sys)
	}

	s.tenant = "acme"
	if _, err := s.c.DeleteSkill(s.ctx(), &plumbv1.DeleteSkillRequest{Name: "hello-skill"}); err != nil {
		t.Fatal(err)
	}
	if l, err := s.c.ListSkills(s.ctx(), &plumbv1.ListSkillsRequest{}); err != nil || len(l.GetSkills()) != 0 {
		t.Fatalf("after delete: %v, %v", l, err)
	}
	s.deleteSandboxes()
}

// TestConfigSkills: a profile's skill directories are loaded when agentd
// starts, listed to that profile's runs, served read-only under /skills/;
// a bad skill fails the start, naming the config entry and the skill.
func TestConfigSkills(t *testing.T) {
	dir := t.TempDir()
	write := func(p, c string) {
		t.Helper()
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("good/hello-skill/SKILL.md", helloSkill)
	s := startStack(t, nil, fmt.Sprintf("agents: {main: {skills: [%s]}}\n", filepath.Join(dir, "good")))
	s.model.Script("main",
		modeltest.Calls(mcall("w1", "write_file", `{"file_path":"/skills/hello-skill/x.txt","content":"x"}`)),
		modeltest.Text("ok"))
	_, results := s.mustRun(input("", "hi"))
	wantResult(t, results, "w1", true, "read-only")
	if sys := systemPrompt(s.model.Requests("main")[0]); !strings.Contains(sys, "- hello-skill: Greets someone") {
		t.Errorf("the system prompt does not list the config skill:\n%s", sys)
	}

	write("bad/Bad_Skill/SKILL.md", "no front matter")
	cfg, err := Parse([]byte(fmt.Sprintf("version: 2\nstorage: {sqlite_path: %s}\nagents: {main: {skills: [%s]}}\n",
		filepath.Join(t.TempDir(), "a.db"), filepath.Join(dir, "bad"))))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(context.Background(), cfg, Options{Env: func(string) string { return "" }})
	if err == nil || !strings.Contains(err.Error(), "agents.main.skills[0]") || !strings.Contains(err.Error(), "Bad_Skill") {
		t.Fatalf("a bad config skill: %v", err)
	}
}

// TestSkillsReplicas: two agentd cores on one PostgreSQL share the
// tenants' skills: a skill put through one is listed by the other, and a
// run there reads it and runs its script in the box.
func TestSkillsReplicas(t *testing.T) {
	dsn := pgtest.New(t)
	w := sandboxsvctest.StartWorker(t, sandbox.Config{})
	storage := func() string {
		return fmt.Sprintf("storage: {sqlite_path: %s, postgres_dsn: %q}\nbackends: {default: sandbox}\n", filepath.Join(t.TempDir(), "agentd.db"), dsn)
	}
	a, b := startStack(t, w, storage()), startStack(t, w, storage())
	a.tenant, b.tenant = "acme", "acme"
	files := map[string][]byte{"SKILL.md": []byte(helloSkill), "scripts/hello.sh": []byte("echo \"hello-from-skill $1\"\n")}
	if _, err := a.c.PutSkill(a.ctx(), &plumbv1.PutSkillRequest{Name: "hello-skill", Files: files}); err != nil {
		t.Fatal(err)
	}
	if l, err := b.c.ListSkills(b.ctx(), &plumbv1.ListSkillsRequest{}); err != nil || len(l.GetSkills()) != 1 || l.GetSkills()[0].GetName() != "hello-skill" {
		t.Fatalf("the other replica lists %v, %v", l, err)
	}
	b.model.Script("main",
		modeltest.Calls(mcall("r1", "read_file", `{"file_path":"/skills/hello-skill/SKILL.md"}`)),
		modeltest.Calls(mcall("e1", "execute", `{"command":"sh .skills/hello-skill/scripts/hello.sh replicas"}`)),
		modeltest.Text("done"))
	_, results := b.mustRun(input("", "Greet the replicas."))
	wantResult(t, results, "r1", false, "# Greeting")
	wantResult(t, results, "e1", false, "hello-from-skill replicas")
	if _, err := b.c.DeleteSkill(b.ctx(), &plumbv1.DeleteSkillRequest{Name: "hello-skill"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.GetSkill(a.ctx(), &plumbv1.GetSkillRequest{Name: "hello-skill"}); status.Code(err) != codes.NotFound {
		t.Fatalf("deleted on one replica, the other gets: %v", err)
	}
	b.deleteSandboxes()
}
