package skillprompt

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/skills"
)

// Name is the middleware's name.
const Name = "skills"

// WorkspaceDir is where a thread's own skills live, relative to its
// backend's home: <home>/.agents/skills/<name>/SKILL.md.
const WorkspaceDir = ".agents/skills"

// MaxWorkspaceSkills bounds the workspace skills listed.
const MaxWorkspaceSkills = 100

// Config configures one agent context's skills.
type Config struct {
	// Skills are the skills agentd resolved for the thread (config and
	// tenant), with where to read each.
	Skills []skills.Info
	// Workspace turns on the discovery of the thread's own skills under
	// <home>/.agents/skills (it opens the thread's sandbox when the
	// default backend is one).
	Workspace bool
	// Backend is the thread's backend (for workspace skills).
	Backend backend.Backend
}

// Middleware is the skills middleware; build one per agent context.
type Middleware struct {
	agent.BaseMiddleware
	cfg     Config
	section string
}

// New returns the middleware.
func New(cfg Config) *Middleware { return &Middleware{cfg: cfg} }

// Name implements agent.Middleware.
func (*Middleware) Name() string { return Name }

// BeforeAgent resolves the skills of this run segment: the configured
// ones, then the workspace's, which take precedence.
func (m *Middleware) BeforeAgent(ctx context.Context, rc *agent.RunContext, _ *agent.State) error {
	list := m.cfg.Skills
	var skipped []string
	if m.cfg.Workspace && m.cfg.Backend != nil {
		ws, bad := Workspace(ctx, m.cfg.Backend, rc.Logger)
		list, skipped = skills.Merge(list, ws), bad
	}
	m.section = Section(list, skipped)
	return nil
}

// Workspace lists the valid skills under <home>/.agents/skills of b and
// describes the bad ones (path: reason). Failures to reach the workspace
// list nothing (logged): a run does not fail for its skills.
func Workspace(ctx context.Context, b backend.Backend, lg *zap.Logger) ([]skills.Info, []string) {
	if lg == nil {
		lg = zap.NewNop()
	}
	root := vpath.Join(backend.Home(b), WorkspaceDir)
	res, err := b.Glob(ctx, backend.GlobRequest{Pattern: "*/" + skills.FileName, Path: root})
	if err != nil {
		if backend.CodeOf(err) != backend.CodeFileNotFound {
			lg.Warn("workspace skills unavailable", zap.String("path", root), zap.Error(err))
		}
		return nil, nil
	}
	var paths []string
	for _, f := range res.Matches {
		if len(paths) == MaxWorkspaceSkills {
			break
		}
		paths = append(paths, f.Path)
	}
	if len(paths) == 0 {
		return nil, nil
	}
	dl, err := b.Download(ctx, paths)
	if err != nil {
		lg.Warn("workspace skills unavailable", zap.String("path", root), zap.Error(err))
		return nil, nil
	}
	_, sandbox := b.(backend.Executor)
	var out []skills.Info
	var bad []string
	for i, r := range dl {
		p := paths[i]
		dir := vpath.Dir(p)
		if r.Err != nil {
			bad = append(bad, fmt.Sprintf("%s: %s", p, r.Err.Message))
			continue
		}
		if len(r.Content) > skills.MaxBodyBytes+skills.MaxFrontMatterBytes+16 {
			bad = append(bad, fmt.Sprintf("%s: %d bytes; a SKILL.md is at most %d", p, len(r.Content), skills.MaxBodyBytes+skills.MaxFrontMatterBytes))
			continue
		}
		meta, _, err := skills.ParseSkillMD(r.Content)
		if err == nil && meta.Name != vpath.Base(dir) {
			err = fmt.Errorf("its front matter names it %q; it must be its folder's name %q", meta.Name, vpath.Base(dir))
		}
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		info := skills.Info{Name: meta.Name, Description: meta.Description, Origin: skills.OriginWorkspace, Path: p}
		if sandbox {
			info.BoxDir = dir
		}
		out = append(out, info)
	}
	if len(bad) > 0 {
		lg.Info("workspace skills skipped", zap.Strings("skills", bad))
	}
	return out, bad
}

// Section is the system prompt's skills section: names, descriptions and
// paths, never bodies. "" when there is nothing to say.
func Section(list []skills.Info, skipped []string) string {
	if len(list) == 0 && len(skipped) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Skills\n\n")
	if len(list) > 0 {
		b.WriteString("Skills are folders of instructions, scripts and files for particular tasks. Only their names and descriptions are listed here. " +
			"When a task matches a skill's description, read its SKILL.md with read_file before you start, and follow it. " +
			"Paths in a SKILL.md are relative to the skill's folder: read them with the file tools beside SKILL.md, and run its scripts " +
			"with execute from the skill's folder in the sandbox, when it has one.\n\n")
		for _, s := range list {
			fmt.Fprintf(&b, "- %s: %s (read %s", s.Name, oneLine(s.Description), s.Path)
			if s.BoxDir != "" {
				fmt.Fprintf(&b, "; in the sandbox: %s/", s.BoxDir)
			}
			b.WriteString(")\n")
		}
	}
	if len(skipped) > 0 {
		if len(list) > 0 {
			b.WriteString("\n")
		}
		b.WriteString("These skills in the workspace were skipped because they are not valid:\n")
		for _, s := range skipped {
			fmt.Fprintf(&b, "- %s\n", oneLine(s))
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// WrapModel appends the skills section to the system prompt.
func (m *Middleware) WrapModel(next agent.ModelHandler) agent.ModelHandler {
	return func(ctx context.Context, req *agent.ModelRequest) (model.Response, error) {
		if m.section == "" {
			return next(ctx, req)
		}
		r := *req // edits affect this call only, even if an outer wrapper retries
		if r.System != "" {
			r.System += "\n\n"
		}
		r.System += m.section
		return next(ctx, &r)
	}
}
