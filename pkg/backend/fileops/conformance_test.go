package fileops_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend/backendtest"
	"github.com/plumbhq/plumb/pkg/backend/fileops"
)

// hostHarness returns a harness over a fresh engine rooted at a temp dir,
// with a sibling "outside" dir for H02, and the host-side hooks.
func hostHarness(t *testing.T, opts ...fileops.Option) (*backendtest.Harness, string) {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := fileops.New(root, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	host := func(p string) string { return filepath.Join(root, filepath.FromSlash(p)) }
	return &backendtest.Harness{
		Backend:   e,
		Caps:      []backendtest.Capability{backendtest.Symlink, backendtest.Mode, backendtest.Media, backendtest.Special},
		InProcess: true,
		Symlink: func(_ context.Context, p, target string) error {
			return os.Symlink(target, host(p))
		},
		Chmod: func(_ context.Context, p string, mode fs.FileMode) error {
			return os.Chmod(host(p), mode)
		},
		Mkfifo: func(_ context.Context, p string) error {
			return syscall.Mkfifo(host(p), 0o644)
		},
		Outside: backendtest.Outside{
			Abs: outside, Rel: "../outside", File: "passwd", Needle: "root",
			Exists: func(name string) bool {
				_, err := os.Lstat(filepath.Join(outside, name))
				return err == nil
			},
		},
	}, root
}

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) *backendtest.Harness {
		h, _ := hostHarness(t)
		return h
	})
}

// TestConformancePrefixed runs the suite mirrored under a directory, the
// way a Composite runs it under a route prefix, to prove the suite's own
// prefix handling.
func TestConformancePrefixed(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) *backendtest.Harness {
		h, root := hostHarness(t)
		if err := os.Mkdir(filepath.Join(root, "mnt"), 0o755); err != nil {
			t.Fatal(err)
		}
		h.Prefix = "/mnt"
		h.Outside.Rel = "../../outside"
		return h
	})
}

// TestConformanceWithoutSync runs the suite with the sandbox agent's
// durability (atomic rename, no fsync): the observable behaviour is the
// same.
func TestConformanceWithoutSync(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) *backendtest.Harness {
		h, _ := hostHarness(t, fileops.WithSync(false))
		return h
	})
}
