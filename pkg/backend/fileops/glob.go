package fileops

import (
	"context"
	"io/fs"
	"os"

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
	name, err := e.resolve(p, true)
	if err != nil {
		return backend.GlobResult{}, e.fail("glob", p, err)
	}
	fi, err := e.root.Stat(name)
	if err != nil {
		return backend.GlobResult{}, e.fail("glob", p, err)
	}
	if !fi.IsDir() {
		return backend.GlobResult{}, backend.Errorf(backend.CodeNotADirectory, p,
			"glob %s: not a directory; glob searches below a directory, pass its parent as path", p)
	}
	dir, closeDir, err := e.openDir(name, fi)
	if err != nil {
		return backend.GlobResult{}, e.fail("glob", p, err)
	}
	defer closeDir()

	bctx, cancel := context.WithTimeout(ctx, e.cfg.globBudget)
	defer cancel()
	res := backend.GlobResult{Matches: []backend.FileInfo{}}
	w := walker{ctx: bctx, e: e, descend: g.CanDescend}
	w.file = func(_ *os.Root, _, rel string, fi fs.FileInfo) bool {
		if !g.Match(rel) {
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
