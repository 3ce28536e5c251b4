//go:build linux

package fileops

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"syscall"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
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
