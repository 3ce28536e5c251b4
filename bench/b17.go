package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// hibernatedTarget is issue 19 item 9's hibernated threads per worker.
const hibernatedTarget = 10_000

// runB17 measures what one hibernated box costs its worker: N boxes, each
// with one small file of its own (a thread's notes), are created and
// hibernated one by one on a worker with a local store, a state dir and
// max_sandboxes = N; then the worker's heap and RSS growth per hibernated
// record, the disk bytes per box (the store's manifest and chunk and the
// state dir's hibernation record, allocated blocks), and whether one more
// create succeeds (hibernated boxes count toward no max_sandboxes). From
// these and this machine's free disk it projects how many hibernated
// boxes the worker holds (available memory ÷ the memory per box is noted
// beside it).
func runB17(ctx context.Context, e *env) ([]Row, error) {
	store, dir, remove, err := dirStore()
	if err != nil {
		return nil, err
	}
	defer remove()
	n := e.scale(30, 4)
	stateDir, err := os.MkdirTemp("", "plumb-bench-state")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stateDir)
	w, stop, err := e.storeWorker(ctx, "benchhib", store, sandbox.Config{MaxSandboxes: n, StateDir: stateDir})
	if err != nil {
		return nil, err
	}
	defer stop()
	// One box made and dropped first, so one-time costs (the derived
	// image, the connection's buffers) are not counted per box.
	first, err := e.createWS(ctx, w)
	if err != nil {
		return nil, err
	}
	if _, err := w.c.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: first.id}); err != nil {
		return nil, err
	}
	settle := func() (heap, res int64) {
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapInuse), rss()
	}
	h0, r0 := settle()
	d0, err := storeUsage(dir)
	if err != nil {
		return nil, err
	}
	s0, err := storeUsage(stateDir)
	if err != nil {
		return nil, err
	}
	var hib samples
	for i := range n {
		bx, err := e.createWS(ctx, w)
		if err != nil {
			return nil, fmt.Errorf("box %d: %w", i+1, err)
		}
		if err := execOK(ctx, w, bx.id, "echo "+bx.id+" > notes.txt"); err != nil {
			return nil, fmt.Errorf("box %d: %w", i+1, err)
		}
		t0 := time.Now()
		if _, err := suspend(ctx, w, bx.id, plumbv1.SuspendMode_SUSPEND_MODE_HIBERNATE); err != nil {
			return nil, err
		}
		hib = append(hib, time.Since(t0))
	}
	h1, r1 := settle()
	d1, err := storeUsage(dir)
	if err != nil {
		return nil, err
	}
	s1, err := storeUsage(stateDir)
	if err != nil {
		return nil, err
	}
	hibernated := 0
	for _, in := range w.m.List(nil) {
		if in.State == sandbox.StateHibernated {
			hibernated++
		}
	}
	if hibernated != n || w.m.Hibernated() != n {
		return nil, fmt.Errorf("%d boxes hibernated (the worker counts %d), want %d", hibernated, w.m.Hibernated(), n)
	}
	// One more create on a worker whose max_sandboxes the hibernated
	// boxes would fill if they counted.
	counted := false
	extra, err := w.c.CreateSandbox(ctx, e.createRequest())
	switch {
	case status.Code(err) == codes.ResourceExhausted:
		counted = true
	case err != nil:
		return nil, fmt.Errorf("a create beside %d hibernated boxes: %w", n, err)
	default:
		if _, err := w.c.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: extra.GetSandbox().GetId()}); err != nil {
			return nil, err
		}
	}

	heapPer := float64(h1-h0) / float64(n)
	rssPer := float64(r1-r0) / float64(n)
	recPer := float64(s1.blocks-s0.blocks) / float64(n)
	diskPer := float64(d1.blocks-d0.blocks)/float64(n) + recPer
	manPer := float64(d1.manifestBytes-d0.manifestBytes) / float64(n)
	filesPer := float64(d1.files-d0.files+s1.files-s0.files) / float64(n)
	var free uint64
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return nil, err
	}
	free = st.Bavail * uint64(st.Bsize)
	avail := memAvailable()

	costRow := latencyRow("B17", fmt.Sprintf("hibernate a small workspace (%d boxes, one after another)", n), unitMs, hib)
	costRow.Target, costRow.Verdict = "— (info)", verdictInfo
	q := len(hib) / 4
	costRow.note("SuspendSandbox(HIBERNATE) of a box holding one small file of its own; first quarter p50 %.0f ms, last quarter p50 %.0f ms (a capture lists the tenant's manifests for its quota: it grows with the tenant's snapshots)",
		ms(hib[:max(q, 1)].p50()), ms(hib[len(hib)-max(q, 1):].p50()))

	heapRow := Row{Scenario: "B17", Name: "worker memory per hibernated box", Unit: unitMiB, N: n,
		P50: heapPer / (1 << 20), P95: heapPer / (1 << 20), P99: heapPer / (1 << 20), Max: heapPer / (1 << 20), Target: "— (info)", Verdict: verdictInfo}
	heapRow.note("HeapInuse after GC with %d hibernated boxes minus with none, divided by %d (%.1f KiB); RSS grew %.1f KiB per box; the record (sandbox id, settings, snapshot id) lives in the worker's memory",
		n, n, heapPer/1024, rssPer/1024)

	diskRow := Row{Scenario: "B17", Name: "disk bytes per hibernated box (small workspace: store and state dir)", Unit: unitMiB, N: n,
		P50: diskPer / (1 << 20), P95: diskPer / (1 << 20), P99: diskPer / (1 << 20), Max: diskPer / (1 << 20), Target: "— (info)", Verdict: verdictInfo}
	diskRow.note("allocated blocks per box in the local store's directory and the worker's state dir: %.1f KiB over %.1f files (manifest + the file's chunk + the hibernation record; the manifest alone %.0f bytes, the record's blocks %.1f KiB); a store on S3 pays the objects' bytes instead",
		diskPer/1024, filesPer, manPer, recPer/1024)

	byDisk := float64(free) / max(diskPer, 1)
	byMem := float64(avail) / max(heapPer, rssPer, 1)
	capRow := Row{Scenario: "B17", Name: "hibernated boxes one worker holds (projected)", Unit: unitCount, N: n,
		Target: fmt.Sprintf("≥ %d", hibernatedTarget)}
	// Judged by disk: a hibernated box holds no memory limit and no slot
	// of max_sandboxes; its record in the worker's memory is noted.
	capRow.P50 = byDisk
	capRow.P95, capRow.P99, capRow.Max = capRow.P50, capRow.P50, capRow.P50
	capRow.judge(capRow.P50 >= hibernatedTarget)
	memFirst := ""
	if byMem < byDisk {
		memFirst = ": memory would bound it first"
	}
	capRow.note("by the free disk of the store's file system (%.1f GiB free / %.1f KiB per box); the worker's memory would hold %.0f records (%.1f GiB available / %.1f KiB per box, an upper bound: the heap's growth over the whole series)%s",
		float64(free)/(1<<30), diskPer/1024, byMem, float64(avail)/(1<<30), max(heapPer, rssPer)/1024, memFirst)
	capRow.note("each hibernated box is recorded in the worker's state dir too (one file), so a restarted worker re-adopts it")
	onlyDisk := Row{Scenario: "B17", Name: "hibernated boxes bounded by disk only (not by max_sandboxes)", Unit: unitNoData,
		Target: "a create beside N hibernated boxes under max_sandboxes = N succeeds"}
	onlyDisk.judge(!counted)
	if counted {
		onlyDisk.note("with max_sandboxes = %d and %d boxes hibernated, one more CreateSandbox was RESOURCE_EXHAUSTED: hibernated boxes count toward max_sandboxes "+
			"(and their memory limits toward max_memory: with max_memory set, a worker holds at most max_memory ÷ a box's memory limit, e.g. 48 boxes of 512 MiB in 24 GiB); "+
			"unset (0, the default) both are unlimited", n, n)
	} else {
		onlyDisk.note("one more CreateSandbox beside %d hibernated boxes under max_sandboxes = %d succeeded: hibernated boxes count toward neither max_sandboxes nor max_memory (a wake reserves both again, and is RESOURCE_EXHAUSTED on a full worker)", n, n)
	}
	return []Row{costRow, heapRow, diskRow, capRow, onlyDisk}, nil
}

// usage is what a store directory holds.
type usage struct {
	blocks, manifestBytes int64 // allocated bytes; manifests' apparent bytes
	files                 int64
}

// storeUsage walks a local store's directory.
func storeUsage(dir string) (usage, error) {
	var u usage
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			u.blocks += st.Blocks * 512
		}
		if d.Type().IsRegular() {
			u.files++
			if strings.Contains(filepath.ToSlash(p), "/manifests/") {
				u.manifestBytes += fi.Size()
			}
		}
		return nil
	})
	return u, err
}

// memAvailable is /proc/meminfo's MemAvailable in bytes.
func memAvailable() int64 {
	kb, _ := strconv.ParseInt(strings.Fields(procField("/proc/meminfo", "MemAvailable") + " 0")[0], 10, 64)
	return kb * 1024
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
