package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/client"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/snapshot"
)

// Helpers of the durable-workspace scenarios (B13-B17, issue 19 item 9):
// a worker of their own with a snapshot store, and a workspace of a
// given size.

// storeWorker starts a worker whose snapshots go to store (cfg's Worker
// and Snapshots are set here); stop deletes its sandboxes and closes it.
func (e *env) storeWorker(ctx context.Context, name string, store snapshot.Store, cfg sandbox.Config) (*worker, func(), error) {
	cli, err := e.engineClient(ctx)
	if err != nil {
		return nil, nil, err
	}
	return e.storeWorkerOn(ctx, cli, name, store, cfg)
}

// storeWorkerOn is storeWorker on the engine cli.
func (e *env) storeWorkerOn(ctx context.Context, cli *client.Client, name string, store snapshot.Store, cfg sandbox.Config) (*worker, func(), error) {
	repo, err := snapshot.NewRepo(store, 0)
	if err != nil {
		return nil, nil, err
	}
	cfg.Worker, cfg.Snapshots = name+e.runID, repo
	w, err := e.startWorker(ctx, cli, cfg)
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := w.stop(ctx); err != nil {
			e.log("stop worker %s: %v", name, err)
		}
	}
	return w, stop, nil
}

// dirStore is a local snapshot store in a new temporary directory;
// remove deletes it.
func dirStore() (store *snapshot.Dir, dir string, remove func(), err error) {
	dir, err = os.MkdirTemp("", "plumb-bench-snapshots")
	if err != nil {
		return nil, "", nil, err
	}
	store, err = snapshot.NewDir(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	return store, dir, func() { os.RemoveAll(dir) }, nil
}

// wsBox is a sandbox on a store worker, with what the engine baselines
// need.
type wsBox struct {
	id, cid, workdir string
}

// createWS creates a sandbox through w's SandboxService.
func (e *env) createWS(ctx context.Context, w *worker) (wsBox, error) {
	res, err := w.c.CreateSandbox(ctx, e.createRequest())
	if err != nil {
		return wsBox{}, fmt.Errorf("create sandbox: %w", err)
	}
	id := res.GetSandbox().GetId()
	info, err := w.m.Get(ctx, id)
	if err != nil {
		return wsBox{id: id}, err
	}
	return wsBox{id: id, cid: info.ContainerID, workdir: info.Settings.WorkingDir}, nil
}

// workload is the random files B13, B15 and B16 put in a workspace:
// files of size bytes each under <workdir>/big.
type workload struct {
	files int
	size  int64
}

// fullWorkload is docs/benchmarks.md's 100 MB (10 × 10 MiB = 104,857,600
// bytes), 16 MiB in quick mode.
func (e *env) fullWorkload() workload {
	if e.quick {
		return workload{files: 4, size: 4 << 20}
	}
	return workload{files: 10, size: 10 << 20}
}

func (l workload) total() int64 { return int64(l.files) * l.size }

// label is "100 MiB" for the rows' names.
func (l workload) label() string { return fmt.Sprintf("%d MiB", l.total()>>20) }

// fill writes the workload's random (incompressible) files into the box.
func (l workload) fill(ctx context.Context, w *worker, id string) error {
	cmd := fmt.Sprintf("mkdir -p big && i=0; while [ $i -lt %d ]; do head -c %d /dev/urandom > big/f$i || exit 1; i=$((i+1)); done", l.files, l.size)
	return execOK(ctx, w, id, cmd)
}

// check verifies that every file of the workload is in the box with its
// size (a restore verified every chunk's sha256 already).
func (l workload) check(ctx context.Context, w *worker, id string) error {
	r, err := w.c.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "stat -c %s big/*"}})
	if err != nil {
		return err
	}
	if c := r.GetResult().GetExitCode(); c != 0 {
		return fmt.Errorf("stat the workload: exit %d: %s", c, r.GetResult().GetOutput())
	}
	sizes := strings.Fields(r.GetResult().GetOutput())
	if len(sizes) != l.files {
		return fmt.Errorf("the workspace holds %d workload files, want %d", len(sizes), l.files)
	}
	for _, s := range sizes {
		if n, err := strconv.ParseInt(s, 10, 64); err != nil || n != l.size {
			return fmt.Errorf("a workload file has %q bytes, want %d", s, l.size)
		}
	}
	return nil
}

// execOK runs command in the box and fails unless it exits 0.
func execOK(ctx context.Context, w *worker, id, command string) error {
	r, err := w.c.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: command}})
	if err != nil {
		return err
	}
	if c := r.GetResult().GetExitCode(); c != 0 {
		return fmt.Errorf("%q exited %d: %s", command, c, r.GetResult().GetOutput())
	}
	return nil
}

// suspend suspends the box and checks the state it reports.
func suspend(ctx context.Context, w *worker, id string, mode plumbv1.SuspendMode) (*plumbv1.SuspendSandboxResponse, error) {
	r, err := w.c.SuspendSandbox(ctx, &plumbv1.SuspendSandboxRequest{SandboxId: id, Mode: mode})
	if err != nil {
		return nil, fmt.Errorf("suspend %s: %w", id, err)
	}
	want := plumbv1.SandboxState_SANDBOX_STATE_PAUSED
	if mode == plumbv1.SuspendMode_SUSPEND_MODE_HIBERNATE {
		want = plumbv1.SandboxState_SANDBOX_STATE_HIBERNATED
	}
	if got := r.GetSandbox().GetState(); got != want {
		return nil, fmt.Errorf("suspend %s: state %v, want %v", id, got, want)
	}
	return r, nil
}

// cleanupCtx bounds untimed cleanup, independent of the scenario's
// context (which may have ended).
func cleanupCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*time.Minute)
}
