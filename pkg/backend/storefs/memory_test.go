package storefs

import (
	"bytes"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
)

// TestReadMemory is the Store's version of the H07 memory bound. The
// conformance harness measures cumulative allocation, which the SQLite
// driver defeats (it returns every blob in a fresh slice, so a streaming
// read allocates as many bytes as it streams even though it holds one
// chunk at a time). This test measures what docs/file-tools.md §7 H7 bounds instead: the
// growth of the live heap during the read, sampled while it runs with the
// collector made eager.
func TestReadMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 100 MiB")
	}
	db, _ := openDB(t)
	b := newBackend(t, db, "mem")
	var buf bytes.Buffer
	for i := 1; i <= 1_000_000; i++ {
		fmt.Fprintf(&buf, "line %07d %s\n", i, strings.Repeat("x", 38))
	}
	if res, err := b.Upload(ctx, []backend.UploadItem{{Path: "/lines.txt", Content: buf.Bytes()}, {Path: "/one.txt", Content: bytes.Repeat([]byte("a"), 50<<20)}}); err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatal(err, res)
	}
	buf = bytes.Buffer{}

	defer debug.SetGCPercent(debug.SetGCPercent(5))
	for _, tc := range []struct {
		path           string
		offset, limit  int
		wantStart      int
		wantContentLen int
	}{
		{"/lines.txt", 500000, 10, 500001, 10*52 - 1},
		{"/one.txt", 0, backend.DefaultReadLimit, 1, backend.ReadByteBudget},
	} {
		var r backend.ReadResult
		var err error
		growth := peakHeapGrowth(func() {
			r, err = b.Read(ctx, backend.ReadRequest{Path: tc.path, Offset: tc.offset, Limit: tc.limit})
		})
		if err != nil || r.StartLine != tc.wantStart || len(r.Content) != tc.wantContentLen {
			t.Fatalf("read %s: start %d, %d bytes, %v", tc.path, r.StartLine, len(r.Content), err)
		}
		t.Logf("read %s: live heap grew by at most %d bytes", tc.path, growth)
		if growth > 8<<20 {
			t.Errorf("read %s: live heap grew by %d bytes, want < 8 MiB", tc.path, growth)
		}
	}
}

// peakHeapGrowth runs f and returns the largest growth of the heap's
// object bytes (live plus not yet swept) seen while it ran.
func peakHeapGrowth(f func()) int64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() int64 {
		metrics.Read(sample)
		return int64(sample[0].Value.Uint64())
	}
	runtime.GC()
	base := read()
	var peak atomic.Int64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		for {
			if v := read() - base; v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(done)
	<-stopped
	return peak.Load()
}
