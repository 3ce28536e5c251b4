package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestCPULimit(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"100000 100000\n", 1, true},
		{"50000 100000", 1, true},
		{"150000 100000", 2, true},
		{"400000 100000", 4, true},
		{"max 100000\n", 0, false},
		{"", 0, false},
		{"100000", 0, false},
		{"-1 100000", 0, false},
		{"100000 0", 0, false},
		{"x 100000", 0, false},
	} {
		if n, ok := cpuLimit(tt.in); n != tt.want || ok != tt.ok {
			t.Errorf("cpuLimit(%q) = %d, %v; want %d, %v", tt.in, n, ok, tt.want, tt.ok)
		}
	}
}

// TestReadSmall reads a cgroup-like file whole and fails on a missing one.
func TestReadSmall(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpu.max")
	if err := os.WriteFile(p, []byte("50000 100000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := readSmall(p); err != nil || got != "50000 100000\n" {
		t.Fatalf("readSmall = %q, %v", got, err)
	}
	if _, err := readSmall(p + ".missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v, want not exist", err)
	}
}
