package sandbox

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// untar of a workspace gives each entry its header's permission bits
// (whatever the umask), its time, the given owner, and makes links and
// FIFOs; an existing name is never overwritten.
func TestUntarWorkspace(t *testing.T) {
	mtime := time.Unix(1700000000, 0)
	entries := []struct {
		h    tar.Header
		body string
	}{
		{h: tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o750}},
		{h: tar.Header{Typeflag: tar.TypeDir, Name: "d/e/", Mode: 0o777}},
		{h: tar.Header{Typeflag: tar.TypeReg, Name: "d/f", Mode: 0o6777}, body: "hello"},
		{h: tar.Header{Typeflag: tar.TypeReg, Name: "empty", Mode: 0o600}},
		{h: tar.Header{Typeflag: tar.TypeFifo, Name: "d/fifo", Mode: 0o640}},
		{h: tar.Header{Typeflag: tar.TypeSymlink, Name: "escape", Linkname: "/etc/passwd", Mode: 0o777}},
		{h: tar.Header{Typeflag: tar.TypeLink, Name: "hard", Linkname: "d/f"}},
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		e.h.ModTime, e.h.Size = mtime, int64(len(e.body))
		if err := tw.WriteHeader(&e.h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()

	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o077)
	err := untar(bytes.NewReader(b.Bytes()), dir, os.Getuid(), os.Getgid(), true)
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]fs.FileMode{".": fs.ModeDir | 0o700, "d": fs.ModeDir | 0o750, "d/e": fs.ModeDir | 0o777, "d/f": 0o777, "empty": 0o600, "d/fifo": fs.ModeNamedPipe | 0o640, "escape": fs.ModeSymlink | 0o777} {
		st, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != want {
			t.Errorf("%s: mode %v, want %v", name, st.Mode(), want)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if int(sys.Uid) != os.Getuid() || int(sys.Gid) != os.Getgid() {
			t.Errorf("%s: owner %d:%d", name, sys.Uid, sys.Gid)
		}
		if name != "." && name != "escape" && !st.ModTime().Equal(mtime) {
			t.Errorf("%s: time %v, want %v", name, st.ModTime(), mtime)
		}
	}
	if got, _ := os.Readlink(filepath.Join(dir, "escape")); got != "/etc/passwd" {
		t.Errorf("symlink target %q", got)
	}
	f, _ := os.Stat(filepath.Join(dir, "d/f"))
	h, _ := os.Stat(filepath.Join(dir, "hard"))
	if !os.SameFile(f, h) {
		t.Error("the hard link is another file")
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "hard")); string(got) != "hello" {
		t.Errorf("content %q", got)
	}

	// The same tar again: every file exists, none is overwritten.
	if err := untar(bytes.NewReader(b.Bytes()), dir, os.Getuid(), os.Getgid(), true); err == nil {
		t.Error("a second extraction over the first succeeded")
	}
}
