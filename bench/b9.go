package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
)

// runB9 is density: it creates idle sandboxes one after another, up to
// 200 (8 in quick mode) or until its share of the time budget is spent,
// and reports how many were live at once and what each costs the worker
// in this process (heap after GC, RSS, goroutines).
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
	return []Row{count, mem}, nil
}

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
