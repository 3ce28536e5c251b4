package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/moby/moby/client"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// runB13 times SnapshotSandbox of a box holding 100 MiB of random files
// (a first snapshot into an empty store, then an unchanged second one)
// against the engine's own archive of the same directory
// (CopyFromContainer read to its end: what a snapshot cannot avoid), and
// reports the bytes each snapshot added to the store. Both snapshots are
// deleted after each round (untimed), so every "first" stores every chunk.
func runB13(ctx context.Context, e *env) ([]Row, error) {
	store, dir, remove, err := dirStore()
	if err != nil {
		return nil, err
	}
	defer remove()
	w, stop, err := e.storeWorker(ctx, "benchsnap", store, sandbox.Config{})
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

	var taken []string
	var firstStored, secondStored, sizes []float64
	take := func(ctx context.Context, into *[]float64) error {
		r, err := w.c.SnapshotSandbox(ctx, &plumbv1.SnapshotSandboxRequest{SandboxId: bx.id})
		if err != nil {
			return err
		}
		s := r.GetSnapshot()
		taken = append(taken, s.GetId())
		if s.GetSizeBytes() < load.total() {
			return fmt.Errorf("snapshot %s holds %d bytes, the workspace at least %d", s.GetId(), s.GetSizeBytes(), load.total())
		}
		// stored_bytes counts chunks; the manifest is written too.
		man, err := manifestSize(dir, s.GetId())
		if err != nil {
			return err
		}
		*into = append(*into, float64(s.GetStoredBytes()+man))
		sizes = append(sizes, float64(s.GetSizeBytes()))
		return nil
	}
	first := &probe{name: "first snapshot", warm: 1, n: e.scale(4, 2)}
	first.f = func(ctx context.Context) error { return take(ctx, &firstStored) }
	second := &probe{name: "unchanged second snapshot", warm: 1, n: first.n}
	second.f = func(ctx context.Context) error { return take(ctx, &secondStored) }
	second.after = func() {
		dctx, cancel := cleanupCtx()
		defer cancel()
		for _, id := range taken {
			if _, err := w.c.DeleteSnapshot(dctx, &plumbv1.DeleteSnapshotRequest{SnapshotId: id}); err != nil {
				e.log("delete snapshot %s: %v", id, err)
			}
		}
		taken = nil
	}
	var archived int64
	base := &probe{name: "engine archive", warm: 1, n: first.n}
	base.f = func(ctx context.Context) error {
		res, err := e.docker.CopyFromContainer(ctx, bx.cid, client.CopyFromContainerOptions{SourcePath: bx.workdir})
		if err != nil {
			return err
		}
		defer res.Content.Close()
		n, err := io.Copy(io.Discard, res.Content)
		if err != nil {
			return err
		}
		if n < load.total() {
			return fmt.Errorf("the engine's archive has %d bytes, the workspace at least %d", n, load.total())
		}
		archived = n
		return nil
	}
	if err := interleave(ctx, first.n, first, second, base); err != nil {
		return nil, err
	}
	// The warm-up's figures are not the rows'.
	firstStored, secondStored = firstStored[1:], secondStored[1:]
	archive := latencyRow("", "", unitMs, base.got)

	t1 := latencyRow("B13", "snapshot of a "+load.label()+" workspace (first: every chunk new)", unitMs, first.got)
	t1.vsLatency("engine archive of the same directory (CopyFromContainer)", archive)
	t1.Target, t1.Verdict = "— (time and bytes stored; the archive is the floor)", verdictInfo
	t1.note("SnapshotSandbox RPC: pause, the engine's archive, 1 MiB chunks hashed, zstd-compressed and written to a local store, manifest, unpause; %d random files of %d MiB (incompressible); the archive baseline reads %d bytes of tar to its end; both snapshots deleted untimed after each round",
		load.files, load.size>>20, archived)
	s1 := bytesRow("B13", "bytes stored by the first snapshot", firstStored)
	s1.Target, s1.Verdict = "— (info)", verdictInfo
	s1.note("stored_bytes (the compressed chunks the snapshot added to the store) plus its manifest file, for a workspace of %.1f MiB", median(sizes)/(1<<20))

	t2 := latencyRow("B13", "unchanged second snapshot", unitMs, second.got)
	t2.vsLatency("engine archive of the same directory (CopyFromContainer)", archive)
	t2.Target, t2.Verdict = "— (info)", verdictInfo
	t2.note("the same RPC right after the first: every chunk is hashed again and found in the store, only a manifest is written")
	s2 := bytesRow("B13", "bytes stored by the unchanged second snapshot", secondStored)
	limit := 0.05 * median(firstStored)
	s2.Target = "≤ 5% of the first's stored bytes"
	s2.judge(s2.Max*(1<<20) <= limit)
	s2.note("stored_bytes plus the manifest file: worst %.4f MiB against 5%% of the first's %.1f MiB = %.2f MiB (%.4f%% of the first)",
		s2.Max, median(firstStored)/(1<<20), limit/(1<<20), 100*s2.Max*(1<<20)/median(firstStored))
	return []Row{t1, s1, t2, s2}, nil
}

// bytesRow summarizes byte counts in MiB (lower is better).
func bytesRow(scenario, name string, bytes []float64) Row {
	v := make([]float64, len(bytes))
	for i, b := range bytes {
		v[i] = b / (1 << 20)
	}
	return summarize(scenario, name, unitMiB, v, false)
}

// manifestSize is the size of snapshot id's manifest in a local store.
func manifestSize(dir, id string) (int64, error) {
	m, err := filepath.Glob(filepath.Join(dir, "manifests", "*", id))
	if err != nil || len(m) != 1 {
		return 0, fmt.Errorf("the manifest of %s in %s: %d found (%v)", id, dir, len(m), err)
	}
	fi, err := os.Stat(m[0])
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
