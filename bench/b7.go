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

// payload is size bytes of incompressible data, produced chunk by chunk
// from one random MiB so the client side never holds the whole file.
type payload struct {
	block []byte
	size  int64
}

func newPayload(size int64) payload {
	block := make([]byte, chunkBytes)
	r := rand.NewChaCha8([32]byte{7})
	_, _ = r.Read(block)
	return payload{block: block, size: size}
}

// each calls f with consecutive chunks of the payload.
func (p payload) each(f func(chunk []byte, last bool) error) error {
	for off := int64(0); off < p.size; off += chunkBytes {
		n := min(int64(chunkBytes), p.size-off)
		if err := f(p.block[:n], off+n == p.size); err != nil {
			return err
		}
	}
	return nil
}

// sum is the payload's SHA-256.
func (p payload) sum() []byte {
	h := sha256.New()
	_ = p.each(func(c []byte, _ bool) error { h.Write(c); return nil })
	return h.Sum(nil)
}

// runB7 moves the same bytes into and out of a sandbox through
// SandboxService (UploadFiles / DownloadFiles streams) and through the
// Engine API's archive endpoints (CopyToContainer / CopyFromContainer,
// what `docker cp` does), and samples this process's heap while ours run:
// the worker is in this process, so its growth is the worker's (plus the
// constant-size client side of the harness).
func runB7(ctx context.Context, e *env) ([]Row, error) {
	bx, err := e.newBox(ctx)
	if err != nil {
		return nil, err
	}
	defer e.dropBox(bx)
	w, cli := e.worker, e.docker
	size := int64(e.scale(48, 16)) << 20
	reps := e.scale(3, 1)
	p := newPayload(size)
	want := p.sum()
	const oursPath, basePath = "/workspace/b7-ours.bin", "/workspace/b7-base.bin"

	upOurs := func(ctx context.Context) error { return uploadOurs(ctx, w.c, bx.id, oursPath, p) }
	downOurs := func(ctx context.Context, h hash.Hash) error { return downloadOurs(ctx, w.c, bx.id, oursPath, size, h) }
	upBase := func(ctx context.Context) error { return copyTo(ctx, cli, bx.cid, basePath, p) }
	downBase := func(ctx context.Context, h hash.Hash) error { return copyFrom(ctx, cli, bx.cid, basePath, size, h) }

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

	var upO, upB, downO, downB []float64
	var heapGrowth, rssGrowth int64
	timed := func(f func() error) (float64, error) {
		t0 := time.Now()
		err := f()
		return mb(size, time.Since(t0)), err
	}
	measured := func(f func() error) (float64, error) {
		m := startMemWatch()
		v, err := timed(f)
		h, r := m.stop()
		heapGrowth, rssGrowth = max(heapGrowth, h), max(rssGrowth, r)
		return v, err
	}
	for range reps {
		steps := []struct {
			into *[]float64
			f    func() error
			mem  bool
		}{
			{&upO, func() error { return upOurs(ctx) }, true},
			{&upB, func() error { return upBase(ctx) }, false},
			{&downO, func() error { return downOurs(ctx, nil) }, true},
			{&downB, func() error { return downBase(ctx, nil) }, false},
		}
		for _, s := range steps {
			run := timed
			if s.mem {
				run = measured
			}
			v, err := run(s.f)
			if err != nil {
				return nil, err
			}
			*s.into = append(*s.into, v)
		}
	}

	scale := fmt.Sprintf("%d MiB (spec: 100 MB, scaled to the time budget)", size>>20)
	up := summarize("B7", "upload "+scale, unitMBps, upO, true)
	upRatio := up.vsThroughput("CopyToContainer (tar)", summarize("", "", unitMBps, upB, true))
	up.Target = "≥ 0.8× baseline throughput"
	up.judge(upRatio >= 0.8)
	down := summarize("B7", "download "+scale, unitMBps, downO, true)
	downRatio := down.vsThroughput("CopyFromContainer (tar)", summarize("", "", unitMBps, downB, true))
	down.Target = "≥ 0.8× baseline throughput"
	down.judge(downRatio >= 0.8)
	for _, r := range []*Row{&up, &down} {
		r.note("throughput per transfer; p95/p99 are the slowest transfers, max the fastest")
	}
	mem := Row{Scenario: "B7", Name: "worker heap growth during transfers", Unit: unitMiB, N: 2 * reps,
		P50: float64(heapGrowth) / (1 << 20), Target: "< 64 MiB", Verdict: verdictMiss}
	mem.P95, mem.P99, mem.Max = mem.P50, mem.P50, mem.P50
	mem.judge(heapGrowth < 64<<20)
	mem.note("peak HeapInuse above the post-GC level, sampled every 5 ms over every upload and download through SandboxService (worker and harness client share this process; the client streams from one 1 MiB block); "+
		"process RSS grew by at most %.1f MiB", float64(rssGrowth)/(1<<20))
	return []Row{up, down, mem}, nil
}

// uploadOurs streams p into path through UploadFiles.
func uploadOurs(ctx context.Context, c plumbv1.SandboxServiceClient, id, path string, p payload) error {
	st, err := c.UploadFiles(ctx)
	if err != nil {
		return err
	}
	first := true
	err = p.each(func(chunk []byte, last bool) error {
		m := &plumbv1.UploadFilesRequest{Data: chunk, Eof: last}
		if first {
			m.SandboxId, m.Path, first = id, path, false
		}
		return st.Send(m)
	})
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	res, err := st.CloseAndRecv()
	if err != nil {
		return err
	}
	if rs := res.GetResults(); len(rs) != 1 || rs[0].GetError() != nil || rs[0].GetBytesWritten() != p.size {
		return fmt.Errorf("upload result %v", rs)
	}
	return nil
}

// downloadOurs reads path through DownloadFiles, counting (and hashing
// into h when set) the bytes.
func downloadOurs(ctx context.Context, c plumbv1.SandboxServiceClient, id, path string, size int64, h hash.Hash) error {
	st, err := c.DownloadFiles(ctx, &plumbv1.DownloadFilesRequest{SandboxId: id, Paths: []string{path}})
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
			return fmt.Errorf("download %s: %s", path, m.GetError().GetMessage())
		}
		n += int64(len(m.GetData()))
		if h != nil {
			h.Write(m.GetData())
		}
	}
	if n != size {
		return fmt.Errorf("downloaded %d bytes, want %d", n, size)
	}
	return nil
}

// copyTo is `docker cp` into the container: a tar stream of one file
// through CopyToContainer, generated while it is sent.
func copyTo(ctx context.Context, cli *client.Client, cid, path string, p payload) error {
	dir, name := path[:strings.LastIndex(path, "/")], path[strings.LastIndex(path, "/")+1:]
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: p.size, Mode: 0o644, Uid: 1000, Gid: 1000, ModTime: time.Now()})
		if err == nil {
			err = p.each(func(c []byte, _ bool) error { _, err := tw.Write(c); return err })
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	_, err := cli.CopyToContainer(ctx, cid, client.CopyToContainerOptions{DestinationPath: dir, Content: pr})
	pr.CloseWithError(errors.New("copy ended"))
	return err
}

// copyFrom is `docker cp` out of the container: CopyFromContainer's tar
// stream, unpacked on the fly.
func copyFrom(ctx context.Context, cli *client.Client, cid, path string, size int64, h hash.Hash) error {
	res, err := cli.CopyFromContainer(ctx, cid, client.CopyFromContainerOptions{SourcePath: path})
	if err != nil {
		return err
	}
	defer res.Content.Close()
	tr := tar.NewReader(res.Content)
	if _, err := tr.Next(); err != nil {
		return err
	}
	var sink io.Writer = io.Discard
	if h != nil {
		sink = h
	}
	n, err := io.Copy(sink, tr)
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("copied %d bytes, want %d", n, size)
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
