package fileops

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// maxLinks is the longest symlink chain a resolution follows, os.Root's
// own limit (docs/file-tools.md §2 Resolution).
const maxLinks = 8

// resolve maps the normalized virtual path p to the root-relative name of
// the file it designates ("." for the root), with every symlink on the way
// replaced by its target, so that the name has no symlink left (unless the
// tree changes concurrently; os.Root still confines every later use). The
// final component is followed only when followFinal is set.
//
// It follows links the way os.Root does, a component at a time, and
// reports a failing link by name: an absolute target, a target that climbs
// out of the root, a loop or a chain of more than maxLinks links are
// invalid_path with the link and its target in the message. A missing
// component ends resolution: the rest of the path is appended as is (write
// creates it), unless a ".." from a link target follows, which cannot be
// resolved without the directory, so that is file_not_found.
//
// Other lstat failures (ENOTDIR, EACCES, ...) are returned as OS errors for
// the caller to map with the operation name.
func (e *Engine) resolve(p string, followFinal bool) (string, error) {
	pending := vpath.Segments(p)
	var stack []string
	links := 0
	var link, target string // the last link followed, for messages
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return "", linkError(p, link, target, "resolves outside the root")
			}
			stack = stack[:len(stack)-1]
			continue
		}
		stack = append(stack, c)
		if len(pending) == 0 && !followFinal {
			break
		}
		name := strings.Join(stack, "/")
		fi, err := e.root.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			for _, r := range pending {
				switch r {
				case "", ".":
				case "..":
					return "", &fs.PathError{Op: "lstat", Path: name, Err: syscall.ENOENT}
				default:
					stack = append(stack, r)
				}
			}
			break
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		links++
		link = virtual(name)
		t, err := e.root.Readlink(name)
		if err != nil {
			return "", err
		}
		target = t
		if links > maxLinks {
			return "", linkError(p, link, target, "is part of a symlink loop or of a chain of more than 8 links")
		}
		if strings.HasPrefix(t, "/") {
			return "", linkError(p, link, target,
				"points to an absolute path; absolute link targets are never followed, use the target path directly if it lies inside the root")
		}
		if t == "" {
			return "", &fs.PathError{Op: "readlink", Path: name, Err: syscall.ENOENT}
		}
		stack = stack[:len(stack)-1]
		pending = append(strings.Split(t, "/"), pending...)
	}
	if len(stack) == 0 {
		return ".", nil
	}
	return strings.Join(stack, "/"), nil
}

// linkError is the invalid_path error of a symlink that cannot be
// followed. link is "" when p itself climbs out of the root, which a
// normalized path cannot do, so it is named generically.
func linkError(p, link, target, what string) *backend.Error {
	if link == "" {
		return backend.Errorf(backend.CodeInvalidPath, p, "invalid path %s: it %s", backend.Quote(p), what)
	}
	return backend.Errorf(backend.CodeInvalidPath, p,
		"invalid path %s: the symlink %s -> %s %s", backend.Quote(p), backend.Clip(link), backend.Quote(target), what).
		WithDetail("link", link).
		WithDetail("target", target)
}
