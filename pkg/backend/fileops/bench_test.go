package fileops_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/fileops"
)

// benchTree builds a repository-like tree of 2,000 files (1,600 .go, 400
// .md) of about 4 KiB each in 40 packages of 5 levels, one file in ten
// (a .go one) holding "needle", and returns an engine over it.
func benchTree(b *testing.B) *fileops.Engine {
	b.Helper()
	root := b.TempDir()
	var body strings.Builder
	for i := range 100 {
		fmt.Fprintf(&body, "\tx%03d := compute(%d, \"some text\") // comment\n", i, i)
	}
	for i := range 2000 {
		dir := filepath.Join(root, fmt.Sprintf("pkg%02d", i%40), "sub", "deeper", fmt.Sprintf("leaf%d", i%3))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		name, content := fmt.Sprintf("f%04d.go", i), "package p\n\nfunc F() {\n"+body.String()+"}\n"
		if i%5 == 0 {
			name = fmt.Sprintf("f%04d.md", i)
		}
		if i%10 == 1 {
			content += "// needle\n"
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	e, err := fileops.New(root)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return e
}

func BenchmarkGrep(b *testing.B) {
	e := benchTree(b)
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		req  backend.GrepRequest
		want int
	}{
		{"literal", backend.GrepRequest{Pattern: "needle", Path: "/"}, 200},
		{"regex", backend.GrepRequest{Pattern: `^// ne+dle$`, Path: "/", Regex: true}, 200},
		{"literal_glob_go", backend.GrepRequest{Pattern: "needle", Path: "/", Glob: "*.go"}, 200},
	} {
		b.Run(tt.name, func(b *testing.B) {
			for b.Loop() {
				res, err := e.Grep(ctx, tt.req)
				if err != nil || len(res.Matches) != tt.want {
					b.Fatalf("grep: %d matches, %v", len(res.Matches), err)
				}
			}
			b.ReportMetric(2000, "files/op")
		})
	}
}

func BenchmarkGlob(b *testing.B) {
	e := benchTree(b)
	ctx := context.Background()
	for _, tt := range []struct {
		pattern string
		want    int
	}{
		{"**/*.go", 1600},
		{"*.md", 400},
		{"pkg0[0-4]/**/f*.go", 200},
	} {
		b.Run(strings.NewReplacer("/", "_", "*", "x").Replace(tt.pattern), func(b *testing.B) {
			for b.Loop() {
				res, err := e.Glob(ctx, backend.GlobRequest{Pattern: tt.pattern, Path: "/"})
				if err != nil || len(res.Matches) != tt.want {
					b.Fatalf("glob %s: %d matches, %v", tt.pattern, len(res.Matches), err)
				}
			}
		})
	}
}

// BenchmarkRead slices windows out of a 20 MiB, 400,000-line file through
// the engine (stat, open, sniff, stream, count to EOF).
func BenchmarkRead(b *testing.B) {
	root := b.TempDir()
	var content strings.Builder
	for i := range 400_000 {
		fmt.Fprintf(&content, "line %07d %s\n", i, strings.Repeat("y", 40))
	}
	if err := os.WriteFile(filepath.Join(root, "big.txt"), []byte(content.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	e, err := fileops.New(root)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	for _, tt := range []struct {
		name          string
		offset, limit int
	}{
		{"head_2000", 0, 2000},
		{"middle_100", 200_000, 100},
		{"tail_100", 399_900, 100},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.SetBytes(int64(content.Len()))
			b.ReportAllocs()
			for b.Loop() {
				r, err := e.Read(ctx, backend.ReadRequest{Path: "/big.txt", Offset: tt.offset, Limit: tt.limit})
				if err != nil || r.EndLine != tt.offset+tt.limit {
					b.Fatalf("read: %+v %v", r.EndLine, err)
				}
			}
		})
	}
}

// BenchmarkWrite measures one 4 KiB atomic write (temp file, rename),
// with the fsyncs (host-backed directories) and without them (the sandbox
// agent, fileops.WithSync(false)).
func BenchmarkWrite(b *testing.B) {
	for _, durable := range []bool{true, false} {
		b.Run(fmt.Sprintf("sync=%v", durable), func(b *testing.B) {
			e, err := fileops.New(b.TempDir(), fileops.WithSync(durable))
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			data := []byte(strings.Repeat("content\n", 512))
			ctx := context.Background()
			for b.Loop() {
				if _, err := e.Write(ctx, "/dir/file.txt", data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchWriteTarget is where BenchmarkAtomicWrite writes: a file three
// levels below the engine's root, as B1's /workspace/b1/write.txt is in a
// box. FILEOPS_BENCH_ROOT and FILEOPS_BENCH_PATH point it elsewhere (a
// box's root "/" and a path in its workspace volume, to measure the file
// system a box writes to).
func benchWriteTarget(b *testing.B) (root, path string) {
	root, path = os.Getenv("FILEOPS_BENCH_ROOT"), os.Getenv("FILEOPS_BENCH_PATH")
	if root == "" {
		root = b.TempDir()
	}
	if path == "" {
		path = "/workspace/b1/write.txt"
	}
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755); err != nil {
		b.Fatal(err)
	}
	return root, path
}

// BenchmarkAtomicWrite compares the engine's 4 KiB atomic write and edit
// (without fsync, as in a box) with the floor of any atomic write: a plain
// create-temp, write, rename of the same bytes in the same directory.
func BenchmarkAtomicWrite(b *testing.B) {
	var buf strings.Builder
	for i := range 64 {
		fmt.Fprintf(&buf, "line %04d %s\n", i+1, strings.Repeat("x", 53))
	}
	data := []byte(buf.String())
	ctx := context.Background()
	b.Run("plain", func(b *testing.B) {
		root, path := benchWriteTarget(b)
		target := filepath.Join(root, path)
		for b.Loop() {
			f, err := os.CreateTemp(filepath.Dir(target), ".tmp")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := f.Write(data); err != nil {
				b.Fatal(err)
			}
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
			if err := os.Rename(f.Name(), target); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("engine-write", func(b *testing.B) {
		root, path := benchWriteTarget(b)
		e, err := fileops.New(root, fileops.WithSync(false))
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		for b.Loop() {
			if _, err := e.Write(ctx, path, data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("engine-edit", func(b *testing.B) {
		root, path := benchWriteTarget(b)
		e, err := fileops.New(root, fileops.WithSync(false))
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		if _, err := e.Write(ctx, path, data); err != nil {
			b.Fatal(err)
		}
		old, nu := "line 0032 x", "line 0032 y"
		for b.Loop() {
			if _, err := e.Edit(ctx, backend.EditRequest{Path: path, Old: old, New: nu}); err != nil {
				b.Fatal(err)
			}
			old, nu = nu, old
		}
	})
	b.Run("engine-read", func(b *testing.B) {
		root, path := benchWriteTarget(b)
		e, err := fileops.New(root, fileops.WithSync(false))
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		if _, err := e.Write(ctx, path, data); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := e.Read(ctx, backend.ReadRequest{Path: path}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
