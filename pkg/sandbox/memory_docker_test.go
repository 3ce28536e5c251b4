package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"github.com/plumbhq/plumb/pkg/snapshot"
)

// memoryEnv is an env on a private engine with checkpoints (experimental)
// whose boxes run under gVisor with the agent as PID 1, and a snapshot
// store in the directory it returns.
func memoryEnv(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t)
	e.cli, e.image = sandboxtest.ExperimentalEngine(t, e.cli)
	e.cfg.Defaults.Image, e.cfg.Defaults.Runtime = e.image, "runsc"
	e.cfg.Channel = sandbox.ChannelStdio
	return e, e.withSnapshots(t, 0)
}

// memoryImages returns the ids of tenant's memory images in the store.
func memoryImages(t *testing.T, repo *snapshot.Repo, dir, tenant string) []string {
	t.Helper()
	key := snapshot.ManifestKey(tenant, "x")
	names, err := filepath.Glob(filepath.Join(dir, "manifests", filepath.Dir(key), "snap-*"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, n := range names {
		if _, err := repo.GetMemory(context.Background(), tenant, filepath.Base(n)); err == nil {
			ids = append(ids, filepath.Base(n))
		}
	}
	return ids
}

// loop starts a counter in the background of box id (a process of its
// own session, so the command's end does not take it) and leaves a file
// in /tmp, which gVisor keeps in the box's memory; it returns the loop's
// PID.
const loop = `echo only-in-memory > /tmp/mem; echo on-disk > /workspace/f
setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.05; done' </dev/null >/dev/null 2>&1 &
echo $!`

// counter reads the loop's count, waiting for it to exceed after.
func counter(t *testing.T, m *sandbox.Manager, id string, after int) int {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a hang's bound, not a speed assertion
	for {
		r := exec(t, m, id, "cat /tmp/n", 30)
		n, err := strconv.Atoi(strings.TrimSpace(r.Output))
		if err == nil && n > after {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the loop's count stays at %q (want over %d)", r.Output, after)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Under gVisor, on an engine that can checkpoint, a hibernation keeps the
// box's processes: a loop that a command started goes on counting after
// the wake, under the same PID, and /tmp (in the box's memory) is kept
// with the workspace, through two hibernations. The memory image is
// stored beside the workspace snapshot, never listed, and deleted once
// restored. A memory image that no longer verifies falls back to a wake
// from the workspace: the files are back, the processes are not. So does
// a wake by a restarted worker, which pins no image and deletes it.
func TestHibernationKeepsGVisorProcesses(t *testing.T) {
	e, dir := memoryEnv(t)
	e.cfg.StateDir = t.TempDir()
	ctx := ctxMinute(t)
	m, closeM := e.restartableOn(t, e.cli)
	box := e.create(t, m, sandbox.CreateSpec{Tenant: "acme"})
	pid := strings.TrimSpace(exec(t, m, box.ID, loop, 30).Output)
	n := counter(t, m, box.ID, 0)

	for round := 1; round <= 2; round++ {
		res := hibernate(t, m, box.ID)
		if !res.ProcessesKept {
			t.Fatalf("round %d: hibernation under gVisor with checkpoints: processes_kept=false", round)
		}
		e.assertNoBox(t, box.ID)
		if imgs := memoryImages(t, e.cfg.Snapshots, dir, "acme"); len(imgs) != 1 {
			t.Fatalf("round %d: memory images in the store while hibernated: %v, want one", round, imgs)
		}
		list, err := m.ListSnapshots(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list {
			if _, err := e.cfg.Snapshots.GetMemory(ctx, "acme", s.ID); err == nil {
				t.Fatalf("round %d: ListSnapshots shows memory image %s", round, s.ID)
			}
		}
		// The first call wakes it: the same process, still counting.
		r := exec(t, m, box.ID, "kill -0 "+pid+" && cat /tmp/mem /workspace/f", 30)
		if r.ExitCode == nil || *r.ExitCode != 0 || r.Output != "only-in-memory\non-disk\n" {
			t.Fatalf("round %d: after the wake: exit %v, %q", round, r.ExitCode, r.Output)
		}
		n = counter(t, m, box.ID, n)
		if imgs := memoryImages(t, e.cfg.Snapshots, dir, "acme"); len(imgs) != 0 {
			t.Fatalf("round %d: memory images after the wake: %v, want none (restored once)", round, imgs)
		}
	}

	// An image whose chunk is gone: the wake restores the workspace only.
	hibernate(t, m, box.ID)
	imgs := memoryImages(t, e.cfg.Snapshots, dir, "acme")
	if len(imgs) != 1 {
		t.Fatalf("memory images: %v", imgs)
	}
	man, err := e.cfg.Snapshots.GetMemory(ctx, "acme", imgs[0])
	if err != nil {
		t.Fatal(err)
	}
	var chunk string
	for _, en := range man.Entries {
		if len(en.Chunks) > 0 {
			chunk = en.Chunks[0].Hash
		}
	}
	if err := os.Remove(filepath.Join(dir, "chunks", filepath.FromSlash(snapshot.ChunkKey("acme", chunk)))); err != nil {
		t.Fatal(err)
	}
	r := exec(t, m, box.ID, "cat /workspace/f; cat /tmp/mem; kill -0 "+pid, 30)
	if r.ExitCode == nil || *r.ExitCode == 0 || !strings.HasPrefix(r.Output, "on-disk\n") || strings.Contains(r.Output, "only-in-memory") {
		t.Fatalf("wake from a broken memory image: exit %v, %q; want the workspace and no process", r.ExitCode, r.Output)
	}
	if imgs := memoryImages(t, e.cfg.Snapshots, dir, "acme"); len(imgs) != 0 {
		t.Fatalf("memory images after the fallback: %v", imgs)
	}

	// A restarted worker: the image is deleted as it adopts the box.
	pid = strings.TrimSpace(exec(t, m, box.ID, loop, 30).Output)
	if res := hibernate(t, m, box.ID); !res.ProcessesKept {
		t.Fatal("processes_kept=false")
	}
	closeM()
	m2 := e.manager(t)
	if imgs := memoryImages(t, e.cfg.Snapshots, dir, "acme"); len(imgs) != 0 {
		t.Fatalf("memory images after the worker's restart: %v, want none", imgs)
	}
	r = exec(t, m2, box.ID, "cat /workspace/f; cat /tmp/mem; kill -0 "+pid, 30)
	if r.ExitCode == nil || *r.ExitCode == 0 || !strings.HasPrefix(r.Output, "on-disk\n") || strings.Contains(r.Output, "only-in-memory") {
		t.Fatalf("wake by a restarted worker: exit %v, %q; want the workspace and no process", r.ExitCode, r.Output)
	}
}
