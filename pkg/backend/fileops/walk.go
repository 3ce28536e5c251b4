package fileops

import (
	"context"
	"io/fs"
	"os"
	"sort"
)

// walker visits the regular files below a directory in bytewise order of
// their paths, the order grep and glob results are sorted in, so that a
// walk stopping at a cap has found exactly the first matches. Within a
// directory, entries are sorted by name, with "/" appended to directory
// names: every path below directory d starts with "d/", so this order is
// the order of the full paths.
//
// It holds one directory handle (a walkDir) per level, lstats entries
// through it, never follows a symlink, and enters a directory only when
// the opened handle is the directory it lstat'ed.
type walker struct {
	ctx context.Context
	e   *Engine
	// descend reports whether a file below the directory at rel (relative
	// to the start, "a/b") could be wanted; nil means always.
	descend func(rel string) bool
	// file is called for each regular file; returning true ends the walk.
	file func(dir walkDir, name, rel string, fi fs.FileInfo) (stop bool)
	// dirErrors counts directories that could not be listed or entered
	// and entries that could not be lstat'ed.
	dirErrors int
}

type walkEntry struct {
	name string
	key  string
	fi   fs.FileInfo
}

// walk visits the directory dir, whose root-relative name is name and
// whose path relative to the start is rel ("" for the start). The start's
// own listing error is returned; errors below it are counted. A done
// context ends the walk with its error.
func (w *walker) walk(dir walkDir, name, rel string) (stop bool, err error) {
	names, err := dir.names()
	if err != nil {
		if rel == "" {
			return true, err
		}
		w.dirErrors++
		return false, nil
	}
	entries := make([]walkEntry, 0, len(names))
	for _, n := range names {
		fi, err := dir.lstat(n)
		if err != nil {
			w.dirErrors++
			continue
		}
		key := n
		if fi.IsDir() {
			key += "/"
		}
		entries = append(entries, walkEntry{name: n, key: key, fi: fi})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].key < entries[j].key })
	for _, en := range entries {
		if err := w.ctx.Err(); err != nil {
			return true, err
		}
		crel := en.name
		if rel != "" {
			crel = rel + "/" + en.name
		}
		switch {
		case en.fi.Mode().IsRegular():
			if w.file(dir, en.name, crel, en.fi) {
				return true, nil
			}
		case en.fi.IsDir():
			cname := joinName(name, en.name)
			if w.e.skipped(cname) || (w.descend != nil && !w.descend(crel)) {
				continue
			}
			sub, err := dir.sub(en.name, en.fi)
			if err != nil {
				w.dirErrors++
				continue
			}
			stop, err := w.walk(sub, cname, crel)
			sub.close()
			if stop || err != nil {
				return true, err
			}
		}
	}
	return false, nil
}

// walkDir is a directory a walk visits: an os.Root on the general path
// (rootDir), or on Linux a descriptor the fast path reached without
// following a symlink (fdDir).
type walkDir interface {
	// names lists the directory's entries, unsorted.
	names() ([]string, error)
	// lstat describes the entry name without following a symlink.
	lstat(name string) (fs.FileInfo, error)
	// sub opens the subdirectory name, checked to be the file fi
	// describes.
	sub(name string, fi fs.FileInfo) (walkDir, error)
	// open opens the regular file name for reading, checked to be the
	// file fi describes.
	open(name string, fi fs.FileInfo) (*os.File, error)
	// close releases a directory from sub; the start's owner releases it.
	close()
}

// rootDir is a walkDir of an os.Root.
type rootDir struct{ r *os.Root }

func (d rootDir) names() ([]string, error)               { return readNames(d.r) }
func (d rootDir) lstat(name string) (fs.FileInfo, error) { return d.r.Lstat(name) }
func (d rootDir) close()                                 { d.r.Close() }

func (d rootDir) sub(name string, fi fs.FileInfo) (walkDir, error) {
	sub, _, err := openSubdir(d.r, name, fi)
	if err != nil {
		return nil, err
	}
	return rootDir{sub}, nil
}

func (d rootDir) open(name string, fi fs.FileInfo) (*os.File, error) {
	f, _, err := openRegular(d.r, name, fi)
	return f, err
}
