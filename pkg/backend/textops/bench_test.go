package textops

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
)

// millionLines is a 1,000,000-line input (about 50 MiB), built once.
var millionLines = func() []byte {
	var b bytes.Buffer
	for i := range 1_000_000 {
		fmt.Fprintf(&b, "%07d the quick brown fox jumps over the lazy dog\n", i)
	}
	return b.Bytes()
}()

func BenchmarkSliceLines(b *testing.B) {
	b.SetBytes(int64(len(millionLines)))
	b.ReportAllocs()
	for b.Loop() {
		res, err := SliceLines(bytes.NewReader(millionLines), 500000, 2000, true)
		if err != nil || res.StartLine != 500001 || *res.TotalLines != 1_000_000 {
			b.Fatalf("%v %+v", err, res.StartLine)
		}
	}
}

func BenchmarkGrepLiteral(b *testing.B) {
	content := millionLines[:8<<20] // 8 MiB, about 160,000 lines
	m, err := CompileMatcher("lazy cat", false)
	if err != nil {
		b.Fatal(err)
	}
	hits, _ := CompileMatcher("0012345 the", false)
	for _, bc := range []struct {
		name string
		m    *Matcher
		want int
	}{{"no match", m, 0}, {"one match", hits, 1}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(content)))
			b.ReportAllocs()
			for b.Loop() {
				got, _, err := bc.m.Scan(context.Background(), bytes.NewReader(content), 0)
				if err != nil || len(got) != bc.want {
					b.Fatalf("%v %d", err, len(got))
				}
			}
		})
	}
}

func BenchmarkGrepRegex(b *testing.B) {
	content := millionLines[:8<<20]
	m, err := CompileMatcher(`lazy (cat|cow)$`, true)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(content)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := m.Scan(context.Background(), bytes.NewReader(content), 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGlobMatch(b *testing.B) {
	paths := []string{
		"src/main.go", "src/internal/server/handler.go", "README.md", ".github/workflows/ci.yml",
		"vendor/github.com/x/y/z.go", "docs/a/b/c/d/e.txt", "pkg/backend/textops/glob_test.go",
	}
	for _, p := range []string{"*.go", "**/*.go", "src/**/*_test.go", "{src,pkg}/**/*.{go,md}", "[a-z]*/?*/**/[!.]*.go"} {
		g, err := CompileGlob(p)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(strings.NewReplacer("/", "|").Replace(p), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, path := range paths {
					g.Match(path)
				}
			}
		})
	}
}
