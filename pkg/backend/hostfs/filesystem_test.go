package hostfs_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/backendtest"
	"github.com/plumbhq/plumb/pkg/backend/hostfs"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) *backendtest.Harness {
		base := t.TempDir()
		root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
		b, err := hostfs.New(root, hostfs.WithCreate())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		if err := os.Mkdir(outside, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(outside, "passwd"), []byte("root:x:0:0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		host := func(p string) string { return filepath.Join(root, filepath.FromSlash(p)) }
		return &backendtest.Harness{
			Backend:   b,
			Caps:      []backendtest.Capability{backendtest.Symlink, backendtest.Mode, backendtest.Media, backendtest.Special},
			InProcess: true,
			Symlink:   func(_ context.Context, p, target string) error { return os.Symlink(target, host(p)) },
			Chmod:     func(_ context.Context, p string, m fs.FileMode) error { return os.Chmod(host(p), m) },
			Mkfifo:    func(_ context.Context, p string) error { return syscall.Mkfifo(host(p), 0o644) },
			Outside: backendtest.Outside{
				Abs: outside, Rel: "../outside", File: "passwd", Needle: "root",
				Exists: func(name string) bool {
					_, err := os.Lstat(filepath.Join(outside, name))
					return err == nil
				},
			},
		}
	})
}

func TestMaxFileSize(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"small.txt": "needle\n", "big.txt": "needle and much more text\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := hostfs.New(dir, hostfs.WithMaxFileSize(10))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if _, err := b.Read(ctx, backend.ReadRequest{Path: "/big.txt", Limit: 10}); backend.CodeOf(err) != backend.CodeTooLarge {
		t.Errorf("read over max_file_size: %v, want too_large", err)
	}
	g, err := b.Grep(ctx, backend.GrepRequest{Pattern: "needle", Path: "/"})
	if err != nil || len(g.Matches) != 1 || g.Matches[0].Path != "/small.txt" || g.FilesUnreadable != 1 {
		t.Errorf("grep = %+v, %v; want /small.txt only, one file skipped", g, err)
	}
}

func TestNew(t *testing.T) {
	dir := t.TempDir()
	if _, err := hostfs.New(filepath.Join(dir, "missing")); err == nil {
		t.Errorf("New on a missing dir succeeded")
	}
	f := filepath.Join(dir, "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := hostfs.New(f); err == nil {
		t.Errorf("New on a file succeeded")
	}
	b, err := hostfs.New(filepath.Join(dir, "a", "b"), hostfs.WithCreate())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Dir() != filepath.Join(dir, "a", "b") || backend.Home(b) != "/" {
		t.Errorf("Dir %q, home %q", b.Dir(), backend.Home(b))
	}
	if _, ok := any(b).(backend.Executor); ok {
		t.Errorf("the Filesystem backend must not execute")
	}
}
