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
)

// The host fill of a restored workspace (docs/security.md, "The host fill
// of a restored workspace"): where the engine's volume directory is on
// this host, sandboxd extracts a restore's tar into it itself instead of
// copying it in through the engine, and under runc does so while the
// container starts. The engine's copy stays for every other case.

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

// fillHost extracts src into dir, owned by uid:gid; the restore source
// decides the outcome, as for the engine's copy.
func fillHost(ctx context.Context, dir string, src restoreSource, uid, gid int) error {
	content, done := src.open(ctx)
	err := untar(content, dir, uid, gid, true)
	if err != nil {
		err = fmt.Errorf("restore the workspace: %w", err)
	}
	return done(err)
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

// untar extracts a tar that Repo.WriteTar built (directories before their
// contents, links after every file) under dir, through an os.Root: no
// name leaves dir, an existing file is never overwritten, and each entry
// gets its header's permission bits (umask aside) and modification time.
// With links false (a memory image) only directories and regular files
// are accepted and nothing is chowned; with links true (a workspace)
// symbolic and hard links and FIFOs are made too, and every entry is
// owned by uid:gid. dir itself is left as it is.
func untar(r io.Reader, dir string, uid, gid int, links bool) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	own := func(name string) error {
		if !links {
			return nil
		}
		return root.Lchown(name, uid, gid)
	}
	type dirTime struct {
		name string
		t    time.Time
	}
	var dirs []dirTime
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(h.Name, "/")
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			dirs = append(dirs, dirTime{name, h.ModTime})
		case tar.TypeReg:
			err = writeFile(root, name, tr, h.Size)
		case tar.TypeSymlink, tar.TypeLink, tar.TypeFifo:
			if !links {
				return fmt.Errorf("memory image: %s is neither a file nor a directory", h.Name)
			}
			switch h.Typeflag {
			case tar.TypeSymlink:
				err = root.Symlink(h.Linkname, name)
			case tar.TypeLink:
				err = root.Link(h.Linkname, name)
			default:
				err = mkfifo(root, name)
			}
		default:
			return fmt.Errorf("snapshot tar: %s has type %q", h.Name, h.Typeflag)
		}
		if err == nil {
			err = own(name)
		}
		if err != nil {
			return err
		}
		if h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink {
			continue // a hard link's file has its mode and time; a symlink's are not kept
		}
		if err := root.Chmod(name, fs.FileMode(h.Mode)&fs.ModePerm); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeDir {
			if err := root.Chtimes(name, h.ModTime, h.ModTime); err != nil {
				return err
			}
		}
	}
	// A directory's time last: writing its entries changed it.
	for _, d := range slices.Backward(dirs) {
		if err := root.Chtimes(d.name, d.t, d.t); err != nil {
			return err
		}
	}
	return nil
}

// writeFile creates name (which must not exist) in root with size bytes
// of r.
func writeFile(root *os.Root, name string, r io.Reader, size int64) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.CopyN(f, r, size)
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
