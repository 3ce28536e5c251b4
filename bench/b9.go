package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"github.com/plumbhq/plumb/pkg/backend"
)

// runB9 is density: it creates idle sandboxes one after another, up to
// 200 (8 in quick mode) or until its share of the time budget is spent,
// and reports how many were live at once, what each costs the worker
// in this process (heap after GC, RSS, goroutines), what the processes
// plumb runs inside each box hold (boxRows), and the sum of the two.
func runB9(ctx context.Context, e *env) ([]Row, error) {
	if _, err := e.sandboxWorker(ctx); err != nil {
		return nil, err
	}
	want := e.scale(200, 8)
	// Creation stops early enough to leave a quarter of the scenario's
	// time (at most 15 s) for the deletes.
	stopAt := time.Now().Add(75 * time.Second)
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		stopAt = time.Now().Add(left - min(left/4, 15*time.Second))
	}
	settle := func() (heap, res int64, gr int) {
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapInuse), rss(), runtime.NumGoroutine()
	}
	// One sandbox first, so one-time costs (image derivation, the gRPC
	// connection's buffers) are not counted per sandbox.
	first, err := e.newBox(ctx)
	if err != nil {
		return nil, err
	}
	defer e.dropBox(first)
	h0, r0, g0 := settle()
	var boxes []*box
	defer func() { dropAll(e, boxes) }()
	var created samples
	for len(boxes) < want && time.Now().Before(stopAt) {
		t0 := time.Now()
		b, err := e.newBox(ctx)
		if err != nil {
			return nil, fmt.Errorf("sandbox %d: %w", len(boxes)+2, err)
		}
		created = append(created, time.Since(t0))
		boxes = append(boxes, b)
	}
	// Every sandbox must still answer.
	for _, b := range boxes {
		if _, err := b.b.Execute(ctx, backend.ExecuteRequest{Command: "true"}); err != nil {
			return nil, fmt.Errorf("idle sandbox %s: %w", b.id, err)
		}
	}
	n := len(boxes)
	if n == 0 {
		return nil, fmt.Errorf("no sandbox was created within the time budget")
	}
	h1, r1, g1 := settle()
	live := len(e.worker.m.List(nil))
	count := latencyRow("B9", fmt.Sprintf("idle sandboxes live at once on one worker (%d)", live), unitMs, created)
	count.Target = "≥ 200 on 2 cores / 24 GiB"
	if want < 200 {
		count.Target = fmt.Sprintf("≥ %d (quick; spec: ≥ 200 on 2 cores / 24 GiB)", want)
	}
	count.judge(live >= want+1)
	count.note("figures are the create latency of each sandbox as the count grows; all %d answered Execute(true) afterwards", live)
	if live < want+1 {
		count.note("creation stopped at %d by the harness' time budget, not by a failure", live)
	}
	per := float64(h1-h0) / float64(n) / (1 << 20)
	mem := Row{Scenario: "B9", Name: "worker heap per idle sandbox", Unit: unitMiB, N: n,
		P50: per, P95: per, P99: per, Max: per, Target: "≤ 1 MiB per sandbox"}
	mem.judge(per <= 1)
	mem.note("HeapInuse after GC with %d live sandboxes minus with 1, divided by %d; process RSS grew %.2f MiB per sandbox; %.1f goroutines per sandbox (the open agent exec stream)",
		live, n, float64(r1-r0)/float64(n)/(1<<20), float64(g1-g0)/float64(n))
	rows := []Row{count, mem}
	inBox, total, err := boxRows(ctx, e, boxes, float64(r1-r0)/float64(n))
	if err != nil {
		return rows, err
	}
	return append(rows, inBox, total), nil
}

// boxSamples is how many of the idle boxes boxRows reads (every k-th).
const boxSamples = 20

// boxRows measures what plumb runs inside the idle boxes (the processes
// of each container, read from the host's /proc: under runc they are
// plumb's own while the box is idle) on every k-th box, and adds the
// worker's RSS growth per box (workerRSS, bytes) to it: "everything plumb
// adds per box", judged by RSS. Under runsc the processes live inside
// gVisor's sandbox, where the host's /proc does not see them.
func boxRows(ctx context.Context, e *env, boxes []*box, workerRSS float64) (inBox, total Row, err error) {
	inBox = Row{Scenario: "B9", Name: "in-box agent memory per box (RSS)", Unit: unitMiB, Target: "— (info)", Verdict: verdictInfo}
	total = Row{Scenario: "B9", Name: "everything plumb adds per box (worker RSS growth + in-box RSS)", Unit: unitMiB, Target: "≤ 4 MiB per box (RSS)"}
	res, err := e.docker.ContainerInspect(ctx, boxes[0].cid, client.ContainerInspectOptions{})
	if err != nil {
		return inBox, total, fmt.Errorf("inspect %s: %w", boxes[0].id, err)
	}
	if rt := res.Container.HostConfig.Runtime; rt == "runsc" {
		for _, r := range []*Row{&inBox, &total} {
			r.Unit, r.Verdict = unitNoData, verdictInfo
			r.note("not measured under %s: the box's processes live inside its sandbox, out of the host's /proc", rt)
		}
		return inBox, total, nil
	}
	step := max(1, len(boxes)/boxSamples)
	var rss, pss, uss, cg, cgAll []float64
	perName := map[string]*[3][]float64{} // RSS, PSS, USS in MiB
	var names []string
	pssOK := true
	for i := 0; i < len(boxes); i += step {
		bm, err := containerMemory(ctx, e.docker, boxes[i].cid)
		if err != nil {
			return inBox, total, fmt.Errorf("sandbox %s: %w", boxes[i].id, err)
		}
		agent := false
		for _, p := range bm.procs {
			agent = agent || strings.HasPrefix(p.name, "sandbox-agent")
			v := perName[p.name]
			if v == nil {
				v = new([3][]float64)
				perName[p.name] = v
				names = append(names, p.name)
			}
			v[0] = append(v[0], mib(p.rss))
			v[1] = append(v[1], mib(p.pss))
			v[2] = append(v[2], mib(p.uss))
		}
		if !agent {
			return inBox, total, fmt.Errorf("sandbox %s: no sandbox-agent process among %d", boxes[i].id, len(bm.procs))
		}
		rss = append(rss, mib(bm.sum(rssOf)))
		if p := bm.sum(pssOf); p >= 0 {
			pss = append(pss, mib(p))
			uss = append(uss, mib(bm.sum(ussOf)))
		} else {
			pssOK = false
		}
		if bm.cgroup >= 0 {
			cg, cgAll = append(cg, mib(bm.cgroup)), append(cgAll, mib(bm.cgroupAll))
		}
	}
	inBox = summarizeInto(inBox, rss)
	slices.Sort(names)
	var each []string
	for _, name := range names {
		v := perName[name]
		s := fmt.Sprintf("%s × %d: RSS %s", name, len(v[0]), fmtVal(median(v[0]), unitMiB))
		if pssOK {
			s += fmt.Sprintf(", PSS %s, USS %s", fmtVal(median(v[1]), unitMiB), fmtVal(median(v[2]), unitMiB))
		}
		each = append(each, s)
	}
	inBox.note("every process of the container (ContainerTop: host pids), /proc/<pid>/status VmRSS summed per box, on %d of the %d boxes (one in %d); p50 per process: %s",
		len(rss), len(boxes), step, strings.Join(each, "; "))
	if pssOK {
		inBox.note("per box, PSS (smaps_rollup: pages shared with other processes, such as the binary's text in the page cache, divided among them) p50 %s, max %s; USS (private pages only, the floor) p50 %s",
			fmtVal(median(pss), unitMiB), fmtVal(slices.Max(pss), unitMiB), fmtVal(median(uss), unitMiB))
	} else {
		inBox.note("PSS not read: smaps_rollup needs ptrace access to the box's processes (run as root)")
	}
	if info, err := e.docker.Info(ctx, client.InfoOptions{}); err == nil {
		// Whether boxes share the binary's pages depends on it: kernel
		// overlayfs maps the image layer's one file, while fuse-overlayfs
		// gives each container its own inodes, hence its own page cache.
		inBox.note("storage driver %s", info.Info.Driver)
	}
	if len(cg) > 0 {
		inBox.note("container cgroup memory as `docker stats` shows it (usage minus inactive file cache, incl. kernel memory) p50 %s; its whole usage, with all its page cache, p50 %s",
			fmtVal(median(cg), unitMiB), fmtVal(median(cgAll), unitMiB))
	}
	w := workerRSS / (1 << 20)
	if w < 0 {
		// The worker's RSS shrank (the Go runtime returned memory that
		// the first box's one-time work had held): no growth to count.
		total.note("the worker's RSS shrank by %s per box while the boxes were made; counted as 0", fmtVal(-w, unitMiB))
		w = 0
	}
	v := w + inBox.P50
	total.N, total.P50, total.P95, total.P99, total.Max = inBox.N, v, v, v, v
	total.judge(v <= 4)
	total.note("worker RSS growth %s per box + in-box RSS p50 %s", fmtVal(w, unitMiB), fmtVal(inBox.P50, unitMiB))
	if pssOK {
		total.note("by PSS (the worker's RSS growth + in-box PSS p50): %s", fmtVal(w+median(pss), unitMiB))
	}
	return inBox, total, nil
}

// summarizeInto fills r's percentiles from values, keeping its other
// fields.
func summarizeInto(r Row, values []float64) Row {
	s := summarize(r.Scenario, r.Name, r.Unit, values, false)
	r.N, r.P50, r.P95, r.P99, r.Max = s.N, s.P50, s.P95, s.P99, s.Max
	return r
}

// median is the nearest-rank p50 of values.
func median(values []float64) float64 {
	v := slices.Clone(values)
	slices.Sort(v)
	return pct(v, 50)
}

// mib is bytes in MiB.
func mib(b int64) float64 { return float64(b) / (1 << 20) }

// dropAll deletes sandboxes, four at a time.
func dropAll(e *env, boxes []*box) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, b := range boxes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			e.dropBox(b)
		}()
	}
	wg.Wait()
}
