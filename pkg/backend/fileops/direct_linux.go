//go:build linux

package fileops

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumbhq/plumb/pkg/backend"
)

// direct is the fast path of write and edit (docs/file-tools.md §4.3,
// §4.4), and of read and ls (lsDirect), for the common case: every parent of the target is a real
// directory and the target is missing or a regular file the engine may
// write. It holds an O_PATH handle of the root and opens the target's
// directory one component at a time with O_NOFOLLOW (no symlink is ever
// followed, so the root-relative name needs no resolution), then works on
// the last component through that directory handle alone: fstatat, an
// access check, openat of the temp file, write, fchmod, renameat. That is
// about 10 system calls where the os.Root path, which walks the tree again
// for each of its resolve, lstat, writability open, temp create and
// rename, makes about 40.
//
// Anything else (a symlink on the way, a missing parent, a directory or
// special file as target, a refused access) is not handled here: the
// caller falls back to the general path, which resolves links and reports
// the exact error. The fallback happens before anything is changed.
type direct struct {
	mu      sync.RWMutex // held shared by operations, exclusive by open and close
	fd      int          // O_PATH handle of the root; -1 when closed or unavailable
	anchors []anchor     // longest name first
	cleanup runtime.Cleanup
	closed  bool

	// The handles are opened by the first operation, not by New: a
	// sandbox agent builds its engine while the box starts, where each of
	// the dozen system calls costs a round trip under gVisor, and many
	// boxes run commands before any file operation.
	once  sync.Once
	owner *Engine
	root  *os.Root
}

// anchor is an O_PATH handle of a writable root (WithWritableRoots) whose
// root-relative name cannot come to mean another directory: every
// directory above it, the root included, is on a read-only file system,
// so no entry on the way can be renamed, replaced or turned into a
// symlink, and box code cannot mount (it has no CAP_SYS_ADMIN). openDir
// starts below the anchor instead of walking to it from the root: in a
// sandbox the root is the container's image (fuse-overlayfs, or gVisor's
// gofer), where looking up "workspace" costs a round trip to a user-space
// file server on every operation.
type anchor struct {
	name string // root-relative, no leading or trailing "/"
	fd   int
}

// openDirect returns the fast path of e, which opens the O_PATH handle of
// root on first use; a failure only disables it.
func openDirect(e *Engine, root *os.Root) *direct {
	return &direct{fd: -1, owner: e, root: root}
}

// open opens the handles, unless close came first.
func (d *direct) open() {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, root := d.owner, d.root
	d.owner, d.root = nil, nil
	if d.closed {
		return
	}
	f, err := root.Open(".")
	if err != nil {
		return
	}
	defer f.Close()
	sc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = sc.Control(func(fd uintptr) {
		nfd, err := unix.Openat(int(fd), ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == nil {
			d.fd = nfd
		}
	})
	if d.fd < 0 {
		return
	}
	d.anchors = findAnchors(d.fd, e.cfg.writable)
	fds := []int{d.fd}
	for _, a := range d.anchors {
		fds = append(fds, a.fd)
	}
	d.cleanup = runtime.AddCleanup(e, func(fds []int) {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}, fds)
}

// findAnchors opens the anchors among the writable roots (virtual paths)
// below the root handle rootfd: each reached one component at a time
// without following symlinks, through directories that all lie on
// read-only file systems (fstatfs's ST_RDONLY). Any other root is left
// out and reached from the root as before.
func findAnchors(rootfd int, writable []string) []anchor {
	var out []anchor
	for _, w := range writable {
		name := strings.Trim(w, "/")
		if name == "" {
			continue
		}
		if fd, ok := openAnchor(rootfd, name); ok {
			out = append(out, anchor{name: name, fd: fd})
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i].name) > len(out[j].name) })
	return out
}

// openAnchor opens name below rootfd as findAnchors requires.
func openAnchor(rootfd int, name string) (int, bool) {
	fd := rootfd
	for _, c := range strings.Split(name, "/") {
		var st unix.Statfs_t
		if err := unix.Fstatfs(fd, &st); err != nil || st.Flags&unix.ST_RDONLY == 0 {
			if fd != rootfd {
				unix.Close(fd)
			}
			return -1, false
		}
		nfd, err := openPath(fd, c)
		if fd != rootfd {
			unix.Close(fd)
		}
		if err != nil {
			return -1, false
		}
		fd = nfd
	}
	return fd, true
}

// start returns the handle a walk to the root-relative name dir starts
// from and the components left below it: the longest anchor that is dir
// or above it, else the root.
func (d *direct) start(dir string) (fd int, rest string) {
	for _, a := range d.anchors {
		if dir == a.name {
			return a.fd, ""
		}
		if strings.HasPrefix(dir, a.name) && dir[len(a.name)] == '/' {
			return a.fd, dir[len(a.name)+1:]
		}
	}
	return d.fd, dir
}

// close releases the root handle once no operation uses it.
func (d *direct) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.fd >= 0 {
		d.cleanup.Stop()
		unix.Close(d.fd)
		d.fd = -1
		for _, a := range d.anchors {
			unix.Close(a.fd)
		}
		d.anchors = nil
	}
}

// openDir opens the root-relative directory dir ("." for the root) as an
// O_PATH handle without following symlinks, from the longest anchor at or
// above it (the root when there is none). ok is false when a component
// is missing, a symlink, not a directory or refused, or the fast path is
// off; done must be called when ok, and closes the handle.
func (d *direct) openDir(dir string) (fd int, done func(), ok bool) {
	return d.openDirAs(dir, unix.O_PATH)
}

// openDirAs is openDir with the last component opened with mode, O_PATH
// or O_RDONLY (a handle getdents can read; the anchor or root itself is
// then opened again as "."). Below the start, a remainder of two or more
// components is opened with one openat2 that refuses every symlink and
// any escape (RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH): the same result as the
// walk one component at a time, in one system call instead of two per
// component (each costs 15-100 µs under gVisor). Without openat2 (an
// older kernel, a seccomp filter) the walk is taken.
func (d *direct) openDirAs(dir string, mode int) (fd int, done func(), ok bool) {
	d.once.Do(d.open)
	d.mu.RLock()
	if d.fd < 0 {
		d.mu.RUnlock()
		return -1, nil, false
	}
	base, rest := d.start(dir)
	if rest == "." {
		rest = ""
	}
	fd, err := d.beneath(base, rest, mode)
	if err != nil {
		d.mu.RUnlock()
		return -1, nil, false
	}
	return fd, func() {
		if fd != base {
			sys.Close(fd)
		}
		d.mu.RUnlock()
	}, true
}

// noOpenat2 is set once openat2 has failed as unsupported.
var noOpenat2 atomic.Bool

// beneath opens rest ("" for base itself) below base as openDirAs says.
func (d *direct) beneath(base int, rest string, mode int) (int, error) {
	if rest == "" {
		if mode == unix.O_PATH {
			return base, nil
		}
		return openDirAt(base, ".", mode)
	}
	if strings.IndexByte(rest, '/') > 0 && !noOpenat2.Load() {
		fd, err := openat2Dir(base, rest, mode)
		switch err {
		case nil:
			return fd, nil
		case unix.ENOSYS, unix.EPERM, unix.EINVAL, unix.E2BIG:
			noOpenat2.Store(true)
		default:
			return -1, err
		}
	}
	fd := base
	for {
		c, more, deeper := strings.Cut(rest, "/")
		m := unix.O_PATH
		if !deeper {
			m = mode
		}
		nfd, err := openDirAt(fd, c, m)
		if fd != base {
			sys.Close(fd)
		}
		if err != nil {
			return -1, err
		}
		if fd, rest = nfd, more; !deeper {
			return fd, nil
		}
	}
}

// openat2Dir opens the directory path below dirfd with mode, following no
// symlink and not leaving dirfd.
func openat2Dir(dirfd int, path string, mode int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(mode | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH,
	}
	for {
		fd, err := sys.Openat2(dirfd, path, &how)
		if err != unix.EINTR && err != unix.EAGAIN {
			return fd, err
		}
	}
}

// openPath opens the directory c of dirfd as an O_PATH handle; a symlink
// fails (ELOOP or ENOTDIR), as do "", "." and "..", which a normalized
// path does not contain.
func openPath(dirfd int, c string) (int, error) {
	return openDirAt(dirfd, c, unix.O_PATH)
}

// openDirAt opens the directory c of dirfd with mode (O_PATH or O_RDONLY)
// without following a symlink; "" and ".." fail, and "." only for O_PATH
// (the handle itself serves then).
func openDirAt(dirfd int, c string, mode int) (int, error) {
	if c == "" || c == ".." || (c == "." && mode == unix.O_PATH) {
		return -1, unix.EINVAL
	}
	for {
		fd, err := sys.Openat(dirfd, c, mode|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// target is what the fast path found at the last component.
type target struct {
	exists bool
	perm   fs.FileMode
	st     unix.Stat_t
	// unchecked: the kernel was not asked whether the file may be written
	// (ownWritable); a replace refused for permission is then the general
	// path's to report (refusedUnchecked).
	unchecked bool
}

// inspectAt checks base in dirfd the way inspect does: missing (perm
// 0644), or a regular file with a write bit that this process may write.
// ok is false for anything else.
func inspectAt(dirfd int, base string) (t target, ok bool) {
	err := sys.Fstatat(dirfd, base, &t.st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == unix.ENOENT:
		return target{perm: newFileMode}, true
	case err != nil, t.st.Mode&unix.S_IFMT != unix.S_IFREG, t.st.Mode&0o222 == 0:
		return t, false
	}
	if ownWritable(&t.st) {
		t.unchecked = true
	} else if err := writeAccess(dirfd, base); err != nil && err != unix.ETXTBSY {
		// The kernel's own check of a write open (credentials, ACLs, a
		// read-only mount, an immutable file) without opening the file.
		return t, false
	}
	t.exists, t.perm = true, fs.FileMode(t.st.Mode&0o777)
	return t, true
}

// ownWritable reports whether st is a file this process owns, by its file
// system uid, with the owner's write bit: the kernel then grants a write by
// that bit alone (an ACL never narrows the owner's class), so writeAccess
// would only repeat the answer, one call more on every write and edit
// (50-100 µs under gVisor). What the bit does not tell (a read-only mount,
// an immutable file) refuses the temp file or the rename before anything
// changes, and refusedUnchecked hands that to the general path.
func ownWritable(st *unix.Stat_t) bool {
	return st.Mode&0o200 != 0 && int(st.Uid) == fsUID()
}

// fsUID is the uid this process's file calls are checked as, read once at
// the first write: its fsuid (the sandbox agent sets it on every thread
// before it serves), or its effective uid where the kernel has no setfsuid
// (gVisor, where the agent takes the sandbox user as its effective ids).
var fsUID = sync.OnceValue(func() int {
	if uid, err := unix.SetfsuidRetUid(-1); err == nil {
		return uid // -1 is no uid: the call only reports the current one
	}
	return unix.Geteuid()
})

// refusedUnchecked reports whether err, from replacing t, is a refusal the
// kernel's access check would have reported first: the general path then
// does the write and reports the exact error (nothing was changed).
func (t target) refusedUnchecked(err error) bool {
	return t.unchecked && (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EROFS))
}

// writeDirect is writeFile's fast path; handled is false when the general
// path must do the write (nothing was changed then).
func (e *Engine) writeDirect(ctx context.Context, op, p string, content []byte) (created, handled bool, err error) {
	name := strings.TrimPrefix(p, "/")
	if name == "" {
		return false, false, nil
	}
	dir, base := splitName(name)
	dirfd, done, ok := e.direct.openDir(dir)
	if !ok {
		return false, false, nil
	}
	defer done()
	unlock := e.locks.lock(name)
	defer unlock()
	t, ok := inspectAt(dirfd, base)
	if !ok {
		return false, false, nil
	}
	if err := e.replaceAt(ctx, dirfd, base, content, t.perm); err != nil {
		if t.refusedUnchecked(err) {
			return false, false, nil
		}
		return false, true, e.fail(op, p, err)
	}
	return !t.exists, true, nil
}

// editDirect is Edit's fast path after the argument checks; handled is
// false when the general path must do the edit (nothing was changed then).
func (e *Engine) editDirect(ctx context.Context, p string, req backend.EditRequest) (res backend.EditResult, handled bool, err error) {
	name := strings.TrimPrefix(p, "/")
	if name == "" {
		return res, false, nil
	}
	dir, base := splitName(name)
	dirfd, done, ok := e.direct.openDir(dir)
	if !ok {
		return res, false, nil
	}
	defer done()
	unlock := e.locks.lock(name)
	defer unlock()
	t, ok := inspectAt(dirfd, base)
	if !ok || !t.exists || t.st.Size > e.cfg.writeCap {
		return res, false, nil
	}
	content, ok, err := readAt(ctx, dirfd, base, &t.st, e.cfg.writeCap)
	if err != nil {
		return res, true, e.fail("edit", p, err)
	}
	if !ok {
		return res, false, nil
	}
	var refused bool
	res, err = e.applyEdit(ctx, p, req, content, func(out []byte) error {
		err := e.replaceAt(ctx, dirfd, base, out, t.perm)
		refused = t.refusedUnchecked(err)
		return err
	})
	if refused {
		return backend.EditResult{}, false, nil
	}
	return res, true, err
}

// readAt reads the whole regular file base of dirfd, which must still be
// the file st describes, up to limit+1 bytes (more is the caller's
// too_large). ok is false when the file changed since st.
func readAt(ctx context.Context, dirfd int, base string, st *unix.Stat_t, limit int64) (b []byte, ok bool, err error) {
	f, now, err := openReadAt(dirfd, base, st)
	if err != nil {
		return nil, false, nil
	}
	defer f.Close()
	// The file as its fstat found it: the read stops at that size (no read
	// for the end), or one byte past the limit. A size of 0 may not be
	// the truth (procfs): such a file is read to its end or the limit.
	want := limit + 1
	if now.Size > 0 && now.Size <= limit {
		want = now.Size
	}
	b = make([]byte, 0, min(now.Size, limit)+1)
	for int64(len(b)) < want {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := f.Read(b[len(b):cap(b)])
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false, err
		}
		b = b[:len(b)+n]
	}
	return b, true, nil
}

// replaceAt is replace on the directory handle dirfd: the temp file is
// created there, written, given perm, synced when the engine syncs, and
// renamed over base; the directory is synced after the rename when the
// engine syncs. On any failure the temp file is removed.
func (e *Engine) replaceAt(ctx context.Context, dirfd int, base string, content []byte, perm fs.FileMode) (err error) {
	tmp := tempName(base)
	fd, err := sys.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &fs.PathError{Op: "open", Path: tmp, Err: err}
	}
	open := true
	defer func() {
		if open {
			sys.Close(fd)
		}
		if err != nil {
			sys.Unlinkat(dirfd, tmp, 0)
		}
	}()
	for rest := content; len(rest) > 0; {
		if err = ctx.Err(); err != nil {
			return err
		}
		n, werr := sys.Write(fd, rest[:min(len(rest), 4<<20)])
		if werr == unix.EINTR {
			continue
		}
		if werr != nil {
			return &fs.PathError{Op: "write", Path: tmp, Err: werr}
		}
		rest = rest[n:]
	}
	if err = sys.Fchmod(fd, uint32(perm)); err != nil {
		return &fs.PathError{Op: "chmod", Path: tmp, Err: err}
	}
	if e.cfg.sync {
		if err = unix.Fsync(fd); err != nil {
			return &fs.PathError{Op: "sync", Path: tmp, Err: err}
		}
	}
	open = false
	if err = sys.Close(fd); err != nil {
		return &fs.PathError{Op: "close", Path: tmp, Err: err}
	}
	if err = ctx.Err(); err != nil {
		return err
	}
	if err = sys.Renameat(dirfd, tmp, dirfd, base); err != nil {
		return &fs.PathError{Op: "rename", Path: tmp, Err: err}
	}
	if e.cfg.sync {
		// An O_PATH handle cannot be synced: open the directory itself.
		if dfd, derr := sys.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); derr == nil {
			_ = unix.Fsync(dfd)
			sys.Close(dfd)
		}
	}
	return nil
}

// openReadDirect is Read's fast path: the regular file at the normalized
// path p opened for reading (non-blocking, never following a symlink),
// after an fstatat that rejects anything but a regular file without
// opening it, and an fstat that checks it is still that file. The file is
// read through its descriptor alone (rawFile), since an os.File of it
// would cost a fcntl and a refused epoll_ctl. ok is false when the general
// path must open it (nothing was opened then).
func (e *Engine) openReadDirect(p string) (f io.ReadCloser, fi fs.FileInfo, ok bool) {
	name := strings.TrimPrefix(p, "/")
	if name == "" {
		return nil, nil, false
	}
	dir, base := splitName(name)
	dirfd, done, ok := e.direct.openDir(dir)
	if !ok {
		return nil, nil, false
	}
	defer done()
	var st unix.Stat_t
	if err := sys.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, nil, false
	}
	rf, now, err := openReadAt(dirfd, base, &st)
	if err != nil {
		return nil, nil, false
	}
	return rf, statInfo{name: base, st: now}, true
}

// openReadAt opens the regular file base of dirfd for reading, never
// following a symlink and non-blocking (a FIFO swapped in cannot hold the
// open), and checks with fstat that it is still the file want describes;
// it returns that fstat. A file that changed is errChanged.
func openReadAt(dirfd int, base string, want *unix.Stat_t) (rawFile, *unix.Stat_t, error) {
	fd, err := sys.Openat(dirfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, nil, &fs.PathError{Op: "open", Path: base, Err: err}
	}
	now, ok := sameInode(fd, want)
	if !ok || now.Mode&unix.S_IFMT != unix.S_IFREG {
		sys.Close(fd)
		return -1, nil, errChanged
	}
	return rawFile(fd), now, nil
}

// sameInode fstats fd and reports whether it is a file of want's type,
// device and inode.
func sameInode(fd int, want *unix.Stat_t) (*unix.Stat_t, bool) {
	var st unix.Stat_t
	ok := sys.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == want.Mode&unix.S_IFMT && st.Dev == want.Dev && st.Ino == want.Ino
	return &st, ok
}

// rawFile reads a regular file through its descriptor.
type rawFile int

func (f rawFile) Read(b []byte) (int, error) {
	for {
		n, err := sys.Read(int(f), b)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, &fs.PathError{Op: "read", Path: "", Err: err}
		case n == 0 && len(b) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (f rawFile) Close() error { return sys.Close(int(f)) }

// writeAccess asks the kernel whether this process may open base of dirfd
// for writing: faccessat2 with AT_EACCESS, which checks the fsuid and
// fsgid as an open does (the agent's sandbox user). It is faccessat2
// itself on purpose: unix.Faccessat emulates it from a stat and the euid
// when faccessat2 is missing or refused by seccomp, which would let a
// root-euid agent with a user's fsuid pass. Any error here, ENOSYS and
// EPERM included, sends the write to the general path, whose test open
// decides.
func writeAccess(dirfd int, base string) error {
	return sys.Faccessat2(dirfd, base, unix.W_OK, unix.AT_EACCESS|unix.AT_SYMLINK_NOFOLLOW)
}

// lsDirect is Ls's fast path when no component of p is a symlink: the
// directory reached one component at a time without following links
// (direct.openDir), its names read through one descriptor and each child
// lstat'ed with fstatat on the directory's handle, where the general path
// walks the tree again for each of its resolve, stat, open and lstats.
// handled is false when the general path must answer (a symlink, a
// missing or refused component, not a directory, the fast path off); the
// entries are the general path's, unsorted.
func (e *Engine) lsDirect(ctx context.Context, p string) (entries []backend.FileInfo, handled bool, err error) {
	name := strings.TrimPrefix(p, "/")
	if name == "" {
		name = "."
	}
	// Opened for reading: getdents and the entries' fstatat both use it.
	dirfd, done, ok := e.direct.openDirAs(name, unix.O_RDONLY)
	if !ok {
		return nil, false, nil
	}
	defer done()
	var names []string
	if err := listDirents(dirfd, func(name string, _ byte) { names = append(names, name) }); err != nil {
		return nil, true, e.fail("ls", p, err)
	}
	entries, err = e.lsInfo(ctx, p, names, func(n string) (fs.FileInfo, error) {
		var st unix.Stat_t
		if err := sys.Fstatat(dirfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, err
		}
		return statInfo{name: n, st: &st}, nil
	})
	return entries, true, err
}

// statInfo is an fs.FileInfo of an fstatat result, as os.Lstat would
// describe it.
type statInfo struct {
	name string
	st   *unix.Stat_t
}

func (s statInfo) Name() string       { return s.name }
func (s statInfo) Size() int64        { return s.st.Size }
func (s statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s statInfo) Sys() any           { return s.st }

func (s statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	}
	return m
}

// walkDirect is the fast path of a walk's start (glob, grep): the
// directory at the normalized path p reached one component at a time
// without following links (direct.openDir), as an fdDir, with its
// root-relative name, which is then resolve's own. ok is false when the
// general path must start the walk (a symlink, a missing or refused
// component, not a directory, the fast path off); done must be called
// when ok.
func (e *Engine) walkDirect(p string) (dir walkDir, name string, done func(), ok bool) {
	name = strings.TrimPrefix(p, "/")
	if name == "" {
		name = "."
	}
	fd, done, ok := e.direct.openDirAs(name, unix.O_RDONLY)
	if !ok {
		return nil, "", nil, false
	}
	return readableDir{fdDir(fd)}, name, done, true
}

// readableDir is an fdDir whose handle is open for reading (a walk's
// start): its entries are read through it, without a second open.
type readableDir struct{ fdDir }

func (d readableDir) entries() ([]dirEntry, error) {
	return direntries(func(each func(string, byte)) error { return listDirents(int(d.fdDir), each) })
}

// fdDir is a walkDir of an O_PATH directory handle, used through the
// *at system calls alone: no os.File or os.Root is made for a directory.
type fdDir int

func (d fdDir) entries() ([]dirEntry, error) {
	return direntries(func(each func(string, byte)) error { return readDirents(int(d), each) })
}

// direntries collects what list reports as dirEntries, typed by d_type.
func direntries(list func(each func(name string, typ byte)) error) ([]dirEntry, error) {
	var out []dirEntry
	err := list(func(name string, typ byte) {
		en := dirEntry{name: name, known: true}
		switch typ {
		case unix.DT_REG:
		case unix.DT_DIR:
			en.typ = fs.ModeDir
		case unix.DT_LNK:
			en.typ = fs.ModeSymlink
		case unix.DT_UNKNOWN:
			en.known = false
		default:
			en.typ = fs.ModeIrregular
		}
		out = append(out, en)
	})
	return out, err
}

func (d fdDir) lstat(name string) (fs.FileInfo, error) {
	var st unix.Stat_t
	if err := sys.Fstatat(int(d), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	return statInfo{name: name, st: &st}, nil
}

func (d fdDir) sub(name string, fi fs.FileInfo) (walkDir, error) {
	fd, err := openPath(int(d), name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	want, same := fi.Sys().(*unix.Stat_t)
	if same {
		_, same = sameInode(fd, want)
	}
	if !same {
		sys.Close(fd)
		return nil, errChanged
	}
	return fdDir(fd), nil
}

func (d fdDir) open(name string, fi fs.FileInfo) (io.ReadCloser, error) {
	want, isStat := fi.Sys().(*unix.Stat_t)
	if !isStat {
		return nil, errChanged
	}
	f, _, err := openReadAt(int(d), name, want)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (d fdDir) close() { sys.Close(int(d)) }

// readDirents lists the directory dirfd (an O_PATH handle will do) with
// getdents64 on a descriptor of its own, calling each with an entry's
// name and d_type, without "." and "..".
func readDirents(dirfd int, each func(name string, typ byte)) error {
	fd, err := sys.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: ".", Err: err}
	}
	defer sys.Close(fd)
	return listDirents(fd, each)
}

// listDirents is readDirents on fd itself, a directory open for reading.
func listDirents(fd int, each func(name string, typ byte)) error {
	buf := make([]byte, 8<<10)
	for {
		n, err := sys.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "getdents", Path: ".", Err: err}
		}
		if n <= 0 {
			return nil
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8,
		// then the NUL-terminated name.
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return &fs.PathError{Op: "getdents", Path: ".", Err: unix.EIO}
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); s != "." && s != ".." {
				each(s, b[18])
			}
			b = b[reclen:]
		}
	}
}
