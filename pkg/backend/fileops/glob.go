package fileops

import (
	"context"
	"io/fs"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/textops"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// Glob lists the regular files below a directory whose path relative to
// it matches the docs/file-tools.md §4.7 pattern, sorted bytewise. The walk never follows
// symlinks, does not enter skip dirs, prunes directories the pattern
// cannot match below (textops.Glob.CanDescend) and stops one match past
// GlobMaxMatches (max_matches) or at the time budget (time_budget);
// directories it could not list or enter make the list partial
// (walk_errors), never an empty success.
func (e *Engine) Glob(ctx context.Context, req backend.GlobRequest) (backend.GlobResult, error) {
	p, err := vpath.Normalize(req.Path)
	if err != nil {
		return backend.GlobResult{}, err
	}
	g, err := textops.CompileGlob(req.Pattern)
	if err != nil {
		return backend.GlobResult{}, e.fail("glob", p, err)
	}
	dir, name, closeDir, ok := e.walkDirect(p)
	if !ok {
		if dir, name, closeDir, err = e.globStart(p); err != nil {
			return backend.GlobResult{}, err
		}
	}
	defer closeDir()

	bctx, cancel := context.WithTimeout(ctx, e.cfg.globBudget)
	defer cancel()
	res := backend.GlobResult{Matches: []backend.FileInfo{}}
	w := walker{ctx: bctx, e: e, descend: g.CanDescend}
	w.file = func(_ walkDir, _, rel string, stat func() (fs.FileInfo, bool)) bool {
		if !g.Match(rel) {
			return false
		}
		fi, ok := stat()
		if !ok {
			return false
		}
		res.Matches = append(res.Matches, fileInfo(vpath.Join(p, rel), fi))
		return len(res.Matches) > backend.GlobMaxMatches
	}
	_, err = w.walk(dir, name, "")
	if err != nil && !isDone(err) {
		return backend.GlobResult{}, e.fail("glob", p, err)
	}
	if err := ctx.Err(); err != nil {
		return backend.GlobResult{}, e.fail("glob", p, err)
	}
	switch {
	case len(res.Matches) > backend.GlobMaxMatches:
		res.Matches = res.Matches[:backend.GlobMaxMatches:backend.GlobMaxMatches]
		res.Truncated, res.TruncationReason = true, backend.TruncatedMaxMatches
	case bctx.Err() != nil:
		res.Truncated, res.TruncationReason = true, backend.TruncatedTimeBudget
	case w.dirErrors > 0:
		res.Truncated, res.TruncationReason = true, backend.TruncatedWalkErrors
	}
	return res, nil
}

// globStart is Glob's general start: p resolved through symlinks within
// the root, which must be a directory, opened as a root of its own.
func (e *Engine) globStart(p string) (dir walkDir, name string, closeDir func(), err error) {
	name, err = e.resolve(p, true)
	if err != nil {
		return nil, "", nil, e.fail("glob", p, err)
	}
	fi, err := e.root.Stat(name)
	if err != nil {
		return nil, "", nil, e.fail("glob", p, err)
	}
	if !fi.IsDir() {
		return nil, "", nil, backend.Errorf(backend.CodeNotADirectory, p,
			"glob %s: not a directory; glob searches below a directory, pass its parent as path", p)
	}
	r, closeDir, err := e.openDir(name, fi)
	if err != nil {
		return nil, "", nil, e.fail("glob", p, err)
	}
	return rootDir{r}, name, closeDir, nil
}
