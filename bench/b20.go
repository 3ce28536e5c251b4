package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest/xengine"
)

// runB20 measures memory checkpoints (issue 19 item 4) under the current
// gVisor, on a private engine with checkpoints (xengine: the local engine
// runs without experimental features, and plumb never reconfigures it):
// the first Execute on a box hibernated with its memory (its processes
// kept: the call restores them) against the first Execute on a box of the
// same engine and runtime hibernated workspace-only, interleaved; the
// hibernations themselves; and the memory image's stored bytes.
func runB20(ctx context.Context, e *env) ([]Row, error) {
	cli, err := e.engineClient(ctx)
	if err != nil {
		return nil, err
	}
	path, args, ok, err := xengine.Runsc(ctx, cli)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("the engine has no runsc runtime (scripts/test-deps.sh registers the current gVisor)")
	}
	x, err := xengine.Start(ctx, path, args)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := x.Stop(); err != nil {
			e.log("B20: %v", err)
		}
	}()
	store, dir, remove, err := dirStore()
	if err != nil {
		return nil, err
	}
	defer remove()
	wMem, stopMem, err := e.storeWorkerOn(ctx, x.Client, "benchmem", store, sandbox.Config{Channel: sandbox.ChannelStdio})
	if err != nil {
		return nil, err
	}
	defer stopMem()
	wWS, stopWS, err := e.storeWorkerOn(ctx, x.Client, "benchwsonly", store, sandbox.Config{Channel: sandbox.ChannelStdio, NoMemoryCheckpoints: true})
	if err != nil {
		return nil, err
	}
	defer stopWS()
	// Each box runs a process of its own (a loop, in a session of its own)
	// whose PID the memory box must still have after each wake.
	newBox := func(w *worker) (id, pid string, err error) {
		res, err := w.c.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{Runtime: "runsc"})
		if err != nil {
			return "", "", fmt.Errorf("create a runsc sandbox: %w", err)
		}
		id = res.GetSandbox().GetId()
		r, err := w.c.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{
			Command: "echo kept > /workspace/f; setsid sh -c 'while :; do sleep 1; done' </dev/null >/dev/null 2>&1 & echo $!"}})
		if err != nil {
			return id, "", err
		}
		return id, strings.TrimSpace(r.GetResult().GetOutput()), nil
	}
	memID, pid, err := newBox(wMem)
	if err != nil {
		return nil, err
	}
	wsID, _, err := newBox(wWS)
	if err != nil {
		return nil, err
	}

	var memHib, wsHib samples
	var imageBytes []float64
	var hibErr error
	hibernate := func(w *worker, id string, kept bool, into *samples) {
		ctx, cancel := cleanupCtx()
		defer cancel()
		before := dirBytes(dir)
		t0 := time.Now()
		r, err := suspend(ctx, w, id, plumbv1.SuspendMode_SUSPEND_MODE_HIBERNATE)
		*into = append(*into, time.Since(t0))
		switch {
		case err != nil:
			hibErr = err
		case r.GetProcessesKept() != kept:
			hibErr = fmt.Errorf("hibernate %s: processes_kept=%v, want %v", id, r.GetProcessesKept(), kept)
		case kept:
			imageBytes = append(imageBytes, float64(dirBytes(dir)-before))
		}
	}
	n := e.scale(6, 3)
	mem := &probe{name: "hibernated with memory → Execute", warm: 1, n: n, after: func() { hibernate(wMem, memID, true, &memHib) }}
	mem.f = func(ctx context.Context) error {
		if hibErr != nil {
			return hibErr
		}
		return execOK(ctx, wMem, memID, "kill -0 "+pid) // true, and the process lives
	}
	ws := &probe{name: "hibernated workspace-only → Execute", warm: 1, n: n, after: func() { hibernate(wWS, wsID, false, &wsHib) }}
	ws.f = func(ctx context.Context) error {
		if hibErr != nil {
			return hibErr
		}
		return execOK(ctx, wWS, wsID, "true")
	}
	hibernate(wMem, memID, true, &memHib)
	hibernate(wWS, wsID, false, &wsHib)
	if err := interleave(ctx, n, mem, ws); err != nil {
		return nil, err
	}
	// The hibernations before the timed calls' first (and the warm-up's)
	// are not the rows'.
	memHib, wsHib, imageBytes = memHib[len(memHib)-n:], wsHib[len(wsHib)-n:], imageBytes[len(imageBytes)-n:]

	wake := latencyRow("B20", `gVisor box hibernated with its memory → first Execute (processes kept)`, unitMs, mem.got[len(mem.got)-n:])
	wake.vsLatency(`the same box hibernated workspace-only → first Execute (same engine, runsc)`, latencyRow("", "", unitMs, ws.got[len(ws.got)-n:]))
	wake.Target, wake.Verdict = "— (info: issue 19 sets no target for the gVisor rows)", verdictInfo
	wake.note("private dockerd 20.10 with experimental features (checkpoints) and the current runsc, vfs storage; the call is Execute(\"kill -0 <pid>\") of a process the box started before its first hibernation: " +
		"the engine's start from the checkpoint (runsc restore) after the image's verified read from a local store; SuspendSandbox(HIBERNATE) untimed after each call, checked processes_kept")
	hib := latencyRow("B20", "hibernate with memory (workspace snapshot, engine checkpoint, image stored)", unitMs, memHib)
	hib.vsLatency("hibernate workspace-only (same engine, runsc)", latencyRow("", "", unitMs, wsHib))
	hib.Target, hib.Verdict = "— (info)", verdictInfo
	img := bytesRow("B20", "memory image stored per hibernation (zstd)", imageBytes)
	img.Target, img.Verdict = "— (info)", verdictInfo
	img.note("the store's growth over one hibernation with memory: the image's compressed chunks and manifest, and the unchanged workspace's new manifest; an idle busybox box with the agent and one sleeping loop")
	return []Row{wake, hib, img}, nil
}

// dirBytes is the bytes of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
