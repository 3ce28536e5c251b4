package agentd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/state"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
	"github.com/plumbhq/plumb/pkg/skills"
	"github.com/plumbhq/plumb/pkg/store"
)

// SkillsRoute is the read-only route under which a thread's config and
// tenant skills are served to the file tools: /skills/<name>/SKILL.md.
const SkillsRoute = "/skills/"

// BoxSkillsDir is where the same skills are copied in the thread's
// sandbox, relative to its home: <home>/.skills/<name>/.
const BoxSkillsDir = ".skills"

// skillSource is one origin of a thread's skills (docs/skills.md): the
// config's directories or the tenant's store. The workspace's skills are
// found by the skills middleware through the thread's backend.
type skillSource interface {
	// list describes the source's skills (name, description, origin).
	list(ctx context.Context) ([]skills.Info, error)
	// files returns one skill's files by relative path.
	files(ctx context.Context, name string) (map[string][]byte, error)
}

// configSkills are the skills the profiles' `skills` directories hold,
// loaded and validated at startup.
type configSkills map[string]*skills.Skill

func (c configSkills) list(context.Context) ([]skills.Info, error) {
	var out []skills.Info
	for _, s := range c {
		out = append(out, skills.Info{Name: s.Name, Description: s.Description, Origin: skills.OriginConfig})
	}
	return out, nil
}

func (c configSkills) files(_ context.Context, name string) (map[string][]byte, error) {
	s, ok := c[name]
	if !ok {
		return nil, fmt.Errorf("skill %s: %w", name, store.ErrSkillNotFound)
	}
	return s.Files, nil
}

// tenantSkills are one tenant's stored skills.
type tenantSkills struct {
	st     store.Skills
	tenant string
}

func (t tenantSkills) list(ctx context.Context) ([]skills.Info, error) {
	recs, err := t.st.ListSkills(ctx, t.tenant)
	if err != nil {
		return nil, err
	}
	out := make([]skills.Info, 0, len(recs))
	for _, r := range recs {
		out = append(out, skills.Info{Name: r.Name, Description: r.Description, Origin: skills.OriginTenant})
	}
	return out, nil
}

func (t tenantSkills) files(ctx context.Context, name string) (map[string][]byte, error) {
	r, err := t.st.GetSkill(ctx, t.tenant, name)
	if err != nil {
		return nil, err
	}
	return skills.Unpack(r.Archive)
}

// loadConfigSkills loads the skill directories of every profile (a bad
// skill, or two skills of one name from different directories, is a
// startup error naming it) and sets each profile's Skills to the names
// its directories hold.
func loadConfigSkills(agents, subagents map[string]ProfileConfig) (configSkills, map[string][]string, error) {
	all := configSkills{}
	from := map[string]string{} // skill name → dir
	names := map[string][]string{}
	for _, sec := range []struct {
		name string
		m    map[string]ProfileConfig
	}{{"agents", agents}, {"subagents", subagents}} {
		for _, pname := range sortedKeys(sec.m) {
			for i, dir := range sec.m[pname].Skills {
				field := fmt.Sprintf("%s.%s.skills[%d]", sec.name, pname, i)
				list, err := skills.LoadDirs(dir)
				if err != nil {
					return nil, nil, fmt.Errorf("%s: %w", field, err)
				}
				if len(list) == 0 {
					return nil, nil, fmt.Errorf("%s: %s holds no skill (a folder with a %s, or folders of them)", field, dir, skills.FileName)
				}
				abs, _ := filepath.Abs(dir)
				for _, s := range list {
					key := sec.name + "." + pname
					folder := abs
					if _, err := os.Lstat(filepath.Join(abs, skills.FileName)); err != nil {
						folder = filepath.Join(abs, s.Name)
					}
					if prev, ok := from[s.Name]; ok && prev != folder {
						return nil, nil, fmt.Errorf("%s: skill %q is also in %s; a skill name names one skill", field, s.Name, prev)
					}
					from[s.Name], all[s.Name] = folder, s
					if !slices.Contains(names[key], s.Name) {
						names[key] = append(names[key], s.Name)
					}
				}
			}
		}
	}
	return all, names, nil
}

// threadSkills are the config and tenant skills of one thread's run
// segment: listed when its backend is built, their files loaded on first
// use (the /skills/ route, the copy into the box) and kept for the
// segment.
type threadSkills struct {
	infos []skills.Info
	from  map[string]skillSource

	mu     sync.Mutex
	loaded map[string]map[string][]byte
}

// skillsFor lists the skills of a tenant: the config's, then the
// tenant's store's, which take precedence (docs/skills.md). nil when
// there are none.
func (tb *ThreadBackends) skillsFor(ctx context.Context, tenantName string) (*threadSkills, error) {
	sources := []skillSource{}
	if len(tb.configSkills) > 0 {
		sources = append(sources, tb.configSkills)
	}
	if tb.skillStore != nil {
		sources = append(sources, tenantSkills{st: tb.skillStore, tenant: tenant.Norm(tenantName)})
	}
	ts := &threadSkills{from: map[string]skillSource{}, loaded: map[string]map[string][]byte{}}
	var lists [][]skills.Info
	for _, src := range sources {
		l, err := src.list(ctx)
		if err != nil {
			return nil, fmt.Errorf("list skills: %w", err)
		}
		lists = append(lists, l)
	}
	ts.infos = skills.Merge(lists...)
	if len(ts.infos) == 0 {
		return nil, nil
	}
	for i, l := range lists {
		for _, s := range l {
			if slices.ContainsFunc(ts.infos, func(x skills.Info) bool { return x.Name == s.Name && x.Origin == s.Origin }) {
				ts.from[s.Name] = sources[i]
			}
		}
	}
	return ts, nil
}

// all returns every skill's files, loading them once.
func (ts *threadSkills) all(ctx context.Context) (map[string]map[string][]byte, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, s := range ts.infos {
		if _, ok := ts.loaded[s.Name]; ok {
			continue
		}
		files, err := ts.from[s.Name].files(ctx, s.Name)
		if errors.Is(err, store.ErrSkillNotFound) {
			files = map[string][]byte{} // deleted since it was listed
		} else if err != nil {
			return nil, fmt.Errorf("skill %s: %w", s.Name, err)
		}
		ts.loaded[s.Name] = files
	}
	return ts.loaded, nil
}

// items lists every skill file under root (a virtual directory).
func (ts *threadSkills) items(ctx context.Context, root string) ([]backend.UploadItem, error) {
	all, err := ts.all(ctx)
	if err != nil {
		return nil, err
	}
	var items []backend.UploadItem
	for _, name := range sortedKeys(all) {
		files := all[name]
		for _, p := range sortedKeys(files) {
			items = append(items, backend.UploadItem{Path: vpath.Join(vpath.Join(root, name), p), Content: files[p]})
		}
	}
	return items, nil
}

// copyInto writes the skills' files into a box under <home>/.skills
// through the sandbox backend's own upload (the file-write path every
// file tool takes). A failure is logged: the run goes on without them.
func (ts *threadSkills) copyInto(ctx context.Context, b backend.Backend, home string, lg *zap.Logger) {
	items, err := ts.items(ctx, vpath.Join(home, BoxSkillsDir))
	if err == nil && len(items) > 0 {
		var res []backend.UploadResult
		if res, err = b.Upload(ctx, items); err == nil {
			for _, r := range res {
				if r.Err != nil {
					err = fmt.Errorf("%s: %s", r.Path, r.Err.Message)
					break
				}
			}
		}
	}
	if err != nil {
		lg.Warn("copy skills into the sandbox", zap.Error(err))
	}
}

// skillRoute serves the thread's skills read-only under SkillsRoute: the
// files are put in an in-memory State backend (the file engine of every
// key-value route) on first use, and writes are refused.
type skillRoute struct {
	ts *threadSkills

	once sync.Once
	b    *state.Backend
	err  error
}

func (r *skillRoute) get(ctx context.Context) (backend.Backend, error) {
	r.once.Do(func() {
		items, err := r.ts.items(ctx, "/")
		if err != nil {
			r.err = backend.Errorf(backend.CodeUnavailable, "", "the skills cannot be read: %v", err)
			return
		}
		b := state.New()
		res, err := b.Upload(ctx, items)
		if err == nil {
			for _, x := range res {
				if x.Err != nil {
					err = x.Err
					break
				}
			}
		}
		if err != nil {
			r.err = backend.Errorf(backend.CodeUnavailable, "", "the skills cannot be served: %v", err)
			return
		}
		r.b = b
	})
	return r.b, r.err
}

func readOnly(p string) error {
	return backend.Errorf(backend.CodePermissionDenied, p, "%s is read-only: skills are changed with PutSkill or in the agent config, not by the agent", SkillsRoute)
}

// Ls implements backend.Backend.
func (r *skillRoute) Ls(ctx context.Context, p string) (backend.LsResult, error) {
	b, err := r.get(ctx)
	if err != nil {
		return backend.LsResult{}, err
	}
	return b.Ls(ctx, p)
}

// Read implements backend.Backend.
func (r *skillRoute) Read(ctx context.Context, req backend.ReadRequest) (backend.ReadResult, error) {
	b, err := r.get(ctx)
	if err != nil {
		return backend.ReadResult{}, err
	}
	return b.Read(ctx, req)
}

// Grep implements backend.Backend.
func (r *skillRoute) Grep(ctx context.Context, req backend.GrepRequest) (backend.GrepResult, error) {
	b, err := r.get(ctx)
	if err != nil {
		return backend.GrepResult{}, err
	}
	return b.Grep(ctx, req)
}

// Glob implements backend.Backend.
func (r *skillRoute) Glob(ctx context.Context, req backend.GlobRequest) (backend.GlobResult, error) {
	b, err := r.get(ctx)
	if err != nil {
		return backend.GlobResult{}, err
	}
	return b.Glob(ctx, req)
}

// Download implements backend.Backend.
func (r *skillRoute) Download(ctx context.Context, paths []string) ([]backend.DownloadResult, error) {
	b, err := r.get(ctx)
	if err != nil {
		return nil, err
	}
	return b.Download(ctx, paths)
}

// Write implements backend.Backend: refused.
func (r *skillRoute) Write(_ context.Context, p string, _ []byte) (backend.WriteResult, error) {
	return backend.WriteResult{}, readOnly(p)
}

// Edit implements backend.Backend: refused.
func (r *skillRoute) Edit(_ context.Context, req backend.EditRequest) (backend.EditResult, error) {
	return backend.EditResult{}, readOnly(req.Path)
}

// Delete implements backend.Backend: refused.
func (r *skillRoute) Delete(_ context.Context, p string) (backend.DeleteResult, error) {
	return backend.DeleteResult{}, readOnly(p)
}

// Upload implements backend.Backend: every item is refused.
func (r *skillRoute) Upload(_ context.Context, items []backend.UploadItem) ([]backend.UploadResult, error) {
	out := make([]backend.UploadResult, len(items))
	for i, it := range items {
		var be *backend.Error
		errors.As(readOnly(it.Path), &be)
		out[i] = backend.UploadResult{Path: it.Path, Err: be}
	}
	return out, nil
}

var _ backend.Backend = (*skillRoute)(nil)
