package fileops

import (
	"context"
	"io"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/textops"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// Edit replaces text in a file (docs/file-tools.md §4.4). The argument checks come before any
// file access; then, holding the file's lock, the file is read whole
// (missing, directory, not writable, over the write cap, media or binary
// fail first), textops.Replace does the matching, and the result replaces
// the file atomically with its mode kept. Bytes outside the replaced
// spans, invalid UTF-8 included, are kept as they were.
func (e *Engine) Edit(ctx context.Context, req backend.EditRequest) (backend.EditResult, error) {
	p, err := vpath.Normalize(req.Path)
	if err != nil {
		return backend.EditResult{}, err
	}
	if err := textops.ValidateEdit(req.Old, req.New); err != nil {
		return backend.EditResult{}, e.fail("edit", p, err)
	}
	ctx, cancel := e.opContext(ctx)
	defer cancel()
	if res, handled, err := e.editDirect(ctx, p, req); handled {
		return res, err
	}
	name, err := e.resolve(p, true)
	if err != nil {
		return backend.EditResult{}, e.fail("edit", p, err)
	}
	unlock := e.locks.lock(name)
	defer unlock()

	fi, err := e.root.Stat(name)
	if err != nil {
		return backend.EditResult{}, e.fail("edit", p, err)
	}
	if err := checkRegular("edit", p, fi); err != nil {
		return backend.EditResult{}, err
	}
	if err := e.checkWritable("edit", p, name, fi); err != nil {
		return backend.EditResult{}, err
	}
	if fi.Size() > e.cfg.writeCap {
		return backend.EditResult{}, e.fail("edit", p, textops.TooLargeError("edit", fi.Size(), e.cfg.writeCap))
	}
	f, fi, err := openRegular(e.root, name, fi)
	if err != nil {
		return backend.EditResult{}, e.fail("edit", p, err)
	}
	content, err := io.ReadAll(io.LimitReader(ctxReader{ctx, f}, e.cfg.writeCap+1))
	f.Close()
	if err != nil {
		return backend.EditResult{}, e.fail("edit", p, err)
	}
	return e.applyEdit(ctx, p, req, content, func(out []byte) error {
		return e.replace(ctx, name, out, fi.Mode().Perm())
	})
}

// applyEdit is the rest of an edit once the file's content is read (at
// most the write cap plus one byte): the size and text checks, the
// replacement, and write, which replaces the file atomically.
func (e *Engine) applyEdit(ctx context.Context, p string, req backend.EditRequest, content []byte, write func([]byte) error) (backend.EditResult, error) {
	if n := int64(len(content)); n > e.cfg.writeCap {
		return backend.EditResult{}, e.fail("edit", p, textops.TooLargeError("edit", n, e.cfg.writeCap))
	}
	if err := textops.CheckText(p, content); err != nil {
		return backend.EditResult{}, e.fail("edit", p, err)
	}
	out, n, adapted, rerr := textops.Replace(content, req.Old, req.New, req.ReplaceAll)
	if rerr != nil {
		return backend.EditResult{}, e.fail("edit", p, rerr)
	}
	if size := int64(len(out)); size > e.cfg.writeCap {
		return backend.EditResult{}, e.fail("edit", p, textops.TooLargeError("edit result", size, e.cfg.writeCap))
	}
	if err := ctx.Err(); err != nil {
		return backend.EditResult{}, e.fail("edit", p, err)
	}
	if err := write(out); err != nil {
		return backend.EditResult{}, e.fail("edit", p, err)
	}
	return backend.EditResult{Path: p, Occurrences: n, LineEndingAdapted: adapted}, nil
}
