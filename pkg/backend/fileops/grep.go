package fileops

import (
	"context"
	"errors"
	"io/fs"
	"sort"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/textops"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// Grep searches the lines of one file, or of every regular file below a
// directory (docs/file-tools.md §4.6): dotfiles included, symlinks not followed, skip dirs
// not entered, directories the glob filter cannot match pruned. Binary
// files are skipped and counted; files that cannot be opened or read,
// files over the max file size (WithMaxFileSize) and directories that
// cannot be listed count as unreadable. Files are visited in path order
// and the search stops one match after MaxCount (the probe that tells a
// truncated result from an exact one), or at the time budget with the
// matches found so far.
func (e *Engine) Grep(ctx context.Context, req backend.GrepRequest) (backend.GrepResult, error) {
	p, err := vpath.Normalize(req.Path)
	if err != nil {
		return backend.GrepResult{}, err
	}
	m, err := textops.CompileMatcher(req.Pattern, req.Regex)
	if err != nil {
		return backend.GrepResult{}, e.fail("grep", p, err)
	}
	max := req.MaxCount
	if max == 0 {
		max = backend.GrepDefaultMax
	}
	if max < 1 || max > backend.GrepMaxMax {
		return backend.GrepResult{}, backend.Errorf(backend.CodeInvalidArgument, p,
			"grep max_count %d is out of range; use 1..%d", req.MaxCount, backend.GrepMaxMax)
	}
	var g *textops.Glob
	if req.Glob != "" {
		if g, err = textops.CompileGlob(req.Glob); err != nil {
			return backend.GrepResult{}, e.fail("grep", p, err)
		}
	}
	// A directory reached without a symlink on the way is walked from
	// the fast path's handle; anything else is resolved first.
	dir, name, closeDir, isDir := e.walkDirect(p)
	var fi fs.FileInfo
	if !isDir {
		if name, err = e.resolve(p, true); err != nil {
			return backend.GrepResult{}, e.fail("grep", p, err)
		}
		if fi, err = e.root.Stat(name); err != nil {
			return backend.GrepResult{}, e.fail("grep", p, err)
		}
		if isDir = fi.IsDir(); isDir {
			r, closeRoot, err := e.openDir(name, fi)
			if err != nil {
				return backend.GrepResult{}, e.fail("grep", p, err)
			}
			dir, closeDir = rootDir{r}, closeRoot
		}
	}

	bctx, cancel := context.WithTimeout(ctx, e.cfg.grepBudget)
	defer cancel()
	s := grepSearch{ctx: bctx, e: e, m: m, max: max, start: p}
	switch {
	case isDir:
		w := walker{ctx: bctx, e: e, file: s.file}
		if g != nil {
			w.descend, s.glob = g.CanDescend, g.Match
		}
		_, err = w.walk(dir, name, "")
		closeDir()
		s.res.FilesUnreadable += w.dirErrors
		if err != nil && !isDone(err) {
			return backend.GrepResult{}, e.fail("grep", p, err)
		}
	case !fi.Mode().IsRegular():
		return backend.GrepResult{}, checkRegular("grep", p, fi)
	default:
		if g == nil || g.Match(vpath.Base(p)) {
			s.single = true
			s.file(rootDir{e.root}, name, "", func() (fs.FileInfo, bool) { return fi, true })
		}
	}
	if err := ctx.Err(); err != nil {
		return backend.GrepResult{}, e.fail("grep", p, err)
	}
	res := s.res
	if res.Matches == nil {
		res.Matches = []backend.GrepMatch{}
	}
	sort.SliceStable(res.Matches, func(i, j int) bool {
		a, b := res.Matches[i], res.Matches[j]
		return a.Path < b.Path || a.Path == b.Path && a.Line < b.Line
	})
	switch {
	case len(res.Matches) > max:
		res.Matches = res.Matches[:max:max]
		res.Truncated, res.TruncationReason = true, backend.TruncatedMaxCount
	case bctx.Err() != nil:
		res.Truncated, res.TruncationReason = true, backend.TruncatedTimeBudget
	}
	return res, nil
}

// grepSearch accumulates the matches of one Grep.
type grepSearch struct {
	ctx    context.Context
	e      *Engine
	m      *textops.Matcher
	glob   func(rel string) bool
	max    int
	start  string // virtual start path
	single bool   // start is the file itself
	res    backend.GrepResult
}

// file searches one regular file; it returns true when the walk must stop
// (one match past the cap, or the budget is spent).
func (s *grepSearch) file(dir walkDir, name, rel string, stat func() (fs.FileInfo, bool)) bool {
	if s.glob != nil && !s.glob(rel) {
		return false
	}
	fi, ok := stat() // a failure is counted by the walk
	if !ok {
		return false
	}
	if s.e.cfg.maxFileSize > 0 && fi.Size() > s.e.cfg.maxFileSize {
		s.res.FilesUnreadable++
		return false
	}
	f, err := dir.open(name, fi)
	if err != nil {
		s.res.FilesUnreadable++
		return false
	}
	found, binary, err := s.m.Scan(s.ctx, f, s.max+1-len(s.res.Matches))
	f.Close()
	switch {
	case binary:
		s.res.FilesSkippedBinary++
		return false
	case err != nil && isDone(err):
		// Out of time: keep what this file gave so far.
	case err != nil:
		s.res.FilesUnreadable++
		return false
	}
	s.res.FilesSearched++
	vp := s.start
	if !s.single {
		vp = vpath.Join(s.start, rel)
	}
	for _, lm := range found {
		s.res.Matches = append(s.res.Matches, backend.GrepMatch{Path: vp, Line: lm.Line, Text: lm.Text, TextTruncated: lm.TextTruncated})
	}
	return len(s.res.Matches) > s.max || s.ctx.Err() != nil
}

// isDone reports a context error (cancelled or past its deadline).
func isDone(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
