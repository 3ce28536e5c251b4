package storefs

import (
	"fmt"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
)

func BenchmarkWrite(b *testing.B) {
	db, err := Open(b.TempDir() + "/bench.db")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	s, _ := NewBackend(db, []string{"bench"})
	content := []byte("hello\nworld\n")
	for i := 0; b.Loop(); i++ {
		if _, err := s.Write(ctx, fmt.Sprintf("/d%d/f%d.txt", i%100, i%1000), content); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRead(b *testing.B) {
	db, err := Open(b.TempDir() + "/bench.db")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	s, _ := NewBackend(db, []string{"bench"})
	if _, err := s.Write(ctx, "/notes.md", []byte("# notes\n\n- one\n- two\n")); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Read(ctx, backend.ReadRequest{Path: "/notes.md", Limit: backend.DefaultReadLimit}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLs(b *testing.B) {
	db, err := Open(b.TempDir() + "/bench.db")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	s, _ := NewBackend(db, []string{"bench"})
	var items []backend.UploadItem
	for i := range 2000 {
		items = append(items, backend.UploadItem{Path: fmt.Sprintf("/big/sub%d/f%d", i%20, i)})
	}
	items = append(items, backend.UploadItem{Path: "/top.txt"})
	if _, err := s.Upload(ctx, items); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if res, err := s.Ls(ctx, "/"); err != nil || len(res.Entries) != 2 {
			b.Fatal(res, err)
		}
	}
}
