package composite

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/textops"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// A search (grep or glob) at p asks the owner of p, at its backend path
// and with the request as given, plus every route mounted below p, at its
// root "/" with the pattern (glob) or glob filter (grep) reduced by
// textops.Glob.Residuals to what can match under the mount point. A route
// with no residual is not asked. With nested routes the owner may itself
// be a route: the rule is the same.

// target is one backend a search asks.
type target struct {
	r     *route // nil = the default backend
	path  string // backend path of the search root
	glob  string // pattern (glob) or filter (grep) to send
	owner bool   // the owner of p (not a route below it)
}

// targets lists the backends to ask for a search at p, owner first, then
// the routes below p in prefix order (the fixed order of docs/file-tools.md §5). g is the
// compiled pattern or filter, raw its text; nil means no filter (grep
// without glob): every route below is asked.
func (c *router) targets(p string, g *textops.Glob, raw string) []target {
	r0, bp := c.resolve(p)
	ts := []target{{r: r0, path: bp, glob: raw, owner: true}}
	for _, m := range c.below(p) {
		t := target{r: m, path: "/"}
		if g != nil {
			rel, _ := vpath.Rel(p, m.mount)
			res := g.Residuals(strings.Split(rel, "/"))
			if len(res) == 0 {
				continue
			}
			t.glob = textops.JoinAlternatives(res)
		}
		ts = append(ts, t)
	}
	return ts
}

// outcome is one target's answer.
type outcome[R any] struct {
	res R
	err error
}

// ask runs call for every target, concurrently when there are several,
// and returns the outcomes in target order.
func ask[R any](ts []target, call func(t target) (R, error)) []outcome[R] {
	out := make([]outcome[R], len(ts))
	if len(ts) == 1 {
		out[0].res, out[0].err = call(ts[0])
		return out
	}
	var wg sync.WaitGroup
	for i, t := range ts {
		wg.Go(func() { out[i].res, out[i].err = call(t) })
	}
	wg.Wait()
	return out
}

// fanOutError applies docs/file-tools.md §5 "Errors in fan-out" to the failed target t of a
// search at p, which has routes mounted below it: it returns nil for an
// ignorable error (the owner has no directory p; the mounts make it one),
// else the error mapped to composite paths.
func fanOutError(op, p string, t target, err error) *backend.Error {
	if code := backend.CodeOf(err); t.owner && (code == backend.CodeFileNotFound || code == backend.CodeNotADirectory) {
		return nil
	}
	return backend.FromOS(op, p, mapErr(t.r, err))
}

// Glob searches the owner of p and the routes below it, and merges:
// union, remapped, shadowed paths dropped, sorted, capped at
// GlobMaxMatches. With a single target its answer is the answer.
func (c *router) Glob(ctx context.Context, req backend.GlobRequest) (backend.GlobResult, error) {
	p, err := vpath.Normalize(req.Path)
	if err != nil {
		return backend.GlobResult{}, err
	}
	g, err := textops.CompileGlob(req.Pattern)
	if err != nil {
		return backend.GlobResult{}, err
	}
	ts := c.targets(p, g, req.Pattern)
	outs := ask(ts, func(t target) (backend.GlobResult, error) {
		return c.backendOf(t.r).Glob(ctx, backend.GlobRequest{Pattern: t.glob, Path: t.path})
	})
	// Without a mount below p there is no fan-out: the owner's error is
	// the answer.
	if !c.hasMountBelow(p) && outs[0].err != nil {
		return backend.GlobResult{}, mapErr(ts[0].r, outs[0].err)
	}
	if err := ctx.Err(); err != nil {
		return backend.GlobResult{}, backend.FromOS("glob", p, err)
	}

	merged := backend.GlobResult{Matches: []backend.FileInfo{}}
	for i, o := range outs {
		t := ts[i]
		if o.err != nil {
			if e := fanOutError("glob", p, t, o.err); e != nil && merged.Error == nil {
				merged.Error = e
			}
			continue
		}
		for _, m := range o.res.Matches {
			m.Path = full(t.r, m.Path)
			if c.visible(t.r, m.Path) {
				merged.Matches = append(merged.Matches, m)
			}
		}
		if o.res.Truncated && !merged.Truncated {
			merged.Truncated, merged.TruncationReason = true, o.res.TruncationReason
		}
	}
	slices.SortFunc(merged.Matches, func(a, b backend.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	if len(merged.Matches) > backend.GlobMaxMatches {
		merged.Matches = merged.Matches[:backend.GlobMaxMatches]
		merged.Truncated, merged.TruncationReason = true, backend.TruncatedMaxMatches
	}
	if merged.Error != nil {
		merged.Truncated = true
	}
	return merged, nil
}

// Grep searches the owner of p and the routes below it; each is asked for
// max_count matches, and the merge keeps the first max_count in global
// (path, line) order. Arguments are checked here first, so a bad pattern
// or max_count is one error, not one per backend.
func (c *router) Grep(ctx context.Context, req backend.GrepRequest) (backend.GrepResult, error) {
	p, err := vpath.Normalize(req.Path)
	if err != nil {
		return backend.GrepResult{}, err
	}
	if _, err := textops.CompileMatcher(req.Pattern, req.Regex); err != nil {
		return backend.GrepResult{}, err
	}
	limit := cmp.Or(req.MaxCount, backend.GrepDefaultMax)
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
	ts := c.targets(p, g, req.Glob)
	outs := ask(ts, func(t target) (backend.GrepResult, error) {
		sub := req
		sub.Path, sub.Glob = t.path, t.glob
		return c.backendOf(t.r).Grep(ctx, sub)
	})
	// Without a mount below p there is no fan-out: the owner's error is
	// the answer.
	if !c.hasMountBelow(p) && outs[0].err != nil {
		return backend.GrepResult{}, mapErr(ts[0].r, outs[0].err)
	}
	if err := ctx.Err(); err != nil {
		return backend.GrepResult{}, backend.FromOS("grep", p, err)
	}

	merged := backend.GrepResult{Matches: []backend.GrepMatch{}}
	for i, o := range outs {
		t := ts[i]
		if o.err != nil {
			if e := fanOutError("grep", p, t, o.err); e != nil && merged.Error == nil {
				merged.Error = e
			}
			continue
		}
		for _, m := range o.res.Matches {
			m.Path = full(t.r, m.Path)
			if c.visible(t.r, m.Path) {
				merged.Matches = append(merged.Matches, m)
			}
		}
		merged.FilesSearched += o.res.FilesSearched
		merged.FilesSkippedBinary += o.res.FilesSkippedBinary
		merged.FilesUnreadable += o.res.FilesUnreadable
		if o.res.Truncated && !merged.Truncated {
			merged.Truncated, merged.TruncationReason = true, o.res.TruncationReason
		}
	}
	slices.SortFunc(merged.Matches, func(a, b backend.GrepMatch) int {
		return cmp.Or(strings.Compare(a.Path, b.Path), cmp.Compare(a.Line, b.Line))
	})
	if len(merged.Matches) > limit {
		merged.Matches = merged.Matches[:limit]
		merged.Truncated, merged.TruncationReason = true, backend.TruncatedMaxCount
	}
	if merged.Error != nil {
		merged.Truncated = true
	}
	return merged, nil
}
