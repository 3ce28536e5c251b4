package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

// chunkBytes is the size of one upload message (the wire contract's
// maximum chunk).
const chunkBytes = 1 << 20

// payload is files files of size bytes each of incompressible data,
// produced chunk by chunk from one random MiB so the client side never
// holds a whole file.
type payload struct {
	block []byte
	files int
	size  int64
}

func newPayload(files int, size int64) payload {
	block := make([]byte, chunkBytes)
	r := rand.NewChaCha8([32]byte{7})
	_, _ = r.Read(block)
	return payload{block: block, files: files, size: size}
}

// total is the bytes of all files.
func (p payload) total() int64 { return int64(p.files) * p.size }

// name is file i's name.
func (p payload) name(i int) string { return fmt.Sprintf("part%d.bin", i) }

// each calls f with consecutive chunks of one file.
func (p payload) each(f func(chunk []byte, last bool) error) error {
	for off := int64(0); off < p.size; off += chunkBytes {
		n := min(int64(chunkBytes), p.size-off)
		if err := f(p.block[:n], off+n == p.size); err != nil {
			return err
		}
	}
	return nil
}

// sum is the SHA-256 of all files' bytes in order.
func (p payload) sum() []byte {
	h := sha256.New()
	for range p.files {
		_ = p.each(func(c []byte, _ bool) error { h.Write(c); return nil })
	}
	return h.Sum(nil)
}

// runB7 moves the same bytes into and out of a sandbox through
// SandboxService (UploadFiles / DownloadFiles streams) and through the
// Engine API's archive endpoints (CopyToContainer / CopyFromContainer,
// what `docker cp` does), and samples this process's heap while ours run:
// the worker is in this process, so its growth is the worker's (plus the
// constant-size client side of the harness). The 100 MB of docs/benchmarks.md travel as
// two 50 MB files, since one item is capped at backend.ItemCap (64 MiB).
func runB7(ctx context.Context, e *env) ([]Row, error) {
	bx, err := e.newBox(ctx)
	if err != nil {
		return nil, err
	}
	defer e.dropBox(bx)
	w, cli := e.worker, e.docker
	p := newPayload(2, int64(e.scale(50_000_000, 8_000_000)))
	// Seven transfers each way: the median of three moved by a quarter between
	// runs on a quiet machine (docs/benchmarks.md, B7).
	reps := e.scale(7, 1)
	want := p.sum()
	const oursDir, baseDir = "/workspace/b7-ours", "/workspace/b7-base"

	upOurs := func(ctx context.Context) error { return uploadOurs(ctx, w.c, bx.id, oursDir, p) }
	downOurs := func(ctx context.Context, h hash.Hash) error { return downloadOurs(ctx, w.c, bx.id, oursDir, p, h) }
	upBase := func(ctx context.Context) error { return copyTo(ctx, cli, bx.cid, baseDir, p) }
	downBase := func(ctx context.Context, h hash.Hash) error { return copyFrom(ctx, cli, bx.cid, baseDir, p, h) }

	// Warm-up: one round trip each way, checking the bytes.
	for _, side := range []struct {
		name string
		up   func(context.Context) error
		down func(context.Context, hash.Hash) error
	}{{"SandboxService", upOurs, downOurs}, {"Engine API", upBase, downBase}} {
		if err := side.up(ctx); err != nil {
			return nil, fmt.Errorf("%s upload: %w", side.name, err)
		}
		h := sha256.New()
		if err := side.down(ctx, h); err != nil {
			return nil, fmt.Errorf("%s download: %w", side.name, err)
		}
		if !bytes.Equal(h.Sum(nil), want) {
			return nil, fmt.Errorf("%s: downloaded bytes differ from the uploaded ones", side.name)
		}
	}

	before := w.m.Transfers()
	var upO, upB, downO, downB []float64
	var upHeap, downHeap, rssGrowth int64
	for range reps {
		steps := []struct {
			into *[]float64
			f    func() error
			heap *int64
		}{
			{&upO, func() error { return upOurs(ctx) }, &upHeap},
			{&upB, func() error { return upBase(ctx) }, nil},
			{&downO, func() error { return downOurs(ctx, nil) }, &downHeap},
			{&downB, func() error { return downBase(ctx, nil) }, nil},
		}
		for _, s := range steps {
			var m *memWatch
			if s.heap != nil {
				m = startMemWatch()
			}
			t0 := time.Now()
			err := s.f()
			d := time.Since(t0)
			if m != nil {
				h, r := m.stop()
				*s.heap, rssGrowth = max(*s.heap, h), max(rssGrowth, r)
			}
			if err != nil {
				return nil, err
			}
			*s.into = append(*s.into, mb(p.total(), d))
		}
	}

	scale := fmt.Sprintf("%d MB as %d files", p.total()/1e6, p.files)
	up := summarize("B7", "upload "+scale, unitMBps, upO, true)
	upRatio := up.vsThroughput("CopyToContainer (tar)", summarize("", "", unitMBps, upB, true))
	up.Target = "≥ 1.0× baseline throughput"
	up.judge(upRatio >= 1)
	down := summarize("B7", "download "+scale, unitMBps, downO, true)
	downRatio := down.vsThroughput("CopyFromContainer (tar)", summarize("", "", unitMBps, downB, true))
	down.Target = "≥ 1.0× baseline throughput"
	down.judge(downRatio >= 1)
	after := w.m.Transfers()
	for _, r := range []*Row{&up, &down} {
		r.note("one UploadFiles/DownloadFiles stream, 1 MiB chunks; throughput per transfer, p95/p99 the slowest, max the fastest; "+
			"files whose bytes the worker moved through the agent's open file: %d, through the agent channel: %d (plumb_sandbox_transfers_total)",
			after.Lent-before.Lent, after.Channel-before.Channel)
	}
	growth := max(upHeap, downHeap)
	mem := Row{Scenario: "B7", Name: "worker heap growth during transfers", Unit: unitMiB, N: 2 * reps,
		P50: float64(growth) / (1 << 20), Target: "< 64 MiB"}
	mem.P95, mem.P99, mem.Max = mem.P50, mem.P50, mem.P50
	mem.judge(growth < 64<<20)
	mem.note("peak HeapInuse above the post-GC level, sampled every 5 ms (upload %.1f MiB, download %.1f MiB); worker and harness client share this process, the client streams from one 1 MiB block; "+
		"process RSS grew by at most %.1f MiB", float64(upHeap)/(1<<20), float64(downHeap)/(1<<20), float64(rssGrowth)/(1<<20))
	return []Row{up, down, mem}, nil
}

// uploadOurs streams p's files into dir through one UploadFiles stream.
func uploadOurs(ctx context.Context, c plumbv1.SandboxServiceClient, id, dir string, p payload) error {
	st, err := c.UploadFiles(ctx)
	if err != nil {
		return err
	}
	for i := range p.files {
		first := true
		err = p.each(func(chunk []byte, last bool) error {
			m := &plumbv1.UploadFilesRequest{Data: chunk, Eof: last}
			if first {
				m.Path, first = dir+"/"+p.name(i), false
				if i == 0 {
					m.SandboxId = id
				}
			}
			return st.Send(m)
		})
		if err != nil {
			break
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	res, err := st.CloseAndRecv()
	if err != nil {
		return err
	}
	rs := res.GetResults()
	if len(rs) != p.files {
		return fmt.Errorf("upload: %d results for %d files", len(rs), p.files)
	}
	for _, r := range rs {
		if r.GetError() != nil || r.GetBytesWritten() != p.size {
			return fmt.Errorf("upload result %v", r)
		}
	}
	return nil
}

// downloadOurs reads p's files from dir through DownloadFiles, counting
// (and hashing into h when set) the bytes.
func downloadOurs(ctx context.Context, c plumbv1.SandboxServiceClient, id, dir string, p payload, h hash.Hash) error {
	paths := make([]string, p.files)
	for i := range paths {
		paths[i] = dir + "/" + p.name(i)
	}
	st, err := c.DownloadFiles(ctx, &plumbv1.DownloadFilesRequest{SandboxId: id, Paths: paths})
	if err != nil {
		return err
	}
	var n int64
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if m.GetError() != nil {
			return fmt.Errorf("download %s: %s", m.GetPath(), m.GetError().GetMessage())
		}
		n += int64(len(m.GetData()))
		if h != nil {
			h.Write(m.GetData())
		}
	}
	if n != p.total() {
		return fmt.Errorf("downloaded %d bytes, want %d", n, p.total())
	}
	return nil
}

// copyTo is `docker cp` of a directory into the container: a tar stream
// of p's files under dir's base name, generated while it is sent, into
// dir's parent.
func copyTo(ctx context.Context, cli *client.Client, cid, dir string, p payload) error {
	parent, base := path.Split(dir)
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		now := time.Now()
		err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: base + "/", Mode: 0o755, Uid: 1000, Gid: 1000, ModTime: now})
		for i := 0; i < p.files && err == nil; i++ {
			err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: base + "/" + p.name(i), Size: p.size, Mode: 0o644, Uid: 1000, Gid: 1000, ModTime: now})
			if err == nil {
				err = p.each(func(c []byte, _ bool) error { _, err := tw.Write(c); return err })
			}
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	_, err := cli.CopyToContainer(ctx, cid, client.CopyToContainerOptions{DestinationPath: parent, Content: pr, AllowOverwriteDirWithFile: true})
	pr.CloseWithError(errors.New("copy ended"))
	return err
}

// copyFrom is `docker cp` of a directory out of the container:
// CopyFromContainer's tar stream, unpacked on the fly.
func copyFrom(ctx context.Context, cli *client.Client, cid, dir string, p payload, h hash.Hash) error {
	res, err := cli.CopyFromContainer(ctx, cid, client.CopyFromContainerOptions{SourcePath: dir})
	if err != nil {
		return err
	}
	defer res.Content.Close()
	tr := tar.NewReader(res.Content)
	var sink io.Writer = io.Discard
	if h != nil {
		sink = h
	}
	var n int64
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if hd.Typeflag != tar.TypeReg {
			continue
		}
		c, err := io.Copy(sink, tr)
		if err != nil {
			return err
		}
		n += c
	}
	if n != p.total() {
		return fmt.Errorf("copied %d bytes, want %d", n, p.total())
	}
	return nil
}

// memWatch samples heap and RSS until stopped.
type memWatch struct {
	heap0, rss0 int64
	done        chan struct{}
	wg          sync.WaitGroup
	peakHeap    int64
	peakRSS     int64
}

// startMemWatch collects garbage, notes the heap and RSS, and samples
// them every 5 ms.
func startMemWatch() *memWatch {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := &memWatch{heap0: int64(ms.HeapInuse), rss0: rss(), done: make(chan struct{})}
	m.peakHeap, m.peakRSS = m.heap0, m.rss0
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-m.done:
				return
			case <-t.C:
				runtime.ReadMemStats(&ms)
				m.peakHeap = max(m.peakHeap, int64(ms.HeapInuse))
				m.peakRSS = max(m.peakRSS, rss())
			}
		}
	}()
	return m
}

// stop ends sampling and returns the peak growth of heap and RSS.
func (m *memWatch) stop() (heap, rssGrowth int64) {
	close(m.done)
	m.wg.Wait()
	return m.peakHeap - m.heap0, m.peakRSS - m.rss0
}

// rss is this process's resident set size in bytes.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}
