package sandbox_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
)

// TestDiskWatchdog (the DiskWatchdog fallback): a sandbox whose workspace grows past its disk_bytes is
// failed by the watchdog (with a reason naming the limit) and its
// container killed; a sandbox under its limit and a neighbour without one
// keep serving (the neighbour during the hog's write and the check too).
// Under every runtime: under runsc the box writes through gVisor's gofer,
// and the engine measures the volume all the same.
func TestDiskWatchdog(t *testing.T) {
	for _, rt := range sandboxtest.Runtimes(t, sandboxtest.Docker(t)) {
		t.Run(rt, func(t *testing.T) { diskWatchdog(t, rt) })
	}
}

func diskWatchdog(t *testing.T, rt string) {
	e := newEnv(t)
	e.cfg.DiskEnforcement = sandbox.DiskWatchdog
	m := e.manager(t)
	ctx := context.Background()
	const limit = 1 << 20
	hog := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{DiskBytes: limit, Runtime: rt}})
	small := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{DiskBytes: limit, Runtime: rt}})
	neighbour := e.create(t, m, sandbox.CreateSpec{})

	if r := exec(t, m, small.ID, "head -c 100000 /dev/zero > small", 120); exitCode(r) != 0 {
		t.Fatalf("write 100 kB: %q exit %d", r.Output, exitCode(r))
	}
	if r := exec(t, m, neighbour.ID, "head -c 3000000 /dev/zero > big", 120); exitCode(r) != 0 {
		t.Fatalf("neighbour write: %q exit %d", r.Output, exitCode(r))
	}
	var got []string
	keepsServing(t, m, neighbour.ID, func() {
		if r := exec(t, m, hog.ID, "head -c 3000000 /dev/zero > big && sync", 120); exitCode(r) != 0 {
			t.Fatalf("write 3 MB: %q exit %d", r.Output, exitCode(r))
		}
		got = m.CheckDisk(ctx)
	})
	if !slices.Equal(got, []string{hog.ID}) {
		t.Fatalf("failed %v, want [%s]", got, hog.ID)
	}
	info, err := m.Get(ctx, hog.ID)
	if err != nil || info.State != sandbox.StateFailed || !strings.Contains(info.FailureReason, "disk_bytes") {
		t.Fatalf("over-quota sandbox: %+v, %v", info, err)
	}
	if f, err := m.Files(hog.ID); err == nil {
		if _, err := f.Ls(ctx, "/workspace"); err == nil {
			t.Fatal("the failed sandbox still serves")
		}
	}
	for _, id := range []string{small.ID, neighbour.ID} {
		if r := exec(t, m, id, "echo alive", 120); r.Output != "alive\n" {
			t.Fatalf("%s after the watchdog: %q", id, r.Output)
		}
	}
	if got := m.CheckDisk(ctx); len(got) != 0 {
		t.Fatalf("second round failed %v, want none", got)
	}
}

// TestDiskWatchdogCountsInodes (the DiskWatchdog fallback): a workspace of empty files, far under its
// disk_bytes in bytes, is failed once it holds more files than the inode
// ceiling derived from disk_bytes allows, even with them in a directory
// box code made unreadable; a box under both bounds keeps serving.
func TestDiskWatchdogCountsInodes(t *testing.T) {
	e := newEnv(t)
	e.cfg.DiskEnforcement = sandbox.DiskWatchdog
	m := e.manager(t)
	ctx := context.Background()
	const limit = 1 << 20 // 256 inodes
	if sandbox.InodeCeiling(limit) != 256 {
		t.Fatalf("inode ceiling of 1 MiB: %d, want 256", sandbox.InodeCeiling(limit))
	}
	hog := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{DiskBytes: limit}})
	small := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{DiskBytes: limit}})
	const files = `mkdir -p d && i=0; while [ $i -lt %d ]; do : > d/f$i; i=$((i+1)); done; chmod 000 d`
	if r := exec(t, m, hog.ID, fmt.Sprintf(files, 1000), 120); exitCode(r) != 0 {
		t.Fatalf("make 1000 files: %q exit %d", r.Output, exitCode(r))
	}
	if r := exec(t, m, small.ID, fmt.Sprintf(files, 100), 120); exitCode(r) != 0 {
		t.Fatalf("make 100 files: %q exit %d", r.Output, exitCode(r))
	}
	if got := m.CheckDisk(ctx); !slices.Equal(got, []string{hog.ID}) {
		t.Fatalf("failed %v, want [%s]", got, hog.ID)
	}
	info, err := m.Get(ctx, hog.ID)
	if err != nil || info.State != sandbox.StateFailed || !strings.Contains(info.FailureReason, "files, directories and links") || !strings.Contains(info.FailureReason, "disk_bytes") {
		t.Fatalf("sandbox over its inodes: %+v, %v", info, err)
	}
	if r := exec(t, m, small.ID, "echo alive", 120); r.Output != "alive\n" {
		t.Fatalf("the box under its bounds: %q", r.Output)
	}
}
