package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
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

// TestDropOwnEnv removes exactly what the worker's marker names, and the
// marker; without a marker the environment is left as it is.
func TestDropOwnEnv(t *testing.T) {
	for _, tt := range []struct {
		name       string
		set        map[string]string
		gone, kept []string
	}{
		{"worker's GOMAXPROCS", map[string]string{"GOMAXPROCS": "1", agentproto.OwnEnv: "GOMAXPROCS", "A": "x"}, []string{"GOMAXPROCS", agentproto.OwnEnv}, []string{"A"}},
		{"no marker keeps the image's", map[string]string{"GOMAXPROCS": "4", "A": "x"}, nil, []string{"GOMAXPROCS", "A"}},
		{"several names", map[string]string{"B": "1", "C": "2", agentproto.OwnEnv: "B,C", "A": "x"}, []string{"B", "C", agentproto.OwnEnv}, []string{"A"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.set {
				t.Setenv(k, v)
			}
			dropOwnEnv()
			for _, k := range tt.gone {
				if v, ok := os.LookupEnv(k); ok {
					t.Errorf("%s=%q is still set", k, v)
				}
			}
			for _, k := range tt.kept {
				if os.Getenv(k) != tt.set[k] {
					t.Errorf("%s=%q, want %q", k, os.Getenv(k), tt.set[k])
				}
			}
		})
	}
}
