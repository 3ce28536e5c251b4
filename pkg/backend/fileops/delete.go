package fileops

import (
	"context"
	"io/fs"
	"os"
	"strconv"
	"syscall"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// Delete removes a file, a symlink (never followed, dangling ones too) or a
// directory tree (docs/file-tools.md §4.5). Removed counts the non-directory entries
// removed. A tree is removed depth first through directory handles, never
// following a symlink inside it; a failure part-way stops there and
// returns the OS error with details.removed, nothing rolled back.
//
// The root and mount points are refused with invalid_path before anything
// is removed: a directory on another device than its parent (a sandbox's
// /workspace or /tmp) cannot be removed, so deleting its contents first
// would be a half-done delete. A mount point met below the target stops
// the walk with invalid_path.
func (e *Engine) Delete(ctx context.Context, path string) (backend.DeleteResult, error) {
	p, err := vpath.Normalize(path)
	if err != nil {
		return backend.DeleteResult{}, err
	}
	if p == "/" {
		return backend.DeleteResult{}, backend.Errorf(backend.CodeInvalidPath, p,
			"delete %s: the root directory cannot be deleted; delete the entries inside it one by one", p)
	}
	ctx, cancel := e.opContext(ctx)
	defer cancel()
	name, err := e.resolve(p, false)
	if err != nil {
		return backend.DeleteResult{}, e.fail("delete", p, err)
	}
	fi, err := e.root.Lstat(name)
	if err != nil {
		return backend.DeleteResult{}, e.fail("delete", p, err)
	}
	if !fi.IsDir() {
		if err := e.root.Remove(name); err != nil {
			return backend.DeleteResult{}, e.fail("delete", p, err)
		}
		return backend.DeleteResult{Path: p, Removed: 1}, nil
	}
	parent, _ := splitName(name)
	if pfi, err := e.root.Stat(parent); err == nil && mountPoint(pfi, fi) {
		return backend.DeleteResult{}, backend.Errorf(backend.CodeInvalidPath, p,
			"delete %s: it is a mount point, which cannot be deleted; delete the entries inside it instead", p)
	}
	d := deleter{ctx: ctx, e: e}
	err = d.removeTree(e.root, name, name, fi)
	if err != nil {
		be := e.fail("delete", p, err)
		return backend.DeleteResult{}, be.WithDetail("removed", strconv.Itoa(d.removed))
	}
	return backend.DeleteResult{Path: p, Removed: d.removed}, nil
}

// deleter removes a tree and counts what it removed.
type deleter struct {
	ctx     context.Context
	e       *Engine
	removed int
}

// removeTree removes the directory name of parent (fi is its lstat) and
// everything below it. full is its root-relative name, for messages.
func (d *deleter) removeTree(parent *os.Root, name, full string, fi fs.FileInfo) error {
	dir, closeDir, err := openSubdir(parent, name, fi)
	if err != nil {
		return err
	}
	err = d.removeContents(dir, full, fi)
	closeDir()
	if err != nil {
		return err
	}
	return parent.Remove(name)
}

func (d *deleter) removeContents(dir *os.Root, full string, dirInfo fs.FileInfo) error {
	names, err := readNames(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := d.ctx.Err(); err != nil {
			return err
		}
		fi, err := dir.Lstat(n)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			child := joinName(full, n)
			if mountPoint(dirInfo, fi) {
				return backend.Errorf(backend.CodeInvalidPath, "",
					"delete: %s is a mount point, which cannot be deleted; delete the other entries one by one", backend.Clip(virtual(child)))
			}
			if err := d.removeTree(dir, n, child, fi); err != nil {
				return err
			}
			continue
		}
		if err := dir.Remove(n); err != nil {
			return err
		}
		d.removed++
	}
	return nil
}

// mountPoint reports whether the directory child lies on another device
// than its parent directory.
func mountPoint(parent, child fs.FileInfo) bool {
	ps, ok1 := parent.Sys().(*syscall.Stat_t)
	cs, ok2 := child.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && ps.Dev != cs.Dev
}
