//go:build linux

package fileops

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/testroot"
)

// TestDirectPathTakenOrDeclined checks which writes, edits and reads the
// direct path takes: plain paths to a missing or regular file, and none
// that needs resolution or an error (which it must leave unchanged for the
// os.Root path).
func TestDirectPathTakenOrDeclined(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a/b", "outside"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(root, "a/b/f.txt"), []byte("one\n"), 0o600))
	must(os.WriteFile(filepath.Join(root, "a/b/ro.txt"), []byte("ro\n"), 0o444))
	must(os.Symlink("a", filepath.Join(root, "link")))
	must(os.Symlink("f.txt", filepath.Join(root, "a/b/flink")))
	must(os.Mkdir(filepath.Join(root, "a/b/dir"), 0o755))
	e, err := New(root, WithSync(false))
	must(err)
	defer e.Close()
	ctx := context.Background()

	for _, tt := range []struct {
		path string
		want bool
	}{
		{"/a/b/f.txt", true},     // existing regular file
		{"/a/b/new.txt", true},   // missing file, parent exists
		{"/top.txt", true},       // in the root itself
		{"/a/b/ro.txt", false},   // no write bit: the general path refuses it
		{"/link/b/f.txt", false}, // a symlinked parent
		{"/a/b/flink", false},    // a symlink at the end
		{"/a/b/dir", false},      // a directory
		{"/a/missing/x", false},  // a missing parent
		{"/a/b/f.txt/x", false},  // a file as a parent
	} {
		_, handled, err := e.writeDirect(ctx, "write", tt.path, []byte("two\n"))
		if handled != tt.want || (handled && err != nil) {
			t.Errorf("writeDirect(%s): handled %v, err %v; want handled %v", tt.path, handled, err, tt.want)
		}
	}
	fi, err := os.Stat(filepath.Join(root, "a/b/f.txt"))
	must(err)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("a direct replace left mode %04o, want the old 0600", fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a/b/ro.txt")); string(b) != "ro\n" {
		t.Errorf("the read-only file holds %q after a declined direct write", b)
	}
	if _, err := e.Write(ctx, "/a/b/ro.txt", []byte("x")); backend.CodeOf(err) != backend.CodePermissionDenied {
		t.Errorf("Write of a 0444 file: %v, want permission_denied", err)
	}

	res, handled, err := e.editDirect(ctx, "/a/b/f.txt", backend.EditRequest{Path: "/a/b/f.txt", Old: "two", New: "three"})
	if !handled || err != nil || res.Occurrences != 1 {
		t.Errorf("editDirect: %+v, handled %v, err %v", res, handled, err)
	}
	if _, handled, _ := e.editDirect(ctx, "/a/b/flink", backend.EditRequest{Path: "/a/b/flink", Old: "three", New: "four"}); handled {
		t.Error("editDirect took a symlink")
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a/b/f.txt")); string(b) != "three\n" {
		t.Errorf("after the edits the file holds %q", b)
	}

	f, _, ok := e.openReadDirect("/a/b/f.txt")
	if !ok {
		t.Fatal("openReadDirect declined a regular file")
	}
	f.Close()
	for _, p := range []string{"/link/b/f.txt", "/a/b/flink", "/a/b/dir", "/a/b/none"} {
		if f, _, ok := e.openReadDirect(p); ok {
			f.Close()
			t.Errorf("openReadDirect(%s) took it", p)
		}
	}
	entries, err := os.ReadDir(filepath.Join(root, "a/b"))
	must(err)
	for _, de := range entries {
		if len(de.Name()) > len(tmpPrefix) && filepath.Ext(de.Name()) != ".txt" && de.Name() != "dir" && de.Name() != "flink" {
			t.Errorf("a temp file was left behind: %s", de.Name())
		}
	}
}

// TestLsDirectMatchesGeneral: where the fast path of ls answers (no
// symlink on the way to a directory), it lists exactly what the general
// path lists, every kind of entry included; elsewhere it declines.
func TestLsDirectMatchesGeneral(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "a/b/sub"), 0o750))
	must(os.WriteFile(filepath.Join(root, "a/b/f.txt"), []byte("one\n"), 0o640))
	must(os.WriteFile(filepath.Join(root, "a/b/x.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Symlink("f.txt", filepath.Join(root, "a/b/flink")))
	must(os.Symlink("nowhere", filepath.Join(root, "a/b/dangling")))
	must(syscall.Mkfifo(filepath.Join(root, "a/b/fifo"), 0o600))
	must(os.Symlink("a", filepath.Join(root, "link")))
	e, err := New(root, WithSync(false))
	must(err)
	defer e.Close()
	ctx := context.Background()

	for _, p := range []string{"/", "/a", "/a/b", "/a/b/sub"} {
		fast, handled, err := e.lsDirect(ctx, p)
		if !handled || err != nil {
			t.Fatalf("lsDirect(%s): handled %v, err %v", p, handled, err)
		}
		general, err := e.lsEntries(ctx, p)
		must(err)
		sortEntries(fast)
		sortEntries(general)
		if !reflect.DeepEqual(fast, general) {
			t.Errorf("ls %s:\nfast    %+v\ngeneral %+v", p, fast, general)
		}
	}
	for _, p := range []string{"/link/b", "/a/b/flink", "/a/b/f.txt", "/a/none"} {
		if _, handled, _ := e.lsDirect(ctx, p); handled {
			t.Errorf("lsDirect(%s) answered; the general path must", p)
		}
	}
	res, err := e.Ls(ctx, "/a/b")
	must(err)
	var kinds []backend.FileKind
	for _, en := range res.Entries {
		kinds = append(kinds, en.Kind)
	}
	want := []backend.FileKind{backend.KindSymlink, backend.KindFile, backend.KindOther, backend.KindSymlink, backend.KindDir, backend.KindFile}
	if !reflect.DeepEqual(kinds, want) {
		t.Errorf("Ls /a/b kinds %v, want %v (%+v)", kinds, want, res.Entries)
	}
}

func sortEntries(es []backend.FileInfo) {
	sort.Slice(es, func(i, j int) bool { return es[i].Path < es[j].Path })
}

// TestWalkDirectMatchesGeneral: glob and grep started from the fast path's
// handle (no symlink on the way to the directory) find exactly what the
// general path finds, with the fast path turned off on the same tree:
// subdirectories, symlinks (never followed), a FIFO, a skip dir, a
// pattern that prunes.
func TestWalkDirectMatchesGeneral(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"a/b/c", "a/skip/in", "a/empty"} {
		must(os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	for _, f := range []string{"a/x.go", "a/y.txt", "a/b/z.go", "a/b/c/deep.go", "a/b/c/deep.txt", "a/skip/in/hidden.go"} {
		must(os.WriteFile(filepath.Join(root, f), []byte("package x // needle\n"), 0o644))
	}
	must(os.Symlink("x.go", filepath.Join(root, "a/xlink.go")))
	must(os.Symlink("b", filepath.Join(root, "a/blink")))
	must(syscall.Mkfifo(filepath.Join(root, "a/b/fifo.go"), 0o600))
	e, err := New(root, WithSync(false), WithSkipDirs("/a/skip"))
	must(err)
	defer e.Close()
	ctx := context.Background()

	type query struct {
		glob backend.GlobRequest
		grep *backend.GrepRequest
	}
	queries := []query{
		{glob: backend.GlobRequest{Pattern: "*.go", Path: "/a"}},
		{glob: backend.GlobRequest{Pattern: "**/*.go", Path: "/a"}},
		{glob: backend.GlobRequest{Pattern: "b/**", Path: "/a"}},
		{glob: backend.GlobRequest{Pattern: "**/*", Path: "/"}},
		{glob: backend.GlobRequest{Pattern: "*", Path: "/a/empty"}},
		{grep: &backend.GrepRequest{Pattern: "needle", Path: "/a"}},
		{grep: &backend.GrepRequest{Pattern: "needle", Path: "/a", Glob: "**/*.go"}},
		{grep: &backend.GrepRequest{Pattern: "needle", Path: "/a/b/z.go"}},
	}
	run := func() []any {
		var out []any
		for _, q := range queries {
			if q.grep != nil {
				r, err := e.Grep(ctx, *q.grep)
				must(err)
				out = append(out, r)
				continue
			}
			r, err := e.Glob(ctx, q.glob)
			must(err)
			out = append(out, r)
		}
		return out
	}
	for _, p := range []string{"/", "/a", "/a/b"} {
		if _, _, done, ok := e.walkDirect(p); !ok {
			t.Fatalf("walkDirect(%s) declined", p)
		} else {
			done()
		}
	}
	for _, p := range []string{"/a/blink", "/a/x.go", "/a/none"} {
		if _, _, done, ok := e.walkDirect(p); ok {
			done()
			t.Errorf("walkDirect(%s) answered; the general path must", p)
		}
	}
	fast := run()
	e.direct.close() // every start now takes the general path
	if _, _, _, ok := e.walkDirect("/a"); ok {
		t.Fatal("the fast path still answers after close")
	}
	general := run()
	for i := range queries {
		if !reflect.DeepEqual(fast[i], general[i]) {
			t.Errorf("query %+v:\nfast    %+v\ngeneral %+v", queries[i], fast[i], general[i])
		}
	}
	if g := fast[1].(backend.GlobResult); len(g.Matches) != 3 {
		t.Errorf("**/*.go below /a matched %+v; want x.go, b/z.go, b/c/deep.go (no link, FIFO or skip dir)", g.Matches)
	}
}

// TestAnchors: a writable root becomes an anchor only when every directory
// above it is on a read-only file system, as a sandbox's workspace below
// its read-only image is; operations below an anchor start from it. The
// positive case needs a mount namespace of its own (root); the negative
// one runs anywhere.
func TestAnchors(t *testing.T) {
	t.Run("writable parents", func(t *testing.T) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "ws/sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		e, err := New(root, WithSync(false), WithWritableRoots("/ws", "/ws/sub", "/missing"))
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if len(e.direct.anchors) != 0 {
			t.Errorf("anchors %+v below a writable root: a rename above them could redirect them", e.direct.anchors)
		}
	})
	t.Run("read-only parents", func(t *testing.T) {
		testroot.Require(t, "for a mount namespace of its own")
		// The namespace is this goroutine's thread's alone; the thread
		// stays locked and exits with the goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			t.Fatalf("unshare: %v", err)
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			t.Fatalf("make mounts private: %v", err)
		}
		root := t.TempDir()
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(unix.Mount("tmpfs", root, "tmpfs", 0, "size=1m"))
		t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
		for _, d := range []string{"ws", "deep/ws", "rw", "real"} {
			must(os.MkdirAll(filepath.Join(root, d), 0o755))
		}
		must(os.Symlink("real", filepath.Join(root, "link")))
		for _, d := range []string{"ws", "deep/ws", "rw"} {
			must(unix.Mount("tmpfs", filepath.Join(root, d), "tmpfs", 0, "size=1m"))
		}
		must(os.Mkdir(filepath.Join(root, "rw/ws"), 0o755))
		must(unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""))
		e, err := New(root, WithSync(false), WithWritableRoots("/ws", "/deep/ws", "/rw/ws", "/link", "/none"))
		must(err)
		defer e.Close()
		if e.direct.fd != -1 {
			t.Fatalf("New opened the fast path's root handle (%d); the first operation should", e.direct.fd)
		}
		e.direct.once.Do(e.direct.open)
		var names []string
		for _, a := range e.direct.anchors {
			names = append(names, a.name)
		}
		// Longest first; /rw/ws lies below a writable mount, /link is a
		// symlink, /none is missing.
		if want := []string{"deep/ws", "ws"}; !reflect.DeepEqual(names, want) {
			t.Fatalf("anchors %q, want %q", names, want)
		}
		ctx := context.Background()
		for _, p := range []string{"/ws/a.txt", "/deep/ws/b/c.txt", "/rw/ws/d.txt"} {
			if _, err := e.Write(ctx, p, []byte("x\n")); err != nil {
				t.Fatalf("write %s: %v", p, err)
			}
			if r, err := e.Read(ctx, backend.ReadRequest{Path: p, Limit: 10}); err != nil || r.Content == "" {
				t.Fatalf("read %s: %+v, %v", p, r, err)
			}
		}
		if dir, rest := e.direct.start("ws/x/y"); dir != e.direct.anchors[1].fd || rest != "x/y" {
			t.Errorf("start(ws/x/y) = %d %q, want the ws anchor and x/y", dir, rest)
		}
		if dir, rest := e.direct.start("wsx/y"); dir != e.direct.fd || rest != "wsx/y" {
			t.Errorf("start(wsx/y) = %d %q, want the root and the whole name", dir, rest)
		}
		g, err := e.Glob(ctx, backend.GlobRequest{Pattern: "**/*.txt", Path: "/deep/ws"})
		if err != nil || len(g.Matches) != 1 || g.Matches[0].Path != "/deep/ws/b/c.txt" {
			t.Errorf("glob below an anchor: %+v, %v", g, err)
		}
	})
}

// TestOpenDirBothWays: openDirAs reaches the same directories with
// openat2 and with the walk one component at a time, refuses a symlink at
// any depth either way, and in O_RDONLY mode returns a handle getdents can
// read, the root's own included.
func TestOpenDirBothWays(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a/b/c/d", "x"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("b", filepath.Join(root, "a/lb")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../x", filepath.Join(root, "a/b/up")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "a/b/f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := New(root, WithSync(false))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	t.Cleanup(func() { noOpenat2.Store(false) })
	for _, walk := range []bool{false, true} {
		noOpenat2.Store(walk)
		for _, tt := range []struct {
			dir string
			ok  bool
		}{
			{".", true},
			{"a", true},
			{"a/b", true},
			{"a/b/c/d", true},
			{"a/lb", false},       // a symlink at the end
			{"a/lb/c", false},     // a symlink on the way
			{"a/b/up", false},     // a symlink out and back in
			{"a/b/f", false},      // a file
			{"a/b/none/c", false}, // missing
		} {
			for _, mode := range []int{unix.O_PATH, unix.O_RDONLY} {
				fd, done, ok := e.direct.openDirAs(tt.dir, mode)
				if ok != tt.ok {
					t.Errorf("walk %v, mode %#x: openDirAs(%s) ok %v, want %v", walk, mode, tt.dir, ok, tt.ok)
				}
				if !ok {
					continue
				}
				var got, want unix.Stat_t
				if err := unix.Fstat(fd, &got); err != nil {
					t.Fatal(err)
				}
				if err := unix.Stat(filepath.Join(root, tt.dir), &want); err != nil {
					t.Fatal(err)
				}
				if got.Ino != want.Ino || got.Dev != want.Dev {
					t.Errorf("walk %v: openDirAs(%s) opened inode %d, want %d", walk, tt.dir, got.Ino, want.Ino)
				}
				if mode == unix.O_RDONLY {
					if err := listDirents(fd, func(string, byte) {}); err != nil {
						t.Errorf("walk %v: getdents on openDirAs(%s, O_RDONLY): %v", walk, tt.dir, err)
					}
				}
				done()
			}
		}
		if walk != noOpenat2.Load() {
			t.Logf("this kernel has no openat2: both rounds walked")
		}
	}
}

// TestOwnWritable: the kernel's access check is skipped only for a file
// this process owns with the owner's write bit, and a replace refused for
// permission after a skip goes to the general path, any other error not.
func TestOwnWritable(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		mode os.FileMode
		want bool
	}{{0o644, true}, {0o600, true}, {0o444, false}, {0o464, false}} {
		name := filepath.Join(dir, tt.mode.String())
		if err := os.WriteFile(name, nil, tt.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(name, tt.mode); err != nil { // past the umask
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(name, &st); err != nil {
			t.Fatal(err)
		}
		if got := ownWritable(&st); got != tt.want {
			t.Errorf("ownWritable(%v) = %v, want %v", tt.mode, got, tt.want)
		}
		st.Uid++ // another owner's file
		if ownWritable(&st) {
			t.Errorf("ownWritable(%v) of another uid's file", tt.mode)
		}
	}
	refused := &os.PathError{Op: "open", Path: ".f.tmp", Err: unix.EROFS}
	for _, tt := range []struct {
		t    target
		err  error
		want bool
	}{
		{target{unchecked: true}, refused, true},
		{target{unchecked: true}, &os.PathError{Op: "rename", Path: ".f.tmp", Err: unix.EPERM}, true},
		{target{unchecked: true}, &os.PathError{Op: "write", Path: ".f.tmp", Err: unix.ENOSPC}, false},
		{target{unchecked: false}, refused, false},
		{target{unchecked: true}, nil, false},
	} {
		if got := tt.t.refusedUnchecked(tt.err); got != tt.want {
			t.Errorf("refusedUnchecked(unchecked %v, %v) = %v, want %v", tt.t.unchecked, tt.err, got, tt.want)
		}
	}
}
