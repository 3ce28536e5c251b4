package snapshot_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/plumbhq/plumb/pkg/snapshot"
	"github.com/plumbhq/plumb/pkg/snapshot/snapshottest"
)

// WriteTar streams a snapshot: a chunk that fails mid-stream is
// CodeDataLoss naming its file, after w has received the files before it
// whole, and of the failing file only the chunks verified before it (no
// end-of-archive marker), and no fetch outlives the call.
func TestWriteTarChunkFailingMidStream(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := t.TempDir()
	store, err := snapshot.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := snapshot.NewRepo(store, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	files := []snapshottest.File{
		{Name: "a", Type: tar.TypeReg, Mode: 0o644, Data: snapshottest.Random(2*snapshot.ChunkSize + 7)},
		{Name: "b", Type: tar.TypeReg, Mode: 0o644, Data: snapshottest.Random(3 * snapshot.ChunkSize)},
		{Name: "c", Type: tar.TypeReg, Mode: 0o644, Data: snapshottest.Random(3*snapshot.ChunkSize + 1)},
		{Name: "d", Type: tar.TypeReg, Mode: 0o644, Data: []byte("after\n")},
	}
	m, err := r.Capture(ctx, snapshot.Meta{Tenant: "acme"}, bytes.NewReader(snapshottest.Tar(t, "workspace", files)), "workspace", 0)
	if err != nil {
		t.Fatal(err)
	}
	var hash string
	for _, e := range m.Entries {
		if e.Path == "c" {
			hash = e.Chunks[1].Hash
		}
	}
	p := filepath.Join(dir, "chunks", filepath.FromSlash(snapshot.ChunkKey("acme", hash)))
	good, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		chunk []byte // nil: missing
	}{
		{"corrupt", append(append([]byte(nil), good[:len(good)/2]...), append([]byte{good[len(good)/2] ^ 0x55}, good[len(good)/2+1:]...)...)},
		{"truncated", good[:len(good)-10]},
		{"missing", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.chunk == nil {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(p, tc.chunk, 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.WriteFile(p, good, 0o600) })
			man, err := r.Get(ctx, "acme", m.ID)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err = r.WriteTar(ctx, man, &out, 1000, 1000)
			if snapshot.CodeOf(err) != snapshot.CodeDataLoss || !strings.Contains(err.Error(), `"c"`) {
				t.Fatalf("WriteTar: %v, want data loss naming c", err)
			}
			// The prefix: a and b whole, then c's first chunk, cut short
			// (a reader sees an unexpected end, never a complete tar).
			got := map[string][]byte{}
			tr := tar.NewReader(&out)
			var end error
			for end == nil {
				var h *tar.Header
				if h, end = tr.Next(); end == nil {
					got[h.Name], end = io.ReadAll(tr)
				}
			}
			if !errors.Is(end, io.ErrUnexpectedEOF) {
				t.Errorf("the prefix ends with %v, want an unexpected EOF", end)
			}
			for _, f := range files[:2] {
				if !bytes.Equal(got[f.Name], f.Data) {
					t.Errorf("file %s: %d bytes in the prefix, want all %d", f.Name, len(got[f.Name]), len(f.Data))
				}
			}
			if len(got["c"]) != snapshot.ChunkSize {
				t.Errorf("c: %d bytes in the prefix, want its first (verified) chunk only", len(got["c"]))
			}
			if _, ok := got["d"]; ok {
				t.Error("the prefix holds d, written after the failing chunk")
			}
		})
	}
	// Good again: the whole tar, every file.
	var out bytes.Buffer
	if _, err := r.Restore(ctx, "acme", m.ID, &out, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&out)
	n := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			n++
		}
	}
	if n != len(files) {
		t.Errorf("%d files restored, want %d", n, len(files))
	}
}

// A writer that fails stops WriteTar with its error (not data loss), and
// the fetches read ahead end with it.
func TestWriteTarWriterFails(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	store, err := snapshot.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, err := snapshot.NewRepo(store, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	files := []snapshottest.File{{Name: "a", Type: tar.TypeReg, Mode: 0o644, Data: snapshottest.Random(8 * snapshot.ChunkSize)}}
	m, err := r.Capture(ctx, snapshot.Meta{Tenant: "acme"}, bytes.NewReader(snapshottest.Tar(t, "workspace", files)), "workspace", 0)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	stop := errors.New("the reader went away")
	go func() {
		_, _ = io.CopyN(io.Discard, pr, snapshot.ChunkSize)
		pr.CloseWithError(stop)
	}()
	if err := r.WriteTar(ctx, m, pw, 0, 0); !errors.Is(err, stop) || snapshot.CodeOf(err) == snapshot.CodeDataLoss {
		t.Fatalf("WriteTar into a closed pipe: %v, want %v", err, stop)
	}
}
