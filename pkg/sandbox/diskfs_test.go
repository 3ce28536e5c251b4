package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"go.uber.org/zap/zaptest"
)

// TestDiskBoundKernel: a box with a disk_bytes of 64 MiB writing at full
// speed, one big file and then 1 MiB files in a loop (after deleting the
// big one), gets ENOSPC at its
// bound: its workspace file system holds no more than 64 MiB (df inside,
// the image's allocated blocks on the host), and the box stays usable
// (delete a file, write again). A box creating empty files stops at the
// inode ceiling of its disk_bytes. Deleting the boxes leaves no loop
// device, image or volume behind. Under every runtime: under runsc the
// box writes through gVisor's gofer into the same kernel-bounded mount.
func TestDiskBoundKernel(t *testing.T) {
	for _, rt := range sandboxtest.Runtimes(t, sandboxtest.Docker(t)) {
		t.Run(rt, func(t *testing.T) { diskBoundKernel(t, rt) })
	}
}

func diskBoundKernel(t *testing.T, rt string) {
	e := newEnv(t)
	m := e.manager(t)
	ctx := context.Background()
	const limit = 64 << 20
	hog := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{DiskBytes: limit, Runtime: rt}})
	files := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{DiskBytes: 4 << 20, Runtime: rt}})

	// Bytes: one file at full speed (4x the bound, so a box without a
	// bound does not stop), then 1 MiB files until a write fails.
	r := exec(t, m, hog.ID, `dd if=/dev/zero of=big bs=1M count=256 2>&1; echo "dd=$?"; rm big`, 300)
	if !strings.Contains(r.Output, "dd=1") || !strings.Contains(r.Output, "No space left") {
		t.Fatalf("writing 256 MiB into a 64 MiB workspace: %q", r.Output)
	}
	r = exec(t, m, hog.ID, `i=0; while dd if=/dev/zero of=f$i bs=64k count=16 2>/dev/null || { dd if=/dev/zero of=f$i bs=64k count=16 2>&1 | grep -m1 -o "No space left"; false; }; do i=$((i+1)); [ $i -ge 256 ] && break; done; echo "files=$i"; sync`, 300)
	if !strings.Contains(r.Output, "No space left") || strings.Contains(r.Output, "files=256") {
		t.Fatalf("1 MiB files into a full workspace: %q", r.Output)
	}
	size, used := df(t, m, hog.ID, "-k")
	if size*1024 > limit || used*1024 > limit {
		t.Fatalf("the workspace file system is %d KiB with %d KiB used; bound %d KiB", size, used, limit/1024)
	}
	if alloc, ok := imageBytes(t, e.cli, hog.ID); ok && alloc > limit {
		t.Fatalf("the workspace image takes %d bytes on the host, over the %d bound", alloc, limit)
	}
	if r := exec(t, m, hog.ID, "rm f0 && echo again > small && cat small", 120); r.Output != "again\n" {
		t.Fatalf("the box after filling its workspace: %q exit %d", r.Output, exitCode(r))
	}

	// Inodes: empty files until the file system has no inode left.
	r = exec(t, m, files.ID, `i=0; while : > f$i; do i=$((i+1)); [ $i -ge 5000 ] && break; done 2>&1; echo "files=$i"`, 300)
	if !strings.Contains(r.Output, "No space left") || strings.Contains(r.Output, "files=5000") {
		t.Fatalf("5000 empty files into a 4 MiB workspace: %q", r.Output)
	}
	inodes, iused := df(t, m, files.ID, "-i")
	if ceiling := sandbox.InodeCeiling(4 << 20); inodes > ceiling || iused > ceiling {
		t.Fatalf("the workspace has %d inodes, %d used; ceiling %d", inodes, iused, ceiling)
	}
	if r := exec(t, m, files.ID, "rm f0 && echo again > f0 && cat f0", 120); r.Output != "again\n" {
		t.Fatalf("the box after using its inodes: %q exit %d", r.Output, exitCode(r))
	}
	for _, id := range []string{hog.ID, files.ID} {
		if err := m.Delete(ctx, id); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
	}
	assertNoDisk(t, e.cli, hog.ID, files.ID)
}

// df returns the size and use of the box's workspace as df reports them
// with flag (-k: KiB, -i: inodes).
func df(t *testing.T, m *sandbox.Manager, id, flag string) (size, used int64) {
	t.Helper()
	r := exec(t, m, id, "df "+flag+" /workspace | tail -n 1", 120)
	f := strings.Fields(r.Output)
	if len(f) < 3 {
		t.Fatalf("df %s: %q", flag, r.Output)
	}
	size, err1 := strconv.ParseInt(f[1], 10, 64)
	used, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("df %s: %q", flag, r.Output)
	}
	return size, used
}

// imageBytes returns what sandbox id's workspace image takes on the host,
// when this process can read the engine's volume directory.
func imageBytes(t *testing.T, cli *client.Client, id string) (int64, bool) {
	t.Helper()
	v, err := cli.VolumeInspect(context.Background(), sandbox.DiskVolume(id), client.VolumeInspectOptions{})
	if err != nil {
		t.Fatalf("inspect the image volume of %s: %v", id, err)
	}
	st, err := os.Stat(filepath.Join(v.Volume.Mountpoint, id+".img"))
	if err != nil {
		t.Logf("the image is not readable from here (%v): df inside the box only", err)
		return 0, false
	}
	return sandboxtest.AllocatedBytes(st), true
}

// assertNoDisk fails t when a loop device of the host is backed by the
// workspace image of one of ids, or their volumes remain.
func assertNoDisk(t *testing.T, cli *client.Client, ids ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range ids {
		if loops := sandboxtest.LoopsBacking(id + ".img"); len(loops) > 0 { // ids hold no pattern characters
			t.Errorf("loop devices %v still hold the workspace image of %s", loops, id)
		}
		for _, v := range []string{sandbox.DiskVolume(id), "plumb-ws-" + id} {
			if _, err := cli.VolumeInspect(ctx, v, client.VolumeInspectOptions{}); err == nil {
				t.Errorf("volume %s remains", v)
			}
		}
	}
}

// refuseWorkspace is an engine that refuses to create workspace volumes.
type refuseWorkspace struct{ *client.Client }

func (r refuseWorkspace) VolumeCreate(ctx context.Context, opts client.VolumeCreateOptions) (client.VolumeCreateResult, error) {
	if strings.HasPrefix(opts.Name, "plumb-ws-") {
		return client.VolumeCreateResult{}, errors.New("the engine refused the workspace volume")
	}
	return r.Client.VolumeCreate(ctx, opts)
}

// TestDiskBoundFailedCreateLeavesNothing: a create that fails after its
// workspace image was attached (the engine refuses the workspace volume)
// fails cleanly: no loop device, image, volume or container of the
// worker remains.
func TestDiskBoundFailedCreateLeavesNothing(t *testing.T) {
	e := newEnv(t)
	m := e.managerOn(t, refuseWorkspace{e.cli})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := m.Create(ctx, sandbox.CreateSpec{Overrides: sandbox.Template{DiskBytes: 4 << 20}}); err == nil || !strings.Contains(err.Error(), "refused the workspace volume") {
		t.Fatalf("create: %v, want the engine's refusal", err)
	}
	if loops := sandboxtest.LoopsBacking("sbx-" + e.worker + "-*.img"); len(loops) > 0 {
		t.Errorf("the failed create left loop devices %v", loops)
	}
	cs, vs, err := sandboxtest.Leftovers(ctx, e.cli, sandboxtest.Label(sandbox.LabelWorker, e.worker))
	if err != nil || len(cs)+len(vs) > 0 {
		t.Fatalf("the failed create left containers %v and volumes %v (%v)", cs, vs, err)
	}
}

// TestDiskBoundAdopted: a box adopted by a restarted worker keeps its
// bound (its file system stayed mounted, its loop device attached), and
// the new worker's delete removes the device, the image and the volumes.
func TestDiskBoundAdopted(t *testing.T) {
	e := newEnv(t)
	m1, err := sandbox.NewManager(context.Background(), e.cli, e.cfg, sandbox.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	box := e.create(t, m1, sandbox.CreateSpec{Overrides: sandbox.Template{DiskBytes: 4 << 20}})
	m1.Close() // a worker restart leaves its sandboxes running
	m2 := e.manager(t)
	r := exec(t, m2, box.ID, `dd if=/dev/zero of=big bs=1M count=16 2>&1; echo "dd=$?"`, 120)
	if !strings.Contains(r.Output, "dd=1") || !strings.Contains(r.Output, "No space left") {
		t.Fatalf("writing 16 MiB into the adopted 4 MiB workspace: %q", r.Output)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := m2.Delete(ctx, box.ID); err != nil {
		t.Fatal(err)
	}
	assertNoDisk(t, e.cli, box.ID)
}
