package boxagent

import (
	"io"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/plumbhq/plumb/pkg/backend/fileops"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

func pipeCap(t *testing.T, f *os.File) int {
	t.Helper()
	n, err := unix.FcntlInt(f.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func osPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// TestTunePipes checks that the channel's pipes are grown while a transfer
// or a streaming execute is open, and shrunk back once none is (retried
// while a pipe still holds more than its old size).
func TestTunePipes(t *testing.T) {
	inR, _ := osPipe(t)
	outR, outW := osPipe(t)
	def := pipeCap(t, inR)
	s := &server{in: inR, out: outW, uploads: map[string]*fileops.TempFile{}, downloads: map[string]*fileops.DownloadFile{}}
	check := func(step string, in, out int) {
		t.Helper()
		if got := pipeCap(t, inR); got != in {
			t.Errorf("%s: stdin pipe %d bytes, want %d", step, got, in)
		}
		if got := pipeCap(t, outR); got != out {
			t.Errorf("%s: stdout pipe %d bytes, want %d", step, got, out)
		}
	}
	s.tunePipes()
	check("idle", def, def)
	s.uploads["u1"] = nil
	s.tunePipes()
	check("upload open", bulkPipeBytes, bulkPipeBytes)
	s.downloads["d2"] = nil
	delete(s.uploads, "u1")
	s.tunePipes()
	check("download open", bulkPipeBytes, bulkPipeBytes)
	delete(s.downloads, "d2")
	s.streams = 1
	s.tunePipes()
	check("streaming execute", bulkPipeBytes, bulkPipeBytes)

	// The stdout pipe holds more than its old size: it stays large.
	if _, err := outW.Write(make([]byte, 2*def)); err != nil {
		t.Fatal(err)
	}
	s.streams = 0
	s.tunePipes()
	check("idle, output pending", def, bulkPipeBytes)
	if _, err := io.ReadFull(outR, make([]byte, 2*def)); err != nil {
		t.Fatal(err)
	}
	s.tunePipes()
	check("idle, drained", def, def)
}

// TestSetPipeSizeNotAPipe checks that anything but an *os.File pipe is
// left alone.
func TestSetPipeSizeNotAPipe(t *testing.T) {
	pr, pw := io.Pipe()
	defer pr.Close()
	defer pw.Close()
	if old, now := setPipeSize(pr, bulkPipeBytes); old != 0 || now != 0 {
		t.Errorf("io.Pipe: %d, %d; want 0, 0", old, now)
	}
	f, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if old, now := setPipeSize(f, bulkPipeBytes); old != 0 || now != 0 {
		t.Errorf("regular file: %d, %d; want 0, 0", old, now)
	}
}

// TestChunkPool checks that only chunk-sized buffers are recycled and that
// a small or a larger-than-chunk payload gets a buffer of its own size.
func TestChunkPool(t *testing.T) {
	for _, tc := range []struct {
		n      int
		pooled bool
	}{
		{0, false},
		{10, false},
		{pooledBytes - 1, false},
		{pooledBytes, true},
		{agentproto.ChunkBytes, true},
		{agentproto.ChunkBytes + 1, false},
	} {
		b := getChunk(tc.n)
		if len(b) != tc.n || (cap(b) == agentproto.ChunkBytes) != tc.pooled {
			t.Errorf("getChunk(%d): len %d cap %d, want pooled %v", tc.n, len(b), cap(b), tc.pooled)
		}
		putChunk(b)
	}
	putChunk(nil)
	putChunk(make([]byte, 5))
}
