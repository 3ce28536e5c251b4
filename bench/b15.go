package main

import (
	"context"
	"fmt"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/snapshot"
)

// runB15 is hibernated → first Execute with a 100 MiB workspace from a
// local snapshot store.
func runB15(ctx context.Context, e *env) ([]Row, error) {
	store, _, remove, err := dirStore()
	if err != nil {
		return nil, err
	}
	defer remove()
	return wakeRows(ctx, e, "B15", "local store", store)
}

// runB16 is the same from an S3-compatible store: a SeaweedFS weed server
// the harness starts on loopback (an error, not a skip, without weed).
func runB16(ctx context.Context, e *env) ([]Row, error) {
	store, stop, err := startWeed(ctx, e)
	if err != nil {
		return nil, err
	}
	defer stop()
	return wakeRows(ctx, e, "B16", "S3 store (SeaweedFS weed on loopback)", store)
}

// wakeRows times the first Execute("true") on a hibernated box holding
// 100 MiB of random files (the call recreates it from its snapshot in
// store under the same id) against B3's cold create → first Execute on
// the same worker, interleaved. Between calls, untimed, the box's files
// are checked and it is hibernated again (unchanged: its snapshot stores
// no new chunk).
func wakeRows(ctx context.Context, e *env, id, where string, store snapshot.Store) ([]Row, error) {
	w, stop, err := e.storeWorker(ctx, "benchwake", store, sandbox.Config{})
	if err != nil {
		return nil, err
	}
	defer stop()
	bx, err := e.createWS(ctx, w)
	if err != nil {
		return nil, err
	}
	load := e.fullWorkload()
	if err := load.fill(ctx, w, bx.id); err != nil {
		return nil, fmt.Errorf("fill the workspace: %w", err)
	}
	var hibErr error
	hibernate := func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		if hibErr = load.check(ctx, w, bx.id); hibErr != nil {
			return
		}
		_, hibErr = suspend(ctx, w, bx.id, plumbv1.SuspendMode_SUSPEND_MODE_HIBERNATE)
	}
	n := e.scale(6, 2)
	ours := &probe{name: "hibernated → Execute(true)", warm: 1, n: n, after: hibernate}
	ours.f = func(ctx context.Context) error {
		if hibErr != nil {
			return hibErr
		}
		return execOK(ctx, w, bx.id, "true")
	}
	var cold string
	base := &probe{name: "cold create → Execute(true)", warm: 1, n: n}
	base.f = func(ctx context.Context) error {
		var err error
		cold, _, err = createAndRunTrue(ctx, w, e.createRequest())
		return err
	}
	base.after = func() {
		if cold == "" {
			return
		}
		ctx, cancel := cleanupCtx()
		defer cancel()
		if _, err := w.c.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: cold}); err != nil {
			e.log("delete sandbox %s: %v", cold, err)
		}
		cold = ""
	}
	hibernate()
	if err := interleave(ctx, n, ours, base); err != nil {
		return nil, err
	}
	if hibErr != nil { // the last round's check
		return nil, hibErr
	}
	r := latencyRow(id, fmt.Sprintf(`hibernated (%s workspace) → first Execute("true"), %s`, load.label(), where), unitMs, ours.got)
	ratio := r.vsLatency(`B3: cold create → first Execute("true") (same worker, same run)`, latencyRow("", "", unitMs, base.got))
	r.Target = "≤ 1.5× B3's cold create (ratio ≥ 0.67×)"
	r.judge(ratio >= 1/1.5)
	r.note("SuspendSandbox(HIBERNATE) untimed before each call (checked HIBERNATED; the workspace's %d random files of %d MiB checked by size after each wake); "+
		"the Execute RPC reads and verifies every chunk of the snapshot into a temporary tar, creates the container and volume, fills the workspace through the engine before the box starts, greets the agent, then runs true",
		load.files, load.size>>20)
	return []Row{r}, nil
}
