package kvfs

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"strings"
	"syscall"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/textops"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// Limits are the configurable caps of the limits table (docs/file-tools.md §3). A zero field
// takes the default from package backend.
type Limits struct {
	// MediaCap caps media returned as base64 (backend.MediaCap).
	MediaCap int64
	// WriteCap caps write and edit file sizes (backend.WriteCap).
	WriteCap int64
	// ItemCap caps one upload or download item (backend.ItemCap).
	ItemCap int64
	// GrepBudget is grep's time budget (backend.GrepBudget).
	GrepBudget time.Duration
	// GlobBudget is glob's time budget (backend.GlobBudget).
	GlobBudget time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.MediaCap <= 0 {
		l.MediaCap = backend.MediaCap
	}
	if l.WriteCap <= 0 {
		l.WriteCap = backend.WriteCap
	}
	if l.ItemCap <= 0 {
		l.ItemCap = backend.ItemCap
	}
	if l.GrepBudget <= 0 {
		l.GrepBudget = backend.GrepBudget
	}
	if l.GlobBudget <= 0 {
		l.GlobBudget = backend.GlobBudget
	}
	return l
}

// FS implements backend.Backend over a KV. It is safe for concurrent use
// when its KV is.
type FS struct {
	kv    KV
	now   func() time.Time
	lim   Limits
	locks pathLocks
}

var _ backend.Backend = (*FS)(nil)

// New returns an FS over kv. now is the clock for timestamps (nil =
// time.Now); zero limits take the defaults.
func New(kv KV, now func() time.Time, lim Limits) *FS {
	if now == nil {
		now = time.Now
	}
	return &FS{kv: kv, now: now, lim: lim.withDefaults(), locks: pathLocks{m: map[string]*pathLock{}}}
}

// Timestamp formats t as FS stores it: RFC 3339 UTC with nanoseconds.
func Timestamp(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

// editAttempts bounds the optimistic retries of one edit. Edits through
// one FS never conflict with each other (the path lock); a retry needs a
// write by another writer between the edit's read and its commit.
const editAttempts = 16

// The errors below reuse backend.FromOS so that their codes and messages
// are exactly the os.Root engine's.

func errNotFound(op, p string) error { return backend.FromOS(op, p, fs.ErrNotExist) }
func errIsDir(op, p string) error    { return backend.FromOS(op, p, syscall.EISDIR) }
func errNotDir(op, p string) error   { return backend.FromOS(op, p, syscall.ENOTDIR) }

// kvErr converts a KV failure: *backend.Error values pass through (given
// Path p when they have none), context errors become cancelled or timeout,
// anything else internal.
func kvErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	e := backend.FromOS(op, p, err)
	if e.Path == "" {
		c := *e
		c.Path = p
		return &c
	}
	return e
}

// dirPrefix returns the key prefix of the keys under directory p.
func dirPrefix(p string) string {
	if p == "/" {
		return "/"
	}
	return p + "/"
}

// prefixEnd returns the least string above every string that starts with
// pre, which ends with "/": the same string with that "/" turned into "0".
func prefixEnd(pre string) string {
	return pre[:len(pre)-1] + "0"
}

// after returns a Scan bound just above k: keys hold no control
// characters, so no key lies strictly between k and k+"\x01".
func after(k string) string { return k + "\x01" }

// isDir reports whether some key lies under p.
func isDir(ctx context.Context, r Reader, p string) (bool, error) {
	if p == "/" {
		return true, nil
	}
	pre := dirPrefix(p)
	es, err := r.Scan(ctx, pre, prefixEnd(pre), 1)
	return len(es) > 0, err
}

// fileAncestor reports whether a proper ancestor of p is a file.
func fileAncestor(ctx context.Context, r Reader, p string) (bool, error) {
	for i := 1; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		if _, ok, err := r.Stat(ctx, p[:i]); err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// missing explains why there is no file at p: is_directory when p is a
// directory, not_a_directory when a parent is a file, else file_not_found.
func missing(ctx context.Context, r Reader, op, p string) error {
	if dir, err := isDir(ctx, r, p); err != nil {
		return kvErr(op, p, err)
	} else if dir {
		return errIsDir(op, p)
	}
	if bad, err := fileAncestor(ctx, r, p); err != nil {
		return kvErr(op, p, err)
	} else if bad {
		return errNotDir(op, p)
	}
	return errNotFound(op, p)
}

// Ls lists the direct children of a directory (docs/file-tools.md §4.1), synthesizing
// subdirectory entries.
func (f *FS) Ls(ctx context.Context, path string) (backend.LsResult, error) {
	p, err := vpath.Normalize(path)
	if err != nil {
		return backend.LsResult{}, err
	}
	if p != "/" {
		if _, ok, err := f.kv.Stat(ctx, p); err != nil {
			return backend.LsResult{}, kvErr("ls", p, err)
		} else if ok {
			return backend.LsResult{}, errNotDir("ls", p)
		}
	}
	res := backend.LsResult{Entries: []backend.FileInfo{}}
	pre := dirPrefix(p)
	from, to := pre, prefixEnd(pre)
	var pg pager
scan:
	for len(res.Entries) <= backend.LsMaxEntries {
		n := pg.size()
		es, err := f.kv.Scan(ctx, from, to, n)
		if err != nil {
			return backend.LsResult{}, kvErr("ls", p, err)
		}
		for _, e := range es {
			rest := e.Key[len(pre):]
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				// A subdirectory: list it once and skip its keys.
				dir := pre + rest[:i]
				res.Entries = append(res.Entries, backend.FileInfo{Path: dir + "/", Kind: backend.KindDir, IsDir: true})
				from = dir + "0"
				pg.skipped()
				continue scan
			}
			res.Entries = append(res.Entries, fileInfo(e))
			from = after(e.Key)
		}
		if len(es) < n {
			break
		}
		pg.full()
	}
	if len(res.Entries) == 0 && p != "/" {
		return backend.LsResult{}, missing(ctx, f.kv, "ls", p)
	}
	// Key order is already path order with the "/" of directories
	// appended (a child name never contains "/"), so the first
	// LsMaxEntries entries are the first in sort order.
	if len(res.Entries) > backend.LsMaxEntries {
		res.Entries = res.Entries[:backend.LsMaxEntries]
		res.Truncated = true
	}
	return res, nil
}

// pager sizes the range queries of a listing or walk: small after a
// subtree was skipped (the rest of a big page would have been thrown
// away), doubling while pages are consumed whole.
type pager struct{ n int }

const (
	minPage = 32
	maxPage = 1024
)

func (p *pager) size() int {
	if p.n == 0 {
		p.n = minPage
	}
	return p.n
}

func (p *pager) full()    { p.n = min(2*p.size(), maxPage) }
func (p *pager) skipped() { p.n = minPage }

func fileInfo(e Entry) backend.FileInfo {
	return backend.FileInfo{Path: e.Key, Kind: backend.KindFile, Size: e.Size, ModifiedAt: e.ModifiedAt}
}

// Read returns a window of a text file or a media file as base64 (docs/file-tools.md §4.2):
// textops.ReadContent on the whole content, or, when the KV is a
// Streamer, the same steps on a stream (see readStream).
func (f *FS) Read(ctx context.Context, req backend.ReadRequest) (backend.ReadResult, error) {
	p, err := vpath.Normalize(req.Path)
	if err != nil {
		return backend.ReadResult{}, err
	}
	if st, ok := f.kv.(Streamer); ok {
		return f.readStream(ctx, st, p, req)
	}
	file, _, ok, err := f.kv.Get(ctx, p)
	if err != nil {
		return backend.ReadResult{}, kvErr("read", p, err)
	}
	if !ok {
		return backend.ReadResult{}, missing(ctx, f.kv, "read", p)
	}
	return textops.ReadContent(p, file.Content, req.Offset, req.Limit, f.lim.MediaCap)
}

// readStream is Read for a Streamer: after the empty-file check, it
// sniffs the first SniffWindow bytes; media (at most the media cap) and
// files no longer than the sniff window go to textops.ReadContent whole,
// binary content is not_text, and text is sliced by textops.SliceLines
// from the stream. Memory stays O(window) for any file size.
func (f *FS) readStream(ctx context.Context, st Streamer, p string, req backend.ReadRequest) (backend.ReadResult, error) {
	rc, e, ok, err := st.Open(ctx, p)
	if err != nil {
		return backend.ReadResult{}, kvErr("read", p, err)
	}
	if !ok {
		return backend.ReadResult{}, missing(ctx, f.kv, "read", p)
	}
	defer rc.Close()
	head := make([]byte, min(e.Size, backend.SniffWindow))
	if _, err := io.ReadFull(rc, head); err != nil {
		return backend.ReadResult{}, kvErr("read", p, err)
	}
	whole := int64(len(head)) == e.Size
	mime := textops.MediaType(p, head)
	switch {
	case mime != "" && e.Size > f.lim.MediaCap:
		return backend.ReadResult{}, withPath(textops.TooLargeError("media read", e.Size, f.lim.MediaCap), p)
	case whole || mime != "":
		rest, err := io.ReadAll(rc)
		if err != nil {
			return backend.ReadResult{}, kvErr("read", p, err)
		}
		return textops.ReadContent(p, append(head, rest...), req.Offset, req.Limit, f.lim.MediaCap)
	case textops.IsBinary(head, false):
		return backend.ReadResult{}, withPath(textops.NotTextError(e.Size, textops.SniffMIME(head)), p)
	}
	r := io.MultiReader(bytes.NewReader(head), rc)
	w, err := textops.SliceLines(r, req.Offset, req.Limit, e.Size <= backend.TotalLinesCountMax)
	if be, ok := err.(*backend.Error); ok {
		return backend.ReadResult{}, withPath(be, p)
	} else if err != nil {
		return backend.ReadResult{}, kvErr("read", p, err)
	}
	w.Path, w.Size = p, e.Size
	return w, nil
}

// Write creates or replaces a file, creating parents (docs/file-tools.md §4.3).
func (f *FS) Write(ctx context.Context, path string, content []byte) (backend.WriteResult, error) {
	p, err := vpath.Normalize(path)
	if err != nil {
		return backend.WriteResult{}, err
	}
	if n := int64(len(content)); n > f.lim.WriteCap {
		e := textops.TooLargeError("write", n, f.lim.WriteCap)
		e.Path = p
		return backend.WriteResult{}, e
	}
	created, err := f.put(ctx, "write", p, content)
	if err != nil {
		return backend.WriteResult{}, err
	}
	return backend.WriteResult{Path: p, BytesWritten: int64(len(content)), Created: created}, nil
}

// put stores content at p in one transaction (see putTx).
func (f *FS) put(ctx context.Context, op, p string, content []byte) (created bool, err error) {
	now := Timestamp(f.now())
	var ruleErr error
	err = f.kv.Update(ctx, func(tx Tx) error {
		var err error
		created, ruleErr, err = putTx(ctx, tx, op, p, content, now)
		if err == nil {
			err = ruleErr
		}
		return err
	})
	return created, kvErr(op, p, err)
}

// putTx stores content at p after the tree checks: p must not be a
// directory and no parent may be a file; a rule violation is returned as
// ruleErr, with nothing stored and the transaction still usable. An
// existing file keeps its CreatedAt. err reports a KV failure, after which
// the transaction must be abandoned.
func putTx(ctx context.Context, tx Tx, op, p string, content []byte, now string) (created bool, ruleErr, err error) {
	if p == "/" {
		return false, errIsDir(op, p), nil
	}
	file := File{Content: content, Encoding: EncodingOf(content), CreatedAt: now, ModifiedAt: now}
	old, exists, err := tx.Stat(ctx, p)
	if err != nil {
		return false, nil, err
	}
	if exists {
		file.CreatedAt = old.CreatedAt
	} else if ruleErr, err = checkNewFile(ctx, tx, op, p); ruleErr != nil || err != nil {
		return false, ruleErr, err
	}
	return !exists, nil, tx.Put(ctx, p, file)
}

// checkNewFile enforces the tree invariants for a new key p: nothing may
// lie under it and no parent may be a file.
func checkNewFile(ctx context.Context, r Reader, op, p string) (ruleErr, err error) {
	if dir, err := isDir(ctx, r, p); err != nil || dir {
		return ruleIf(dir, errIsDir(op, p)), err
	}
	bad, err := fileAncestor(ctx, r, p)
	return ruleIf(bad, errNotDir(op, p)), err
}

func ruleIf(broken bool, err error) error {
	if broken {
		return err
	}
	return nil
}

// Edit replaces text in a file (docs/file-tools.md §4.4). Edits of one path through one FS
// are serialized by a path lock; the write commits only if the file is
// still the version that was read (its Rev), so an edit racing another
// writer is retried on the new content and never loses an update.
func (f *FS) Edit(ctx context.Context, req backend.EditRequest) (backend.EditResult, error) {
	p, err := vpath.Normalize(req.Path)
	if err != nil {
		return backend.EditResult{}, err
	}
	if e := textops.ValidateEdit(req.Old, req.New); e != nil {
		e.Path = p
		return backend.EditResult{}, e
	}
	unlock, err := f.locks.lock(ctx, p)
	if err != nil {
		return backend.EditResult{}, kvErr("edit", p, err)
	}
	defer unlock()
	for range editAttempts {
		res, retry, err := f.editOnce(ctx, p, req)
		if !retry {
			return res, err
		}
	}
	return backend.EditResult{}, backend.Errorf(backend.CodeUnavailable, p,
		"edit %s: the file kept changing while it was being edited; try again", p)
}

func (f *FS) editOnce(ctx context.Context, p string, req backend.EditRequest) (res backend.EditResult, retry bool, err error) {
	// The size check comes before loading the content.
	e, ok, err := f.kv.Stat(ctx, p)
	if err != nil {
		return res, false, kvErr("edit", p, err)
	}
	if !ok {
		return res, false, missing(ctx, f.kv, "edit", p)
	}
	if e.Size > f.lim.WriteCap {
		return res, false, withPath(textops.TooLargeError("edit", e.Size, f.lim.WriteCap), p)
	}
	file, got, ok, err := f.kv.Get(ctx, p)
	if err != nil {
		return res, false, kvErr("edit", p, err)
	}
	if !ok || got.Rev != e.Rev {
		return res, true, nil
	}
	if te := textops.CheckText(p, file.Content); te != nil {
		return res, false, withPath(te, p)
	}
	out, n, adapted, re := textops.Replace(file.Content, req.Old, req.New, req.ReplaceAll)
	if re != nil {
		return res, false, withPath(re, p)
	}
	if size := int64(len(out)); size > f.lim.WriteCap {
		return res, false, withPath(textops.TooLargeError("edit result", size, f.lim.WriteCap), p)
	}
	updated := File{Content: out, Encoding: EncodingOf(out), CreatedAt: file.CreatedAt, ModifiedAt: Timestamp(f.now())}
	err = f.kv.Update(ctx, func(tx Tx) error {
		cur, ok, err := tx.Stat(ctx, p)
		if err != nil {
			return err
		}
		if !ok || cur.Rev != e.Rev {
			retry = true
			return errConflict
		}
		return tx.Put(ctx, p, updated)
	})
	if retry {
		return res, true, nil
	}
	if err != nil {
		return res, false, kvErr("edit", p, err)
	}
	return backend.EditResult{Path: p, Occurrences: n, LineEndingAdapted: adapted}, false, nil
}

// errConflict aborts an edit transaction whose file changed since it was
// read; it never leaves Edit.
var errConflict = backend.Errorf(backend.CodeUnavailable, "", "concurrent change")

func withPath(e *backend.Error, p string) *backend.Error {
	e.Path = p
	return e
}

// Delete removes a file, or a directory and everything under it, in one
// transaction (docs/file-tools.md §4.5).
func (f *FS) Delete(ctx context.Context, path string) (backend.DeleteResult, error) {
	p, err := vpath.Normalize(path)
	if err != nil {
		return backend.DeleteResult{}, err
	}
	if p == "/" {
		return backend.DeleteResult{}, backend.Errorf(backend.CodeInvalidPath, p,
			"delete /: the root directory cannot be deleted; delete the entries under it one by one")
	}
	var removed int
	err = f.kv.Update(ctx, func(tx Tx) error {
		n, err := tx.DeleteTree(ctx, p)
		if err != nil {
			return err
		}
		if n == 0 {
			return missing(ctx, tx, "delete", p)
		}
		removed = n
		return nil
	})
	if err != nil {
		return backend.DeleteResult{}, kvErr("delete", p, err)
	}
	return backend.DeleteResult{Path: p, Removed: removed}, nil
}

// Upload batching: items are written in transactions of up to
// uploadBatchItems items or uploadBatchBytes bytes, so that seeding many
// small files costs few commits.
const (
	uploadBatchItems = 256
	uploadBatchBytes = 16 << 20
)

// Upload writes each item (docs/file-tools.md §4.9): the write rules with raw bytes, the
// item cap instead of the write cap, and the content encoding chosen by
// EncodingOf. Failures are per item. Items are processed in order (the
// last of duplicate paths wins); a batch whose transaction fails is
// retried item by item, so one failure never hides another item's result.
func (f *FS) Upload(ctx context.Context, items []backend.UploadItem) ([]backend.UploadResult, error) {
	out := make([]backend.UploadResult, len(items))
	paths := make([]string, len(items))
	var batch []int
	var batchBytes int
	flush := func() {
		f.uploadBatch(ctx, items, paths, batch, out)
		batch, batchBytes = batch[:0], 0
	}
	for i, it := range items {
		out[i].Path = it.Path
		p, err := vpath.Normalize(it.Path)
		if err == nil && int64(len(it.Content)) > f.lim.ItemCap {
			err = withPath(textops.TooLargeError("upload", int64(len(it.Content)), f.lim.ItemCap), p)
		}
		if err != nil {
			out[i].Err = asError("upload", it.Path, err)
			continue
		}
		paths[i] = p
		if len(batch) > 0 && (len(batch) == uploadBatchItems || batchBytes+len(it.Content) > uploadBatchBytes) {
			flush()
		}
		batch = append(batch, i)
		batchBytes += len(it.Content)
	}
	if len(batch) > 0 {
		flush()
	}
	return out, nil
}

// uploadBatch writes the items at indexes batch in one transaction, rule
// violations becoming item errors; when the transaction itself fails, it
// writes them one by one instead.
func (f *FS) uploadBatch(ctx context.Context, items []backend.UploadItem, paths []string, batch []int, out []backend.UploadResult) {
	now := Timestamp(f.now())
	ruleErrs := make([]error, len(batch))
	err := f.kv.Update(ctx, func(tx Tx) error {
		for k, i := range batch {
			_, ruleErr, err := putTx(ctx, tx, "upload", paths[i], items[i].Content, now)
			if err != nil {
				return err
			}
			ruleErrs[k] = ruleErr
		}
		return nil
	})
	for k, i := range batch {
		if err != nil {
			_, ruleErrs[k] = f.put(ctx, "upload", paths[i], items[i].Content)
		}
		if ruleErrs[k] != nil {
			out[i].Err = asError("upload", paths[i], ruleErrs[k])
			continue
		}
		out[i].BytesWritten = int64(len(items[i].Content))
	}
}

// Download returns the exact bytes of each path (docs/file-tools.md §4.9). Failures are per
// item.
func (f *FS) Download(ctx context.Context, paths []string) ([]backend.DownloadResult, error) {
	out := make([]backend.DownloadResult, len(paths))
	for i, raw := range paths {
		out[i].Path = raw
		content, err := f.download(ctx, raw)
		if err != nil {
			out[i].Err = asError("download", raw, err)
			continue
		}
		out[i].Content, out[i].Size = content, int64(len(content))
	}
	return out, nil
}

func (f *FS) download(ctx context.Context, raw string) ([]byte, error) {
	p, err := vpath.Normalize(raw)
	if err != nil {
		return nil, err
	}
	file, e, ok, err := f.kv.Get(ctx, p)
	switch {
	case err != nil:
		return nil, kvErr("download", p, err)
	case !ok:
		return nil, missing(ctx, f.kv, "download", p)
	case e.Size > f.lim.ItemCap:
		return nil, withPath(textops.TooLargeError("download", e.Size, f.lim.ItemCap), p)
	}
	return bytes.Clone(file.Content), nil
}

// asError returns err as a *backend.Error (it always is one, except for
// defensive cases).
func asError(op, p string, err error) *backend.Error {
	return backend.FromOS(op, p, err)
}
