package sandbox

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/moby/moby/api/types/volume"
	"golang.org/x/sys/unix"

	"github.com/plumbhq/plumb/pkg/snapshot"
)

// The host fill of a restored workspace (docs/security.md, "The host fill
// of a restored workspace"): where the engine's volume directory is on
// this host, sandboxd writes a restore's entries into it itself (from the
// verified chunks, or a fork's verified tar) instead of copying a tar in
// through the engine, and under runc does so while the container starts.
// The engine's copy stays for every other case.

// hostFillDir returns the host directory of vol, the workspace volume
// just created for a box of template t, when sandboxd can fill it itself;
// "" when the engine must.
func (m *Manager) hostFillDir(vol volume.Volume, t Template) string {
	if m.cfg.EngineFill || m.remappedIDs || m.kernelDisk(t) || vol.Driver != "local" || len(vol.Options) > 0 || vol.Mountpoint == "" {
		return ""
	}
	if st, err := os.Lstat(vol.Mountpoint); err != nil || !st.IsDir() {
		return "" // the engine's data root is not on this host
	}
	return vol.Mountpoint
}

// remapsIDs reports whether an engine's security options say files it
// writes for a container belong to other ids on the host (user-namespace
// remapping, rootless).
func remapsIDs(securityOptions []string) bool {
	return slices.ContainsFunc(securityOptions, func(o string) bool {
		return strings.Contains(o, "name=userns") || strings.Contains(o, "name=rootless")
	})
}

// overlapsStart reports whether a box of template t may be filled while
// its container starts: only under runc, whose volume is a plain bind
// mount, and never for a box whose processes resume from memory.
func (m *Manager) overlapsStart(t Template, spec CreateSpec) bool {
	return spec.memory == nil && cmpOr(t.Runtime, m.limits.engineDefault) == "runc"
}

// hostFill is one host fill under way; wait returns its outcome (the
// restore source's, which decides it, as for the engine's copy) and may
// be called more than once.
type hostFill struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// startHostFill extracts src into dir, the empty root of a new box's
// workspace volume, in the background. The root itself is made first, as
// the box's image has its working directory (images.layer: the sandbox
// user's, 0755), before the box can start: the agent makes it
// group-writable when it starts, and must find it the sandbox user's.
func startHostFill(ctx context.Context, dir string, src restoreSource, uid, gid int) (*hostFill, error) {
	if err := os.Lchown(dir, uid, gid); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &hostFill{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		f.err = fillHost(ctx, dir, src, uid, gid)
	}()
	return f, nil
}

// fillHost extracts src into dir, owned by uid:gid; a snapshot's own
// failure (DATA_LOSS) comes first, as for the engine's copy.
func fillHost(ctx context.Context, dir string, src restoreSource, uid, gid int) error {
	err := src.extract(ctx, dir, uid, gid)
	if err != nil && snapshot.CodeOf(err) == "" {
		err = fmt.Errorf("restore the workspace: %w", err)
	}
	return snapErr(err)
}

func (f *hostFill) wait() error {
	<-f.done
	return f.err
}

// stop ends a fill that is no longer wanted and waits for it.
func (f *hostFill) stop() {
	f.cancel()
	<-f.done
}

// extractor writes a restore's entries under one directory, through an
// os.Root: no name leaves it, an existing file is never overwritten, and
// each entry gets its permission bits (umask aside) and modification
// time. With links false (a memory image) only directories and regular
// files are accepted and nothing is chowned; with links true (a
// workspace) symbolic and hard links and FIFOs are made too, and every
// entry is owned by uid:gid. The directory itself is left as it is.
// Entries come as Repo.WriteTar orders them: a directory before its
// contents, links after every file.
type extractor struct {
	root     *os.Root
	uid, gid int
	links    bool
	dirs     []dirTime
}

type dirTime struct {
	name string
	t    time.Time
}

func newExtractor(dir string, uid, gid int, links bool) (*extractor, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &extractor{root: root, uid: uid, gid: gid, links: links}, nil
}

// add writes one entry of tar type kind; content writes a regular file's
// bytes into it.
func (x *extractor) add(kind byte, name, link string, mode fs.FileMode, mtime time.Time, content func(io.Writer) error) error {
	var err error
	switch kind {
	case tar.TypeDir:
		if err := x.root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		x.dirs = append(x.dirs, dirTime{name, mtime})
	case tar.TypeReg:
		err = writeFile(x.root, name, content)
	case tar.TypeSymlink, tar.TypeLink, tar.TypeFifo:
		if !x.links {
			return fmt.Errorf("memory image: %s is neither a file nor a directory", name)
		}
		switch kind {
		case tar.TypeSymlink:
			err = x.root.Symlink(link, name)
		case tar.TypeLink:
			err = x.root.Link(link, name)
		default:
			err = mkfifo(x.root, name)
		}
	default:
		return fmt.Errorf("snapshot: %s has type %q", name, kind)
	}
	if err == nil && x.links {
		err = x.root.Lchown(name, x.uid, x.gid)
	}
	if err != nil || kind == tar.TypeSymlink || kind == tar.TypeLink {
		return err // a hard link's file has its mode and time; a symlink's are not kept
	}
	if err := x.root.Chmod(name, mode&fs.ModePerm); err != nil {
		return err
	}
	if kind == tar.TypeDir {
		return nil
	}
	return x.root.Chtimes(name, mtime, mtime)
}

// close gives every directory its time (last: writing its entries changed
// it) and releases the root.
func (x *extractor) close() error {
	defer x.root.Close()
	for _, d := range slices.Backward(x.dirs) {
		if err := x.root.Chtimes(d.name, d.t, d.t); err != nil {
			return err
		}
	}
	return nil
}

// untar extracts a tar that Repo.WriteTar built under dir (extractor's
// rules).
func untar(r io.Reader, dir string, uid, gid int, links bool) error {
	x, err := newExtractor(dir, uid, gid, links)
	if err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return x.close()
		}
		if err == nil {
			err = x.add(h.Typeflag, strings.TrimSuffix(h.Name, "/"), h.Linkname, fs.FileMode(h.Mode), h.ModTime, func(w io.Writer) error {
				_, err := io.CopyN(w, tr, h.Size)
				return err
			})
		}
		if err != nil {
			x.root.Close()
			return err
		}
	}
}

// tarTypes are the tar types of a manifest's entry types.
var tarTypes = map[string]byte{
	snapshot.TypeDir: tar.TypeDir, snapshot.TypeFile: tar.TypeReg, snapshot.TypeFIFO: tar.TypeFifo,
	snapshot.TypeSymlink: tar.TypeSymlink, snapshot.TypeHardlink: tar.TypeLink,
}

// extractSnapshot writes snapshot man of repo under dir (extractor's
// rules) straight from its verified chunks: no tar in between.
func extractSnapshot(ctx context.Context, repo *snapshot.Repo, man *snapshot.Manifest, dir string, uid, gid int, links bool) error {
	x, err := newExtractor(dir, uid, gid, links)
	if err != nil {
		return err
	}
	err = repo.Each(ctx, man, func(e snapshot.Entry, content func(io.Writer) error) error {
		return x.add(tarTypes[e.Type], e.Path, e.Link, fs.FileMode(e.Mode), time.Unix(e.MTime, 0), content)
	})
	if err != nil {
		x.root.Close()
		return err
	}
	return x.close()
}

// writeFile creates name (which must not exist) in root with what
// content writes.
func writeFile(root *os.Root, name string, content func(io.Writer) error) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = content(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// mkfifo makes FIFO name in root: in its parent directory, opened through
// root, by its last component.
func mkfifo(root *os.Root, name string) error {
	parent, err := root.Open(path.Dir(name))
	if err != nil {
		return err
	}
	defer parent.Close()
	if err := unix.Mkfifoat(int(parent.Fd()), path.Base(name), 0o600); err != nil {
		return &fs.PathError{Op: "mkfifo", Path: name, Err: err}
	}
	return nil
}
