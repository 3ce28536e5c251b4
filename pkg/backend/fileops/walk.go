package fileops

import (
	"context"
	"io"
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
// It holds one directory handle (a walkDir) per level and takes each
// entry's type from the listing (lstat'ing it where the file system does
// not say), never follows a symlink, and enters a directory only when the
// opened handle is the directory it lstat'ed. A regular file is lstat'ed
// only when file asks (a glob asks only for its matches).
type walker struct {
	ctx context.Context
	e   *Engine
	// descend reports whether a file below the directory at rel (relative
	// to the start, "a/b") could be wanted; nil means always.
	descend func(rel string) bool
	// file is called for each regular file, with stat to lstat it; an
	// error from stat is counted in dirErrors. Returning true ends the
	// walk.
	file func(dir walkDir, name, rel string, stat func() (fs.FileInfo, bool)) (stop bool)
	// dirErrors counts directories that could not be listed or entered
	// and entries that could not be lstat'ed.
	dirErrors int
}

// dirEntry is one name of a directory listing with its type bits
// (fs.ModeDir, fs.ModeSymlink, 0 for a regular file...); known is false
// when the listing does not give the type (DT_UNKNOWN).
type dirEntry struct {
	name  string
	typ   fs.FileMode
	known bool
}

type walkEntry struct {
	name string
	key  string
	typ  fs.FileMode
	fi   fs.FileInfo // nil until lstat'ed
}

// walk visits the directory dir, whose root-relative name is name and
// whose path relative to the start is rel ("" for the start). The start's
// own listing error is returned; errors below it are counted. A done
// context ends the walk with its error.
func (w *walker) walk(dir walkDir, name, rel string) (stop bool, err error) {
	list, err := dir.entries()
	if err != nil {
		if rel == "" {
			return true, err
		}
		w.dirErrors++
		return false, nil
	}
	entries := make([]walkEntry, 0, len(list))
	for _, d := range list {
		en := walkEntry{name: d.name, key: d.name, typ: d.typ}
		if !d.known {
			fi, err := dir.lstat(d.name)
			if err != nil {
				w.dirErrors++
				continue
			}
			en.typ, en.fi = fi.Mode().Type(), fi
		}
		if en.typ == fs.ModeDir {
			en.key += "/"
		}
		entries = append(entries, en)
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
		switch en.typ {
		case 0: // regular
			stat := func() (fs.FileInfo, bool) {
				if en.fi == nil {
					fi, err := dir.lstat(en.name)
					if err != nil || !fi.Mode().IsRegular() {
						w.dirErrors++
						return nil, false
					}
					en.fi = fi
				}
				return en.fi, true
			}
			if w.file(dir, en.name, crel, stat) {
				return true, nil
			}
		case fs.ModeDir:
			cname := joinName(name, en.name)
			if w.e.skipped(cname) || (w.descend != nil && !w.descend(crel)) {
				continue
			}
			if en.fi == nil {
				fi, err := dir.lstat(en.name)
				if err != nil || !fi.IsDir() {
					w.dirErrors++
					continue
				}
				en.fi = fi
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
	// entries lists the directory, unsorted.
	entries() ([]dirEntry, error)
	// lstat describes the entry name without following a symlink.
	lstat(name string) (fs.FileInfo, error)
	// sub opens the subdirectory name, checked to be the file fi
	// describes.
	sub(name string, fi fs.FileInfo) (walkDir, error)
	// open opens the regular file name for reading, checked to be the
	// file fi describes.
	open(name string, fi fs.FileInfo) (io.ReadCloser, error)
	// close releases a directory from sub; the start's owner releases it.
	close()
}

// rootDir is a walkDir of an os.Root.
type rootDir struct{ r *os.Root }

func (d rootDir) entries() ([]dirEntry, error) {
	f, err := d.r.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	des, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	out := make([]dirEntry, len(des))
	for i, de := range des {
		// os.File.ReadDir lstats an entry whose type the listing lacks.
		out[i] = dirEntry{name: de.Name(), typ: de.Type(), known: true}
	}
	return out, nil
}

func (d rootDir) lstat(name string) (fs.FileInfo, error) { return d.r.Lstat(name) }
func (d rootDir) close()                                 { d.r.Close() }

func (d rootDir) sub(name string, fi fs.FileInfo) (walkDir, error) {
	sub, _, err := openSubdir(d.r, name, fi)
	if err != nil {
		return nil, err
	}
	return rootDir{sub}, nil
}

func (d rootDir) open(name string, fi fs.FileInfo) (io.ReadCloser, error) {
	f, _, err := openRegular(d.r, name, fi)
	if err != nil {
		return nil, err
	}
	return f, nil
}
