package fileops

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/textops"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// TempFile is a streaming upload: bytes written at any offset into a
// temporary file next to the target, renamed over the target atomically by
// Commit (the same rules and atomicity as Write; readers never see a
// partial file) or removed by Abort. Nothing is buffered in memory. WriteAt
// is safe for concurrent use; Commit and Abort wait for writes in progress
// and make later writes fail.
type TempFile struct {
	e    *Engine
	p    string // normalized virtual path
	name string // root-relative target, resolved at creation
	tmp  string // root-relative temp file

	mu      sync.RWMutex
	f       *os.File     // nil once committed or aborted
	written atomic.Int64 // sum of the bytes written
	lent    atomic.Bool  // another process may write through f (Lend)
}

// CreateTemp starts a streaming upload of the file at path (docs/file-tools.md §4.9 item
// rules): the target is resolved and checked as Write checks it (not a
// directory, writable if it exists), missing parents are created, and an
// empty temp file is created in the target's directory. The caller must end
// it with Commit or Abort.
func (e *Engine) CreateTemp(ctx context.Context, path string) (*TempFile, error) {
	p, err := vpath.Normalize(path)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, e.fail("upload", p, err)
	}
	name, _, _, err := e.checkTarget("upload", p)
	if err != nil {
		return nil, err
	}
	dir, base := splitName(name)
	if dir != "." {
		if err := e.root.MkdirAll(dir, newDirMode); err != nil {
			return nil, e.fail("upload", p, err)
		}
	}
	tmp := joinName(dir, tempName(base))
	f, err := e.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, e.fail("upload", p, err)
	}
	return &TempFile{e: e, p: p, name: name, tmp: tmp, f: f}, nil
}

// checkTarget resolves p for writing and checks the target (see inspect).
func (e *Engine) checkTarget(op, p string) (name string, perm fs.FileMode, exists bool, err error) {
	if name, err = e.resolveTarget(op, p); err != nil {
		return "", 0, false, err
	}
	perm, exists, err = e.inspect(op, p, name)
	return name, perm, exists, err
}

// resolveTarget resolves the write target p through symlinks to its
// root-relative name; the root itself is is_directory.
func (e *Engine) resolveTarget(op, p string) (string, error) {
	name, err := e.resolve(p, true)
	if err != nil {
		return "", e.fail(op, p, err)
	}
	if name == "." {
		return "", backend.Errorf(backend.CodeIsDirectory, p, "%s %s: is a directory (the root); write to a file path", op, p)
	}
	return name, nil
}

// inspect checks an existing write target name: regular and writable (see
// checkWritable). perm is the mode the new content gets (the old file's,
// or 0644); exists reports that there is a file.
func (e *Engine) inspect(op, p, name string) (perm fs.FileMode, exists bool, err error) {
	fi, err := e.root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return newFileMode, false, nil
	case err != nil:
		return 0, false, e.fail(op, p, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		// resolve followed every link; one appeared since.
		return 0, false, e.fail(op, p, errChanged)
	}
	if err := checkRegular(op, p, fi); err != nil {
		return 0, false, err
	}
	if err := e.checkWritable(op, p, name, fi); err != nil {
		return 0, false, err
	}
	return fi.Mode().Perm(), true, nil
}

// Path is the upload's normalized virtual path.
func (t *TempFile) Path() string { return t.p }

// Lend returns the temp file for another process to write the upload's
// bytes into through its descriptor (sandboxd borrows it: docs/security.md,
// "Bulk bytes through the agent's open file"). Those bytes are not counted,
// so Commit then checks the file's size alone. The file stays the
// TempFile's: the caller must not close it.
func (t *TempFile) Lend() (*os.File, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.f == nil {
		return nil, backend.Errorf(backend.CodeInvalidArgument, t.p, "upload %s: already committed or aborted", t.p)
	}
	t.lent.Store(true)
	return t.f, nil
}

// WriteAt writes b at offset off of the temp file. Bytes past the item cap
// are too_large (the upload stays open; the caller aborts it).
func (t *TempFile) WriteAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, backend.Errorf(backend.CodeInvalidArgument, t.p, "upload %s: negative offset %d", t.p, off)
	}
	if end := off + int64(len(b)); end > t.e.cfg.itemCap {
		return 0, t.e.fail("upload", t.p, textops.TooLargeError("upload", end, t.e.cfg.itemCap))
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.f == nil {
		return 0, backend.Errorf(backend.CodeInvalidArgument, t.p, "upload %s: already committed or aborted", t.p)
	}
	n, err := t.f.WriteAt(b, off)
	t.written.Add(int64(n))
	if err != nil {
		return n, t.e.fail("upload", t.p, err)
	}
	return n, nil
}

// Commit checks that exactly size bytes were written and the temp file is
// size bytes long, then replaces the target atomically (fsynced when the
// engine syncs, see WithSync). On any failure the temp file is removed.
// created reports that no file existed.
func (t *TempFile) Commit(ctx context.Context, size int64) (res backend.WriteResult, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.f
	if f == nil {
		return res, backend.Errorf(backend.CodeInvalidArgument, t.p, "upload %s: already committed or aborted", t.p)
	}
	t.f = nil
	e := t.e
	defer func() {
		if err != nil {
			f.Close()
			e.root.Remove(t.tmp)
		}
	}()
	ctx, cancel := e.opContext(ctx)
	defer cancel()
	fi, err := f.Stat()
	if err != nil {
		return res, e.fail("upload", t.p, err)
	}
	if w := t.written.Load(); (w != size && !t.lent.Load()) || fi.Size() != size {
		return res, backend.Errorf(backend.CodeInvalidArgument, t.p,
			"upload %s: %d bytes were written (file size %d), but the upload declared %d; nothing was changed", t.p, w, fi.Size(), size)
	}
	// The target is checked again under its lock: it may have changed
	// since CreateTemp.
	unlock := e.locks.lock(t.name)
	defer unlock()
	name, perm, exists, err := e.checkTarget("upload", t.p)
	if err != nil {
		return res, err
	}
	if name != t.name {
		return res, e.fail("upload", t.p, errChanged)
	}
	if err := e.finish(ctx, f, t.tmp, name, perm); err != nil {
		return res, e.fail("upload", t.p, err)
	}
	return backend.WriteResult{Path: t.p, BytesWritten: size, Created: !exists}, nil
}

// Abort removes the temp file; the target is untouched. It is idempotent.
func (t *TempFile) Abort() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.f == nil {
		return nil
	}
	t.f.Close()
	t.f = nil
	if err := t.e.root.Remove(t.tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// finish gives the written temp file f (root-relative tmp) perm, syncs it
// when the engine syncs, closes it and renames it over name; the directory
// is then synced too (best effort). The caller removes tmp on failure.
func (e *Engine) finish(ctx context.Context, f *os.File, tmp, name string, perm fs.FileMode) error {
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if e.cfg.sync {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := e.root.Rename(tmp, name); err != nil {
		return err
	}
	if e.cfg.sync {
		dir, _ := splitName(name)
		if d, derr := e.root.Open(dir); derr == nil {
			_ = d.Sync()
			d.Close()
		}
	}
	return nil
}

// DownloadFile is a streaming download: an open regular file read at
// offsets. Its size is fixed at open; a read that finds the file has
// changed size since is an error (the download must be retried), so a
// download never mixes two versions of a file silently.
type DownloadFile struct {
	e    *Engine
	p    string
	f    *os.File
	size int64
}

// OpenDownload opens the file at path for a streaming download, with the
// same checks as Download: directories are is_directory, non-regular files
// not_regular_file (never opened), files over the item cap too_large.
func (e *Engine) OpenDownload(ctx context.Context, path string) (*DownloadFile, error) {
	p, err := vpath.Normalize(path)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, e.fail("download", p, err)
	}
	f, fi, err := e.openDownload(p)
	if err != nil {
		return nil, err
	}
	return &DownloadFile{e: e, p: p, f: f, size: fi.Size()}, nil
}

// openDownload opens the regular file at normalized path p for reading,
// refusing it (too_large) when it is over the item cap before or after the
// open.
func (e *Engine) openDownload(p string) (*os.File, os.FileInfo, error) {
	name, fi, err := e.statFile("download", p)
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() > e.cfg.itemCap {
		return nil, nil, e.fail("download", p, textops.TooLargeError("download", fi.Size(), e.cfg.itemCap))
	}
	f, fi, err := openRegular(e.root, name, fi)
	if err != nil {
		return nil, nil, e.fail("download", p, err)
	}
	if fi.Size() > e.cfg.itemCap {
		f.Close()
		return nil, nil, e.fail("download", p, textops.TooLargeError("download", fi.Size(), e.cfg.itemCap))
	}
	return f, fi, nil
}

// Path is the download's normalized virtual path.
func (d *DownloadFile) Path() string { return d.p }

// Size is the file's size when it was opened.
func (d *DownloadFile) Size() int64 { return d.size }

// File is the open file, for another process to read through its
// descriptor (see TempFile.Lend). It stays the DownloadFile's: the caller
// must not close it.
func (d *DownloadFile) File() *os.File { return d.f }

// ReadAt fills b from offset off, which must lie within the size at open
// (off+len(b) ≤ Size). It fails when the file no longer has that size.
func (d *DownloadFile) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(b)) > d.size {
		return 0, backend.Errorf(backend.CodeOffsetOutOfRange, d.p,
			"download %s: bytes %d..%d are outside the file's %d bytes", d.p, off, off+int64(len(b)), d.size)
	}
	n, err := d.f.ReadAt(b, off)
	if err == nil || errors.Is(err, io.EOF) {
		fi, serr := d.f.Stat()
		switch {
		case serr != nil:
			err = serr
		case fi.Size() != d.size || n != len(b):
			return n, d.changed(fi.Size())
		default:
			err = nil
		}
	}
	if err != nil {
		return n, d.e.fail("download", d.p, err)
	}
	return n, nil
}

func (d *DownloadFile) changed(now int64) *backend.Error {
	return backend.DownloadChanged(d.p, d.size, now)
}

// Close closes the file.
func (d *DownloadFile) Close() error { return d.f.Close() }
