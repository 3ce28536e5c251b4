package main

import (
	"context"
	"fmt"
	"time"

	"github.com/moby/moby/client"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

// runB14 times the first Execute("true") on a paused box (the call
// unpauses it) against Execute("true") on a running box and the engine's
// own unpause followed by an exec of true in a paused container. The
// pauses run untimed between calls.
func runB14(ctx context.Context, e *env) ([]Row, error) {
	paused, err := e.newBox(ctx)
	if err != nil {
		return nil, err
	}
	defer e.dropBox(paused)
	running, err := e.newBox(ctx)
	if err != nil {
		return nil, err
	}
	defer e.dropBox(running)
	w, cli := paused.w, e.docker
	cid, err := engineCreateStart(ctx, cli, e.image, e.runtime, e.labels())
	if cid != "" {
		defer func() {
			ctx, cancel := cleanupCtx()
			defer cancel()
			_, _ = cli.ContainerUnpause(ctx, cid, client.ContainerUnpauseOptions{})
			e.removeContainer(ctx, cid)
		}()
	}
	if err != nil {
		return nil, err
	}

	var pauseErr error
	pause := func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		_, pauseErr = suspend(ctx, w, paused.id, plumbv1.SuspendMode_SUSPEND_MODE_PAUSE)
	}
	trueIn := func(ctx context.Context, id string) error { return execOK(ctx, w, id, "true") }
	n := e.scale(40, 10)
	ours := &probe{name: "paused → Execute(true)", warm: 1, n: n, after: pause}
	ours.f = func(ctx context.Context) error {
		if pauseErr != nil {
			return pauseErr
		}
		return trueIn(ctx, paused.id)
	}
	live := &probe{name: "Execute(true) on a running box", warm: 1, n: n}
	live.f = func(ctx context.Context) error { return trueIn(ctx, running.id) }

	var enginePauseErr error
	enginePause := func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		_, enginePauseErr = cli.ContainerPause(ctx, cid, client.ContainerPauseOptions{})
	}
	var unpauseOnly samples
	eng := &probe{name: "engine unpause + exec true", warm: 1, n: n, after: enginePause}
	eng.f = func(ctx context.Context) error {
		if enginePauseErr != nil {
			return fmt.Errorf("engine pause: %w", enginePauseErr)
		}
		t0 := time.Now()
		if _, err := cli.ContainerUnpause(ctx, cid, client.ContainerUnpauseOptions{}); err != nil {
			return err
		}
		unpauseOnly = append(unpauseOnly, time.Since(t0))
		_, err := engineExecOK(ctx, cli, cid, "true")
		return err
	}
	pause()
	enginePause()
	if err := interleave(ctx, n, ours, live, eng); err != nil {
		return nil, err
	}
	r := latencyRow("B14", `paused box → first Execute("true")`, unitMs, ours.got)
	r.vsLatency(`Execute("true") on a running box`, latencyRow("", "", unitMs, live.got))
	r.vsLatency("engine unpause, then exec true", latencyRow("", "", unitMs, eng.got))
	r.Target = "p50 ≤ 50 ms"
	r.judge(r.P50 <= 50)
	r.note("SuspendSandbox(PAUSE) untimed before each call, checked PAUSED; the Execute RPC wakes the box (engine unpause) and runs true over the agent channel kept across the pause; "+
		"the engine's unpause alone p50 %.1f ms", float64(unpauseOnly[len(unpauseOnly)-n:].p50())/float64(time.Millisecond))
	return []Row{r}, nil
}
