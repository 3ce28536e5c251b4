package composite

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// Ls lists p with its owner, then adds one synthesized directory entry
// (size 0, modified_at "") for each child of p that is a mount point or
// lies on the way to one, replacing a real entry of the same name. When
// the owner has no directory p (file_not_found or not_a_directory) but a
// route is mounted below it, the synthesized entries are the listing.
func (c *router) Ls(ctx context.Context, path string) (backend.LsResult, error) {
	p, err := vpath.Normalize(path)
	if err != nil {
		return backend.LsResult{}, err
	}
	r, bp := c.resolve(p)
	res, err := c.backendOf(r).Ls(ctx, bp)

	synth := map[string]bool{} // composite paths of synthesized dirs
	pre := p + "/"
	if p == "/" {
		pre = "/"
	}
	for _, m := range c.below(p) {
		name, _, _ := strings.Cut(m.mount[len(pre):], "/")
		synth[pre+name] = true
	}
	if err != nil {
		code := backend.CodeOf(err)
		if len(synth) == 0 || code != backend.CodeFileNotFound && code != backend.CodeNotADirectory {
			return backend.LsResult{}, mapErr(r, err)
		}
		res = backend.LsResult{}
	}

	out := backend.LsResult{Entries: make([]backend.FileInfo, 0, len(res.Entries)+len(synth)), Truncated: res.Truncated}
	for _, e := range res.Entries {
		e.Path = full(r, e.Path)
		if synth[strings.TrimSuffix(e.Path, "/")] {
			continue
		}
		out.Entries = append(out.Entries, e)
	}
	for d := range synth {
		out.Entries = append(out.Entries, backend.FileInfo{Path: d + "/", Kind: backend.KindDir, IsDir: true})
	}
	slices.SortFunc(out.Entries, func(a, b backend.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	if len(out.Entries) > backend.LsMaxEntries {
		out.Entries = out.Entries[:backend.LsMaxEntries]
		out.Truncated = true
	}
	return out, nil
}

// fileTarget routes the path of a single-file operation. A path with a
// route mounted below it is a directory of the composite tree.
func (c *router) fileTarget(op, path string) (*route, string, string, error) {
	p, err := vpath.Normalize(path)
	if err != nil {
		return nil, "", "", err
	}
	if c.hasMountBelow(p) {
		return nil, "", "", errIsDir(op, p)
	}
	r, bp := c.resolve(p)
	return r, p, bp, nil
}

// Read is routed; the result carries the composite path.
func (c *router) Read(ctx context.Context, req backend.ReadRequest) (backend.ReadResult, error) {
	r, p, bp, err := c.fileTarget("read", req.Path)
	if err != nil {
		return backend.ReadResult{}, err
	}
	req.Path = bp
	res, err := c.backendOf(r).Read(ctx, req)
	if err != nil {
		return backend.ReadResult{}, mapErr(r, err)
	}
	res.Path = p
	return res, nil
}

// Write is routed; the result carries the composite path.
func (c *router) Write(ctx context.Context, path string, content []byte) (backend.WriteResult, error) {
	r, p, bp, err := c.fileTarget("write", path)
	if err != nil {
		return backend.WriteResult{}, err
	}
	res, err := c.backendOf(r).Write(ctx, bp, content)
	if err != nil {
		return backend.WriteResult{}, mapErr(r, err)
	}
	res.Path = p
	return res, nil
}

// Edit is routed; the result carries the composite path.
func (c *router) Edit(ctx context.Context, req backend.EditRequest) (backend.EditResult, error) {
	r, p, bp, err := c.fileTarget("edit", req.Path)
	if err != nil {
		return backend.EditResult{}, err
	}
	req.Path = bp
	res, err := c.backendOf(r).Edit(ctx, req)
	if err != nil {
		return backend.EditResult{}, mapErr(r, err)
	}
	res.Path = p
	return res, nil
}

// Delete is routed. A mount point cannot be deleted (invalid_path);
// deleting a default directory never touches the routes mounted under it.
// A route that lacks delete answers unsupported itself.
func (c *router) Delete(ctx context.Context, path string) (backend.DeleteResult, error) {
	p, err := vpath.Normalize(path)
	if err != nil {
		return backend.DeleteResult{}, err
	}
	for _, m := range c.routes {
		if p == m.mount {
			return backend.DeleteResult{}, backend.Errorf(backend.CodeInvalidPath, p,
				"delete %s: %s is a mount point and cannot be deleted; delete the entries under it instead", p, p)
		}
	}
	r, bp := c.resolve(p)
	res, err := c.backendOf(r).Delete(ctx, bp)
	if err != nil {
		return backend.DeleteResult{}, mapErr(r, err)
	}
	res.Path = p
	return res, nil
}

// group is the items of a batch that go to one backend.
type group struct {
	r     *route
	index []int    // positions in the batch
	paths []string // backend paths
}

// groupItems routes the paths of a batch. Items that fail before routing
// get their error in errs.
func (c *router) groupItems(op string, paths []string) (groups []*group, errs []*backend.Error) {
	errs = make([]*backend.Error, len(paths))
	byRoute := map[*route]*group{}
	for i, raw := range paths {
		r, _, bp, err := c.fileTarget(op, raw)
		if err != nil {
			errs[i] = backend.FromOS(op, raw, err)
			continue
		}
		g := byRoute[r]
		if g == nil {
			g = &group{r: r}
			byRoute[r] = g
			groups = append(groups, g)
		}
		g.index = append(g.index, i)
		g.paths = append(g.paths, bp)
	}
	return groups, errs
}

// eachGroup runs fn for every group, concurrently when there are several.
func eachGroup(groups []*group, fn func(g *group)) {
	if len(groups) == 1 {
		fn(groups[0])
		return
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Go(func() { fn(g) })
	}
	wg.Wait()
}

// batchErr is the per-item error for an item whose backend call failed
// as a whole (a transport failure) or answered badly.
func batchErr(op, p string, err error) *backend.Error {
	return backend.FromOS(op, p, err)
}

// Upload groups the items per backend, uploads each group (in input order
// within it; groups run concurrently) and reassembles the results in input
// order with the original paths. A group whose backend call fails as a
// whole gives that error to each of its items.
func (c *router) Upload(ctx context.Context, items []backend.UploadItem) ([]backend.UploadResult, error) {
	paths := make([]string, len(items))
	for i, it := range items {
		paths[i] = it.Path
	}
	groups, errs := c.groupItems("upload", paths)
	out := make([]backend.UploadResult, len(items))
	for i := range items {
		out[i] = backend.UploadResult{Path: items[i].Path, Err: errs[i]}
	}
	eachGroup(groups, func(g *group) {
		sub := make([]backend.UploadItem, len(g.index))
		for k, i := range g.index {
			sub[k] = backend.UploadItem{Path: g.paths[k], Content: items[i].Content}
		}
		res, err := c.backendOf(g.r).Upload(ctx, sub)
		if err == nil && len(res) != len(sub) {
			err = backend.Errorf(backend.CodeInternal, "", "the backend returned %d upload results for %d items", len(res), len(sub))
		}
		for k, i := range g.index {
			if err != nil {
				out[i].Err = batchErr("upload", items[i].Path, err)
				continue
			}
			out[i].BytesWritten = res[k].BytesWritten
			out[i].Err = mapBackendErr(g.r, res[k].Err)
		}
	})
	return out, nil
}

// Download is Upload's counterpart: grouped per backend, results in input
// order with the original paths.
func (c *router) Download(ctx context.Context, paths []string) ([]backend.DownloadResult, error) {
	groups, errs := c.groupItems("download", paths)
	out := make([]backend.DownloadResult, len(paths))
	for i := range paths {
		out[i] = backend.DownloadResult{Path: paths[i], Err: errs[i]}
	}
	eachGroup(groups, func(g *group) {
		res, err := c.backendOf(g.r).Download(ctx, g.paths)
		if err == nil && len(res) != len(g.paths) {
			err = backend.Errorf(backend.CodeInternal, "", "the backend returned %d download results for %d paths", len(res), len(g.paths))
		}
		for k, i := range g.index {
			if err != nil {
				out[i].Err = batchErr("download", paths[i], err)
				continue
			}
			out[i].Content, out[i].Size = res[k].Content, res[k].Size
			out[i].Err = mapBackendErr(g.r, res[k].Err)
		}
	})
	return out, nil
}

// OffloadScratch is the directory of the default backend where Execute
// has the full output of a command written when the requested offload
// path lies inside a route (the shell cannot write there); the file is
// then moved to the requested path.
const OffloadScratch = "/tmp/.plumb-offload"

// Execute always runs on the default backend. A cwd inside a route is
// invalid_argument (the shell cannot see a mount). An offload path inside
// a route is written by the shell under OffloadScratch first and then
// moved into the route, so OffloadedPath is still the requested path. If
// the move fails, the file stays where the shell wrote it and
// OffloadedPath names that place instead. When the scratch file cannot be
// created, or OffloadScratch itself lies inside a route, the command runs
// without offload.
func (c *execRouter) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	return c.execute(ctx, req, c.exec.Execute)
}

// outputStreamer is an executor that passes a command's output on while
// it runs (the sandbox backend).
type outputStreamer interface {
	ExecuteStream(ctx context.Context, req backend.ExecuteRequest, onOutput func([]byte) error) (backend.ExecuteResult, error)
}

// ExecuteStream is Execute passing the command's output to onOutput as it
// is produced, when the default backend can; otherwise it is Execute.
func (c *execRouter) ExecuteStream(ctx context.Context, req backend.ExecuteRequest, onOutput func([]byte) error) (backend.ExecuteResult, error) {
	st, ok := c.exec.(outputStreamer)
	if !ok {
		return c.Execute(ctx, req)
	}
	return c.execute(ctx, req, func(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
		return st.ExecuteStream(ctx, req, onOutput)
	})
}

// execute applies Execute's routing rules around run.
func (c *execRouter) execute(ctx context.Context, req backend.ExecuteRequest, run func(context.Context, backend.ExecuteRequest) (backend.ExecuteResult, error)) (backend.ExecuteResult, error) {
	if req.Cwd != "" {
		p, err := vpath.Normalize(req.Cwd)
		if err != nil {
			return backend.ExecuteResult{}, err
		}
		if r, _ := c.resolve(p); r != nil {
			return backend.ExecuteResult{}, backend.Errorf(backend.CodeInvalidArgument, p,
				"execute: cwd %s is inside the mount %s, which the shell cannot see; run the command in a directory outside %s and use the file tools for %s",
				p, r.mount, r.prefix, r.prefix)
		}
	}
	if req.OffloadPath == "" {
		return run(ctx, req)
	}
	p, err := vpath.Normalize(req.OffloadPath)
	if err != nil {
		return backend.ExecuteResult{}, err
	}
	if r, _ := c.resolve(p); r == nil {
		return run(ctx, req)
	}
	scratch := OffloadScratch + p
	if r, _ := c.resolve(scratch); r != nil {
		req.OffloadPath = ""
		return run(ctx, req)
	}
	req.OffloadPath = scratch
	res, err := run(ctx, req)
	if backend.IsOffloadError(err, scratch) {
		req.OffloadPath = ""
		return run(ctx, req)
	}
	if err != nil || res.OffloadedPath != scratch {
		return res, err
	}
	if c.move(ctx, scratch, p) {
		res.OffloadedPath = p
	}
	return res, nil
}

// move copies the default backend's file from into the route that owns
// to, then removes from; it reports whether the copy was written.
func (c *execRouter) move(ctx context.Context, from, to string) bool {
	got, err := c.def.Download(ctx, []string{from})
	if err != nil || len(got) != 1 || got[0].Err != nil {
		return false
	}
	if _, err := c.router.Write(ctx, to, got[0].Content); err != nil {
		return false
	}
	_, _ = c.def.Delete(ctx, from)
	return true
}
