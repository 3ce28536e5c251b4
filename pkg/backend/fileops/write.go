package fileops

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"syscall"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/textops"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// Permissions of what write creates (docs/file-tools.md §4.3). They are applied exactly,
// whatever the process umask.
const (
	newFileMode = 0o644
	newDirMode  = 0o755
)

// Write creates or atomically replaces the file at path with content
// (docs/file-tools.md §4.3). Missing parents are created 0755; a new file gets 0644, a
// replaced one keeps its permission bits (setuid, setgid and sticky are
// dropped, as a write(2) by a non-owner would). A file that is not
// writable is permission_denied and left alone (see checkWritable). A
// symlink in the final component (inside the root) is written through: its
// target changes, the link stays.
func (e *Engine) Write(ctx context.Context, path string, content []byte) (backend.WriteResult, error) {
	p, err := vpath.Normalize(path)
	if err != nil {
		return backend.WriteResult{}, err
	}
	ctx, cancel := e.opContext(ctx)
	defer cancel()
	if int64(len(content)) > e.cfg.writeCap {
		return backend.WriteResult{}, e.fail("write", p, textops.TooLargeError("write", int64(len(content)), e.cfg.writeCap))
	}
	created, err := e.writeFile(ctx, "write", p, content)
	if err != nil {
		return backend.WriteResult{}, err
	}
	return backend.WriteResult{Path: p, BytesWritten: int64(len(content)), Created: created}, nil
}

// Upload writes each item like Write, with raw bytes and the item cap; one
// result per item, in input order, with the item's path as given.
func (e *Engine) Upload(ctx context.Context, items []backend.UploadItem) ([]backend.UploadResult, error) {
	out := make([]backend.UploadResult, len(items))
	for i, it := range items {
		out[i] = backend.UploadResult{Path: it.Path}
		if err := ctx.Err(); err != nil {
			out[i].Err = e.fail("upload", it.Path, err)
			continue
		}
		n, err := e.upload(ctx, it)
		if err != nil {
			out[i].Err = asError("upload", it.Path, err)
			continue
		}
		out[i].BytesWritten = n
	}
	return out, nil
}

func (e *Engine) upload(ctx context.Context, it backend.UploadItem) (int64, error) {
	p, err := vpath.Normalize(it.Path)
	if err != nil {
		return 0, err
	}
	ctx, cancel := e.opContext(ctx)
	defer cancel()
	if n := int64(len(it.Content)); n > e.cfg.itemCap {
		return 0, e.fail("upload", p, textops.TooLargeError("upload", n, e.cfg.itemCap))
	}
	if _, err := e.writeFile(ctx, "upload", p, it.Content); err != nil {
		return 0, err
	}
	return int64(len(it.Content)), nil
}

// writeFile is write without the size cap: resolve p through symlinks,
// lock the target, check it, create parents, and replace it atomically.
// created reports that no file existed.
func (e *Engine) writeFile(ctx context.Context, op, p string, content []byte) (created bool, err error) {
	if created, handled, err := e.writeDirect(ctx, op, p, content); handled {
		return created, err
	}
	name, err := e.resolveTarget(op, p)
	if err != nil {
		return false, err
	}
	unlock := e.locks.lock(name)
	defer unlock()
	perm, exists, err := e.inspect(op, p, name)
	if err != nil {
		return false, err
	}
	if !exists {
		if dir, _ := splitName(name); dir != "." {
			if err := e.root.MkdirAll(dir, newDirMode); err != nil {
				return false, e.fail(op, p, err)
			}
		}
	}
	if err := e.replace(ctx, name, content, perm); err != nil {
		return false, e.fail(op, p, err)
	}
	return !exists, nil
}

// checkWritable refuses to replace the existing regular file name (virtual
// path p, stat fi) unless it could be written in place. The atomic rename
// of replace needs write permission on the directory only, so without this
// check a read-only file would be replaced all the same. Two rules, so that
// the outcome does not depend on who runs the engine:
//   - a file without any write permission bit (chmod a-w, e.g. 0444) is
//     refused, even for a privileged process such as root;
//   - otherwise the kernel decides: the file is opened for writing (never
//     truncated, non-blocking) and EACCES, EPERM or EROFS refuse it, as a
//     write(2) by this process would be refused. ETXTBSY (a running
//     executable) passes: the rename does not disturb the running image.
func (e *Engine) checkWritable(op, p, name string, fi fs.FileInfo) *backend.Error {
	if fi.Mode().Perm()&0o222 == 0 {
		return backend.Errorf(backend.CodePermissionDenied, p,
			"%s %s: permission denied: the file is read-only (mode %04o) and was left unchanged", op, p, fi.Mode().Perm()).
			WithDetail("mode", fmt.Sprintf("%04o", fi.Mode().Perm()))
	}
	f, err := e.root.OpenFile(name, os.O_WRONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if errors.Is(err, syscall.ETXTBSY) {
		return nil
	}
	if err != nil {
		return e.fail(op, p, err)
	}
	f.Close()
	return nil
}

// replace atomically replaces the root-relative file name with content
// (docs/file-tools.md §4.3): a temp file ".<name>.plumb-tmp-<random>" in the same directory
// is written, given perm and renamed over name (see finish: fsynced, and
// the directory after the rename, when the engine syncs); on any failure
// it is removed. Readers see the old or the new file, never a partial one.
func (e *Engine) replace(ctx context.Context, name string, content []byte, perm fs.FileMode) (err error) {
	dir, base := splitName(name)
	tmp := joinName(dir, tempName(base))
	f, err := e.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			e.root.Remove(tmp)
		}
	}()
	for rest := content; len(rest) > 0; {
		if err = ctx.Err(); err != nil {
			return err
		}
		chunk := rest[:min(len(rest), 4<<20)]
		if _, err = f.Write(chunk); err != nil {
			return err
		}
		rest = rest[len(chunk):]
	}
	return e.finish(ctx, f, tmp, name, perm)
}

// tmpPrefix marks temp files of an atomic write: ".<name>" + tmpPrefix +
// 16 hex digits.
const tmpPrefix = ".plumb-tmp-"

// tempName returns a fresh temp file name for base, cut so that it stays
// within the 255-byte component limit. The random part comes from
// math/rand/v2's global source (ChaCha8 seeded by the runtime from the
// kernel, as os.CreateTemp's names are): the file is created with
// O_EXCL, so a guessed name only fails one write, and crypto/rand would
// link the crypto packages into the in-box agent for nothing.
func tempName(base string) string {
	var rnd [8]byte
	binary.LittleEndian.PutUint64(rnd[:], rand.Uint64())
	suffix := tmpPrefix + hex.EncodeToString(rnd[:])
	if max := backend.MaxComponentBytes - 1 - len(suffix); len(base) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(base[cut]) {
			cut--
		}
		base = base[:cut]
	}
	return "." + base + suffix
}

// asError returns err as an *backend.Error, mapping anything else as an
// OS error of op on path.
func asError(op, path string, err error) *backend.Error {
	var be *backend.Error
	if errors.As(err, &be) {
		return be
	}
	return backend.FromOS(op, path, err)
}
