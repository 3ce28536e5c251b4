package kvfs

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/textops"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// walk visits the keys under the directory prefix pre in key order (which
// is path order). rel is the key relative to pre. descend, when not nil,
// is asked once per directory (relative to pre) whether anything below it
// can be wanted; the keys of a directory it refuses are skipped with one
// new range query, never read. visit returns stop=true to end the walk.
func (f *FS) walk(ctx context.Context, pre string, descend func(relDir string) bool,
	visit func(e Entry, rel string) (stop bool, err error)) error {
	from, to := pre, prefixEnd(pre)
	verdicts := map[string]bool{}
	var pg pager
scan:
	for {
		n := pg.size()
		es, err := f.kv.Scan(ctx, from, to, n)
		if err != nil {
			return err
		}
		for _, e := range es {
			if err := ctx.Err(); err != nil {
				return err
			}
			rel := e.Key[len(pre):]
			if descend != nil {
				for i := 0; i < len(rel); i++ {
					if rel[i] != '/' {
						continue
					}
					d := rel[:i]
					ok, seen := verdicts[d]
					if !seen {
						ok = descend(d)
						verdicts[d] = ok
					}
					if !ok {
						from = pre + d + "0"
						pg.skipped()
						continue scan
					}
				}
			}
			stop, err := visit(e, rel)
			if err != nil || stop {
				return err
			}
			from = after(e.Key)
		}
		if len(es) < n {
			return nil
		}
		pg.full()
	}
}

// open returns a reader of key's content: a stream when the KV is a
// Streamer, else the loaded content.
func (f *FS) open(ctx context.Context, key string) (io.ReadCloser, bool, error) {
	if st, ok := f.kv.(Streamer); ok {
		rc, _, ok, err := st.Open(ctx, key)
		return rc, ok, err
	}
	file, _, ok, err := f.kv.Get(ctx, key)
	return io.NopCloser(bytes.NewReader(file.Content)), ok, err
}

// searchRoot checks the directory argument of glob and grep: it returns
// whether p is a file, or the error for a missing p.
func (f *FS) searchRoot(ctx context.Context, op, p string) (isFile bool, err error) {
	if p != "/" {
		if _, ok, err := f.kv.Stat(ctx, p); err != nil {
			return false, kvErr(op, p, err)
		} else if ok {
			return true, nil
		}
	}
	if dir, err := isDir(ctx, f.kv, p); err != nil {
		return false, kvErr(op, p, err)
	} else if !dir {
		return false, missing(ctx, f.kv, op, p)
	}
	return false, nil
}

// budgetSpent reports whether err ended a walk because the operation's own
// time budget ran out (and not because the caller gave up).
func budgetSpent(ctx context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
}

// Glob lists the regular files under a directory that match a docs/file-tools.md §4.7
// pattern, pruning directories the pattern cannot enter.
func (f *FS) Glob(ctx context.Context, req backend.GlobRequest) (backend.GlobResult, error) {
	p, err := vpath.Normalize(req.Path)
	if err != nil {
		return backend.GlobResult{}, err
	}
	g, err := textops.CompileGlob(req.Pattern)
	if err != nil {
		return backend.GlobResult{}, err
	}
	if isFile, err := f.searchRoot(ctx, "glob", p); err != nil {
		return backend.GlobResult{}, err
	} else if isFile {
		return backend.GlobResult{}, errNotDir("glob", p)
	}

	res := backend.GlobResult{Matches: []backend.FileInfo{}}
	bctx, cancel := context.WithTimeout(ctx, f.lim.GlobBudget)
	defer cancel()
	err = f.walk(bctx, dirPrefix(p), g.CanDescend, func(e Entry, rel string) (bool, error) {
		if g.Match(rel) {
			res.Matches = append(res.Matches, fileInfo(e))
		}
		return len(res.Matches) > backend.GlobMaxMatches, nil
	})
	switch {
	case budgetSpent(ctx, err):
		res.Truncated, res.TruncationReason = true, backend.TruncatedTimeBudget
	case err != nil:
		return backend.GlobResult{}, kvErr("glob", p, err)
	}
	if len(res.Matches) > backend.GlobMaxMatches {
		res.Matches = res.Matches[:backend.GlobMaxMatches]
		res.Truncated, res.TruncationReason = true, backend.TruncatedMaxMatches
	}
	return res, nil
}

// Grep searches the lines of one file or of every file under a directory
// (docs/file-tools.md §4.6). Files are visited in path order, so matches come out sorted by
// path and line; one match beyond max_count is probed to set Truncated
// exactly.
func (f *FS) Grep(ctx context.Context, req backend.GrepRequest) (backend.GrepResult, error) {
	p, err := vpath.Normalize(req.Path)
	if err != nil {
		return backend.GrepResult{}, err
	}
	m, err := textops.CompileMatcher(req.Pattern, req.Regex)
	if err != nil {
		return backend.GrepResult{}, err
	}
	limit := req.MaxCount
	if limit == 0 {
		limit = backend.GrepDefaultMax
	}
	if limit < 1 || limit > backend.GrepMaxMax {
		return backend.GrepResult{}, backend.Errorf(backend.CodeInvalidArgument, "",
			"grep max_count %d is out of range; use 1..%d", req.MaxCount, backend.GrepMaxMax)
	}
	var g *textops.Glob
	if req.Glob != "" {
		if g, err = textops.CompileGlob(req.Glob); err != nil {
			return backend.GrepResult{}, err
		}
	}
	isFile, err := f.searchRoot(ctx, "grep", p)
	if err != nil {
		return backend.GrepResult{}, err
	}

	res := backend.GrepResult{Matches: []backend.GrepMatch{}}
	bctx, cancel := context.WithTimeout(ctx, f.lim.GrepBudget)
	defer cancel()
	search := func(key string) (bool, error) {
		r, ok, err := f.open(bctx, key)
		if err != nil || !ok { // a file deleted since the scan is not an error
			return false, err
		}
		defer r.Close()
		lms, binary, err := m.Scan(bctx, r, limit+1-len(res.Matches))
		if binary {
			res.FilesSkippedBinary++
			return false, nil
		}
		res.FilesSearched++
		for _, lm := range lms {
			res.Matches = append(res.Matches, backend.GrepMatch{Path: key, Line: lm.Line, Text: lm.Text, TextTruncated: lm.TextTruncated})
		}
		return len(res.Matches) > limit, err
	}
	if isFile {
		if g == nil || g.Match(vpath.Base(p)) {
			_, err = search(p)
		}
	} else {
		var descend func(string) bool
		if g != nil {
			descend = g.CanDescend
		}
		err = f.walk(bctx, dirPrefix(p), descend, func(e Entry, rel string) (bool, error) {
			if g != nil && !g.Match(rel) {
				return false, nil
			}
			return search(e.Key)
		})
	}
	switch {
	case budgetSpent(ctx, err):
		res.Truncated, res.TruncationReason = true, backend.TruncatedTimeBudget
	case err != nil:
		return backend.GrepResult{}, kvErr("grep", p, err)
	}
	if len(res.Matches) > limit {
		res.Matches = res.Matches[:limit]
		res.Truncated, res.TruncationReason = true, backend.TruncatedMaxCount
	}
	return res, nil
}
