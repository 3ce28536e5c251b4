package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestCount: count counts every file, directory and link once (a link to
// "/" is not followed), stops one past its limit, and says -1 for a
// directory it cannot open.
func TestCount(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"a", "a/b"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"x", "a/y", "a/b/z"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/", filepath.Join(dir, "a/root")); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if rc := runCount([]string{dir, dir + ":3", filepath.Join(dir, "missing")}, &out, &errs); rc != 0 {
		t.Fatalf("exit %d: %s", rc, errs.String())
	}
	// ., a, a/b, x, a/y, a/b/z, a/root
	if got, want := out.String(), "7\n4\n-1\n"; got != want {
		t.Fatalf("counts %q, want %q", got, want)
	}
	if rc := runCount([]string{dir + ":many"}, &out, &errs); rc != 2 {
		t.Fatalf("a bad limit: exit %d, want 2", rc)
	}
}
