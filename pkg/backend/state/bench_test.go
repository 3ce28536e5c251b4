package state

import (
	"fmt"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
)

func BenchmarkWrite(b *testing.B) {
	s := New()
	content := []byte("hello\nworld\n")
	for i := 0; b.Loop(); i++ {
		if _, err := s.Write(ctx, fmt.Sprintf("/d%d/f%d.txt", i%100, i%1000), content); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEdit(b *testing.B) {
	s := New()
	if _, err := s.Write(ctx, "/e.txt", []byte("alpha beta\n")); err != nil {
		b.Fatal(err)
	}
	olds := []string{"alpha", "gamma"}
	for i := 0; b.Loop(); i++ {
		if _, err := s.Edit(ctx, backend.EditRequest{Path: "/e.txt", Old: olds[i%2], New: olds[(i+1)%2]}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGrep(b *testing.B) {
	s := New()
	var items []backend.UploadItem
	for i := range 1000 {
		items = append(items, backend.UploadItem{Path: fmt.Sprintf("/src/p%d/f%d.go", i%10, i), Content: []byte("package x\n\nfunc F() {}\n// needle\n")})
	}
	if _, err := s.Upload(ctx, items); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Grep(ctx, backend.GrepRequest{Pattern: "needle", Path: "/", Glob: "*.go"}); err != nil {
			b.Fatal(err)
		}
	}
}
