package main

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"

	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

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
	return wakeRows(ctx, e, "B15", "local store", store, true)
}

// runB16 is the same from an S3-compatible store: a SeaweedFS weed server
// the harness starts on loopback (an error, not a skip, without weed).
func runB16(ctx context.Context, e *env) ([]Row, error) {
	store, stop, err := startWeed(ctx, e)
	if err != nil {
		return nil, err
	}
	defer stop()
	return wakeRows(ctx, e, "B16", "S3 store (SeaweedFS weed on loopback)", store, false)
}

// wakeRows times the first Execute("true") on a hibernated box holding
// 100 MiB of random files (the call recreates it from its snapshot in
// store under the same id) against B3's cold create → first Execute on
// the same worker, interleaved. Between calls, untimed, the box's files
// are checked and it is hibernated again (unchanged: its snapshot stores
// no new chunk). Issue 19 sets its target (≤ 1.5× the cold create) for
// the local store only: with judged false the row shows its ratio beside
// that goal and is info.
func wakeRows(ctx context.Context, e *env, id, where string, store snapshot.Store, judged bool) ([]Row, error) {
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
	floor, err := e.restoreFloor(ctx, load)
	if err != nil {
		return nil, err
	}
	defer floor.close()
	floor.n = n
	hibernate()
	if err := interleave(ctx, n, ours, base, floor.probe); err != nil {
		return nil, err
	}
	if hibErr != nil { // the last round's check
		return nil, hibErr
	}
	r := latencyRow(id, fmt.Sprintf(`hibernated (%s workspace) → first Execute("true"), %s`, load.label(), where), unitMs, ours.got)
	ratio := r.vsLatency(`B3: cold create → first Execute("true") (same worker, same run)`, latencyRow("", "", unitMs, base.got))
	r.vsLatency(fmt.Sprintf("engine floor: volume, create, copy the %s tar in, start, exec true", load.label()), latencyRow("", "", unitMs, floor.got))
	if judged {
		r.Target = "≤ 1.5× B3's cold create (ratio ≥ 0.67×)"
		r.judge(ratio >= 1/1.5)
	} else {
		r.Target, r.Verdict = "— (info: issue 19 sets no target for the S3 store; B15's is ≤ 1.5×)", verdictInfo
	}
	r.note("SuspendSandbox(HIBERNATE) untimed before each call (checked HIBERNATED; the workspace's %d random files of %d MiB checked by size after each wake); "+
		"the Execute RPC reserves the box's slot and memory, reads the snapshot's manifest, creates the volume, and writes the workspace into the volume's host directory (chunks read %d ahead, each decompressed and verified before its bytes are written) while the container is created and started and its agent greeted, then runs true",
		load.files, load.size>>20, snapshot.ReadAhead)
	r.note("the engine floor is what a wake costs through the engine's copy (a cold create whose workspace volume is filled with the same bytes through CopyToContainer before it starts, without reading the snapshot); the host fill does not pay it")
	return []Row{r}, nil
}

// floorProbe times the engine's part of a wake: a volume, a created
// container mounting it, CopyToContainer of the workload's tar into it,
// start, exec true; the container and volume are removed untimed.
type floorProbe struct {
	*probe
	tar   *os.File
	close func()
}

// restoreFloor writes the workload as a tar (random bytes) to a temporary
// file and returns the probe that copies it into fresh containers.
func (e *env) restoreFloor(ctx context.Context, load workload) (*floorProbe, error) {
	f, err := os.CreateTemp("", "plumb-bench-floor-*.tar")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name())
	tw := tar.NewWriter(f)
	block := make([]byte, 1<<20)
	rnd := rand.NewChaCha8([32]byte{19})
	for i := range load.files {
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("big/f%d", i), Mode: 0o644, Size: load.size, Typeflag: tar.TypeReg}); err != nil {
			f.Close()
			return nil, err
		}
		for left := load.size; left > 0; left -= int64(len(block)) {
			_, _ = rnd.Read(block)
			if _, err := tw.Write(block[:min(left, int64(len(block)))]); err != nil {
				f.Close()
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return nil, err
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		f.Close()
		return nil, err
	}
	cli := e.docker
	var cid, vol string
	seq := 0
	p := &floorProbe{probe: &probe{name: "engine floor of a wake", warm: 1}, tar: f, close: func() { f.Close() }}
	p.f = func(ctx context.Context) error {
		seq++
		vol = fmt.Sprintf("plumb-bench-floor-%s-%d", e.runID, seq)
		if _, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: vol, Labels: e.labels()}); err != nil {
			return err
		}
		var err error
		cid, err = engineCreate(ctx, cli, e.image, e.runtime, e.labels(), []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: "/workspace"}})
		if err != nil {
			return err
		}
		if _, err := cli.CopyToContainer(ctx, cid, client.CopyToContainerOptions{DestinationPath: "/workspace", Content: io.NewSectionReader(f, 0, size)}); err != nil {
			return fmt.Errorf("copy the workspace in: %w", err)
		}
		if _, err := cli.ContainerStart(ctx, cid, client.ContainerStartOptions{}); err != nil {
			return fmt.Errorf("container start: %w", err)
		}
		_, err = engineExecOK(ctx, cli, cid, "true")
		return err
	}
	p.after = func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		if cid != "" {
			e.removeContainer(ctx, cid)
			cid = ""
		}
		if vol != "" {
			if _, err := cli.VolumeRemove(ctx, vol, client.VolumeRemoveOptions{Force: true}); err != nil {
				e.log("remove volume %s: %v", vol, err)
			}
			vol = ""
		}
	}
	return p, nil
}
