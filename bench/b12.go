package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/snapshot"
)

// forkCount is how many boxes B12 forks from one snapshot (issue 19 item 9).
const forkCount = 10

// runB12 times ForkSandbox of forkCount boxes from one snapshot of a
// 10 MiB workspace until every one of them has answered Execute("true"),
// against the same boxes made by forkCount concurrent CreateSandbox calls
// from that snapshot (each reads and verifies the snapshot itself). The
// worker has a local snapshot store; deletion is untimed on both sides.
func runB12(ctx context.Context, e *env) ([]Row, error) {
	cli, err := e.engineClient(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "plumb-bench-snapshots")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	store, err := snapshot.NewDir(dir)
	if err != nil {
		return nil, err
	}
	repo, err := snapshot.NewRepo(store, 0)
	if err != nil {
		return nil, err
	}
	// The worker keeps a warm pool of forkCount boxes of the defaults: a
	// fork takes them first (issue 19 item 5); creates from a snapshot do
	// not.
	stateDir, err := os.MkdirTemp("", "plumb-bench-fork-state")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stateDir)
	w, err := e.startWorker(ctx, cli, sandbox.Config{Worker: "benchfork" + e.runID, Snapshots: repo, StateDir: stateDir,
		Pools: map[string]sandbox.PoolConfig{"": {Size: forkCount}}})
	if err != nil {
		return nil, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := w.stop(ctx); err != nil {
			e.log("stop the fork worker: %v", err)
		}
	}()

	src, err := w.c.CreateSandbox(ctx, e.createRequest())
	if err != nil {
		return nil, fmt.Errorf("create the source box: %w", err)
	}
	srcID := src.GetSandbox().GetId()
	if _, err := w.c.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: srcID, Command: &plumbv1.Command{
		Command: "mkdir -p /workspace/src && for i in 0 1 2 3 4 5 6 7 8 9; do head -c 1048576 /dev/urandom > /workspace/src/f$i; done"}}); err != nil {
		return nil, fmt.Errorf("fill the source box: %w", err)
	}
	snap, err := w.c.SnapshotSandbox(ctx, &plumbv1.SnapshotSandboxRequest{SandboxId: srcID})
	if err != nil {
		return nil, fmt.Errorf("snapshot the source box: %w", err)
	}
	sid := snap.GetSnapshot().GetId()
	if _, err := w.c.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: srcID}); err != nil {
		return nil, err
	}

	var made []string
	var mu sync.Mutex
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, id := range made {
			if _, err := w.c.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: id}); err != nil {
				e.log("delete sandbox %s: %v", id, err)
			}
		}
		made = nil
	}
	// answerAll runs Execute("true") in every box at once.
	answerAll := func(ctx context.Context, ids []string) error {
		errs := make([]error, len(ids))
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Go(func() {
				r, err := w.c.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "true"}})
				if err == nil && r.GetResult().GetExitCode() != 0 {
					err = fmt.Errorf("true exited %d in %s", r.GetResult().GetExitCode(), id)
				}
				errs[i] = err
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}

	// Every call, timed or not, starts with the pool full and no box
	// starting (waited for untimed).
	var hits uint64
	var poolErr error
	refill := func() {
		drop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		hits, poolErr = poolFull(ctx, w)
	}
	refill()
	ours := &probe{name: "fork", warm: 1, n: e.scale(6, 2), after: refill}
	ours.f = func(ctx context.Context) error {
		if poolErr != nil {
			return poolErr
		}
		res, err := w.c.ForkSandbox(ctx, &plumbv1.ForkSandboxRequest{SnapshotId: sid, Count: forkCount, Sandbox: e.createRequest()})
		if err != nil {
			return err
		}
		for _, sb := range res.GetSandboxes() {
			made = append(made, sb.GetId())
		}
		if err := answerAll(ctx, made); err != nil {
			return err
		}
		if ps := w.m.Pools(); ps[0].Hits != hits+forkCount {
			return fmt.Errorf("the fork did not take its boxes from the warm pool: %+v", ps[0])
		}
		return nil
	}
	base := &probe{name: "creates", warm: 1, n: ours.n, after: refill}
	base.f = func(ctx context.Context) error {
		if poolErr != nil {
			return poolErr
		}
		errs := make([]error, forkCount)
		var wg sync.WaitGroup
		for i := range forkCount {
			wg.Go(func() {
				req := e.createRequest()
				req.SnapshotId = sid
				res, err := w.c.CreateSandbox(ctx, req)
				if err == nil {
					mu.Lock()
					made = append(made, res.GetSandbox().GetId())
					mu.Unlock()
				}
				errs[i] = err
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		return answerAll(ctx, made)
	}
	if err := interleave(ctx, ours.n, ours, base); err != nil {
		return nil, err
	}
	r := latencyRow("B12", fmt.Sprintf("fork %d boxes from one snapshot (10 MiB workspace) → all answer Execute(\"true\")", forkCount), unitMs, ours.got)
	r.vsLatency(fmt.Sprintf("%d concurrent creates from the snapshot → all answer", forkCount), latencyRow("", "", unitMs, base.got))
	r.Target = "p50 ≤ 1 s"
	r.judge(r.P50 <= 1000)
	r.note("one ForkSandbox RPC (the snapshot read and verified once; under runc the %d boxes are the worker's warm pool of the defaults, each claimed and its workspace written on the host before the fork returns; checked by the pool's hits) then Execute RPCs in all %d boxes at once; "+
		"the baseline makes the same boxes with %d concurrent CreateSandbox calls from the snapshot (each verifies it; a create from a snapshot takes no pool box); local snapshot store; before every call, untimed, the boxes of the last are deleted and the pool refilled", forkCount, forkCount, forkCount)
	return []Row{r}, nil
}
