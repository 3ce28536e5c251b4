package fileops

import (
	"context"
	"io/fs"
	"os"
	"sort"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// Ls lists the direct children of a directory (docs/file-tools.md §4.1): lstat'ed, so
// symlinks are listed as symlinks and not followed; directories end with
// "/"; sorted bytewise by path; the first LsMaxEntries entries. A child
// whose lstat fails is listed with kind other.
func (e *Engine) Ls(ctx context.Context, path string) (backend.LsResult, error) {
	p, err := vpath.Normalize(path)
	if err != nil {
		return backend.LsResult{}, err
	}
	ctx, cancel := e.opContext(ctx)
	defer cancel()
	entries, handled, err := e.lsDirect(ctx, p)
	if !handled {
		entries, err = e.lsEntries(ctx, p)
	}
	if err != nil {
		return backend.LsResult{}, err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	res := backend.LsResult{Entries: entries}
	if len(entries) > backend.LsMaxEntries {
		res.Entries = entries[:backend.LsMaxEntries:backend.LsMaxEntries]
		res.Truncated = true
	}
	return res, nil
}

// lsEntries is Ls's general path: p resolved through symlinks within the
// root, the directory opened as a root of its own, and each child
// lstat'ed through it; unsorted.
func (e *Engine) lsEntries(ctx context.Context, p string) ([]backend.FileInfo, error) {
	name, err := e.resolve(p, true)
	if err != nil {
		return nil, e.fail("ls", p, err)
	}
	fi, err := e.root.Stat(name)
	if err != nil {
		return nil, e.fail("ls", p, err)
	}
	if !fi.IsDir() {
		return nil, backend.Errorf(backend.CodeNotADirectory, p,
			"ls %s: not a directory; read a file with read_file", p)
	}
	dir, closeDir, err := e.openDir(name, fi)
	if err != nil {
		return nil, e.fail("ls", p, err)
	}
	defer closeDir()
	names, err := readNames(dir)
	if err != nil {
		return nil, e.fail("ls", p, err)
	}
	return e.lsInfo(ctx, p, names, dir.Lstat)
}

// lsInfo describes the children names of the directory p, each by its
// lstat; one whose lstat fails is listed with kind other.
func (e *Engine) lsInfo(ctx context.Context, p string, names []string, lstat func(name string) (fs.FileInfo, error)) ([]backend.FileInfo, error) {
	entries := make([]backend.FileInfo, 0, len(names))
	for i, n := range names {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, e.fail("ls", p, err)
			}
		}
		vp := vpath.Join(p, n)
		fi, err := lstat(n)
		if err != nil {
			entries = append(entries, backend.FileInfo{Path: vp, Kind: backend.KindOther})
			continue
		}
		entries = append(entries, fileInfo(vp, fi))
	}
	return entries, nil
}

// fileInfo describes the lstat'ed entry at virtual path vp.
func fileInfo(vp string, fi fs.FileInfo) backend.FileInfo {
	mode := uint32(fi.Mode().Perm())
	out := backend.FileInfo{
		Path:       vp,
		Size:       fi.Size(),
		ModifiedAt: fi.ModTime().UTC().Format(time.RFC3339Nano),
		Mode:       &mode,
	}
	switch t := fi.Mode().Type(); {
	case t == 0:
		out.Kind = backend.KindFile
	case t == fs.ModeDir:
		out.Kind, out.IsDir, out.Size = backend.KindDir, true, 0
		if vp != "/" {
			out.Path += "/"
		}
	case t == fs.ModeSymlink:
		out.Kind = backend.KindSymlink
	default:
		out.Kind = backend.KindOther
	}
	return out
}

// openDir returns a root confined to the directory name, whose stat (or
// lstat) fi the caller has; the check that the opened directory is that
// same file defeats a swap for a symlink in between. closeDir releases it.
func (e *Engine) openDir(name string, fi fs.FileInfo) (dir *os.Root, closeDir func(), err error) {
	if name == "." {
		return e.root, func() {}, nil
	}
	return openSubdir(e.root, name, fi)
}

// openSubdir opens the directory name of parent as a root, and checks that
// it is the file fi describes.
func openSubdir(parent *os.Root, name string, fi fs.FileInfo) (*os.Root, func(), error) {
	sub, err := parent.OpenRoot(name)
	if err != nil {
		return nil, nil, err
	}
	got, err := sub.Stat(".")
	if err == nil && !os.SameFile(got, fi) {
		err = errChanged
	}
	if err != nil {
		sub.Close()
		return nil, nil, err
	}
	return sub, func() { sub.Close() }, nil
}

// readNames returns the names in dir, unsorted.
func readNames(dir *os.Root) ([]string, error) {
	f, err := dir.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
