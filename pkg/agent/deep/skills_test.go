package deep_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/composite"
	"github.com/plumbhq/plumb/pkg/backend/state"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/skills"
)

// TestSkillsMiddleware runs the skills middleware end to end against the
// scripted model: the system prompt lists the skills' names, descriptions
// and paths, never a body; the model reads a body with read_file through
// the /skills/ route; a config skill outside the profile's list is not
// shown; workspace skills are found under <home>/.agents/skills, win over
// a route skill of the same name, and bad ones are named with why.
func TestSkillsMiddleware(t *testing.T) {
	const (
		pdfBody = "# PDF\n\nRun scripts/fill.py with the form.\n"
		secret  = "SECRET-BODY-MARKER"
	)
	files := map[string]string{
		"/pdf-tools/SKILL.md":        "---\nname: pdf-tools\ndescription: Fill PDF forms.\n---\n" + pdfBody,
		"/pdf-tools/scripts/fill.py": "print('filled')",
		"/hidden/SKILL.md":           "---\nname: hidden\ndescription: Not for main.\n---\n" + secret,
		"/shadowed/SKILL.md":         "---\nname: shadowed\ndescription: The tenant's version.\n---\n" + secret,
	}
	workspace := map[string]string{
		"/.agents/skills/shadowed/SKILL.md": "---\nname: shadowed\ndescription: The workspace's version.\n---\n" + secret,
		"/.agents/skills/broken/SKILL.md":   "# no front matter\n",
		"/.agents/skills/mismatch/SKILL.md": "---\nname: other\ndescription: x\n---\n",
	}
	infos := []skills.Info{
		{Name: "pdf-tools", Description: "Fill PDF forms.", Origin: skills.OriginTenant, Path: "/skills/pdf-tools/SKILL.md", BoxDir: "/workspace/.skills/pdf-tools"},
		{Name: "hidden", Description: "Not for main.", Origin: skills.OriginConfig, Path: "/skills/hidden/SKILL.md"},
		{Name: "shadowed", Description: "The tenant's version.", Origin: skills.OriginTenant, Path: "/skills/shadowed/SKILL.md"},
	}
	upload := func(t *testing.T, b backend.Backend, m map[string]string) {
		t.Helper()
		for p, c := range m {
			res, err := b.Upload(context.Background(), []backend.UploadItem{{Path: p, Content: []byte(c)}})
			if err != nil || res[0].Err != nil {
				t.Fatalf("upload %s: %v %v", p, err, res[0].Err)
			}
		}
	}
	e := newEnv(t, withConfig(func(c *deep.Config) {
		c.Agents = map[string]profile.Profile{"main": {Skills: []string{"some-other"}}}
		c.Middleware.Skills.Workspace = true
		c.Backend = func(ctx context.Context, _ string, _ map[string]string, _ map[string]json.RawMessage) (deep.ThreadBackend, error) {
			def, route := state.New(), state.New()
			upload(t, def, workspace)
			upload(t, route, files)
			cb, err := composite.New(def, map[string]backend.Backend{"/skills/": route}, "")
			if err != nil {
				return deep.ThreadBackend{}, err
			}
			return deep.ThreadBackend{Backend: cb, Skills: infos}, nil
		}
	}))
	e.srv.Script("main", modeltest.Calls(call("c1", "read_file", `{"file_path":"/skills/pdf-tools/SKILL.md"}`)), modeltest.Text("done"))
	tr := e.run(input("fill my form")).must(t)
	sys := systemPrompt(e.srv.Requests("main")[0])
	for _, want := range []string{
		"## Skills",
		"- pdf-tools: Fill PDF forms. (read /skills/pdf-tools/SKILL.md; in the sandbox: /workspace/.skills/pdf-tools/)",
		"- shadowed: The workspace's version. (read /.agents/skills/shadowed/SKILL.md)",
		"/.agents/skills/broken/SKILL.md: skill: front_matter:",
		`/.agents/skills/mismatch/SKILL.md: its front matter names it "other"`,
	} {
		if !strings.Contains(sys, want) {
			t.Errorf("the system prompt lacks %q:\n%s", want, sys)
		}
	}
	for _, bad := range []string{pdfBody, secret, "hidden", "The tenant's version"} {
		if strings.Contains(sys, bad) {
			t.Errorf("the system prompt shows %q:\n%s", bad, sys)
		}
	}
	if r := tr.result(t, "c1"); r.IsError || !strings.Contains(r.Content, "Run scripts/fill.py with the form.") {
		t.Errorf("read_file of the body = %+v", r)
	}
}

// TestSkillsMiddlewareSilent checks that a run without skills gets no
// skills section.
func TestSkillsMiddlewareSilent(t *testing.T) {
	e := newEnv(t, withFiles())
	e.srv.Script("main", modeltest.Text("hi"))
	e.run(input("hello")).must(t)
	if sys := systemPrompt(e.srv.Requests("main")[0]); strings.Contains(sys, "## Skills") {
		t.Errorf("a skills section without skills:\n%s", sys)
	}
}
