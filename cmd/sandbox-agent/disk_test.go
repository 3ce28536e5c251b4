package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDiskRefusesBadArguments: names that are not a sandbox id (a path
// among them), numbers that are not numbers and unknown verbs are refused
// with the usage, before anything is made.
func TestDiskRefusesBadArguments(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{},
		{"attach", dir},
		{"attach", dir, "../escape", "1048576", "256"},
		{"attach", dir, "a/b", "1048576", "256"},
		{"attach", dir, "", "1048576", "256"},
		{"attach", dir, ".hidden", "1048576", "256"},
		{"attach", dir, "sbx-a", "1MiB", "256"},
		{"attach", dir, "sbx-a", "1048576"},
		{"attach", dir, "vol-a", "1048576", "256", "1000"},
		{"attach", dir, "vol-a", "1048576", "256", "a:b"},
		{"attach", dir, "vol-a", "1048576", "256", "70000:1000"},
		{"attach", dir, "vol-a", "1048576", "256", "1000:1000", "extra"},
		{"detach", dir, "sbx-a", "extra"},
		{"format", dir, "sbx-a"},
	} {
		var out, errb bytes.Buffer
		if code := runDisk(args, &out, &errb); code != 2 {
			t.Errorf("disk %q: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("refused commands made %v", ents)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape.img")); err == nil {
		t.Fatal("a name with .. made a file outside DIR")
	}
}

// TestDiskAttachRefusesBadSize: a size under the minimum fails and leaves
// no image behind; detaching an image that does not exist succeeds.
func TestDiskAttachRefusesBadSize(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := runDisk([]string{"attach", dir, "sbx-a", "4096", "256"}, &out, &errb); code != 1 {
		t.Fatalf("attach of 4096 bytes: exit %d (%q)", code, errb.String())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a refused attach left %v", ents)
	}
	if code := runDisk([]string{"detach", dir, "sbx-a"}, &out, &errb); code != 0 {
		t.Fatalf("detach of nothing: exit %d (%q)", code, errb.String())
	}
}

// TestValidDiskName holds validDiskName to the pattern it replaced.
func TestValidDiskName(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
	for _, name := range []string{
		"", "a", "Z9", "sbx-w1-abc_DEF.9", ".hidden", "-a", "_a", "a/b", "../x", "a b", "a\x00", "é", "a\n",
		strings.Repeat("a", 128), strings.Repeat("a", 129), "a" + strings.Repeat("-", 127), "a" + strings.Repeat(".", 128),
	} {
		if got, want := validDiskName(name), pattern.MatchString(name); got != want {
			t.Errorf("validDiskName(%q) = %v, want %v", name, got, want)
		}
	}
}
