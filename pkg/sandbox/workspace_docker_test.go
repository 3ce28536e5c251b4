package sandbox_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"github.com/plumbhq/plumb/pkg/snapshot"
	"go.uber.org/zap/zaptest"
)

// withSnapshots gives e's managers a snapshot store in a temporary
// directory, which it returns.
func (e *env) withSnapshots(t *testing.T, quota int64) string {
	t.Helper()
	dir := t.TempDir()
	store, err := snapshot.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := snapshot.NewRepo(store, quota)
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.Snapshots = repo
	return dir
}

// workspaceScript fills a workspace with a subdirectory, files (one of
// 3 MiB, several chunks), a hard link, a symlink pointing outside and a
// FIFO.
const workspaceScript = `set -e; cd /workspace
mkdir -p d/e; printf hello > d/f; chmod 640 d/f; ln d/f hard; ln -s /etc/passwd escape; mkfifo fifo
dd if=/dev/urandom of=big bs=1024 count=3072 2>/dev/null; echo ok`

// listScript describes every workspace entry: type, content hash, mode,
// link count and owner, or a symlink's target.
const listScript = `cd /workspace && for p in $(find . | sort); do
if [ -L "$p" ]; then echo "$p link $(readlink "$p")";
elif [ -p "$p" ]; then echo "$p fifo $(stat -c '%a %u' "$p")";
elif [ -d "$p" ]; then echo "$p dir $(stat -c '%a %u' "$p")";
else echo "$p file $(md5sum < "$p" | cut -c1-32) $(stat -c '%a %h %u' "$p")"; fi; done`

func ctxMinute(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestSnapshotRestoreWorkspace(t *testing.T) {
	e := newEnv(t)
	e.withSnapshots(t, 0)
	m := e.manager(t)
	ctx := ctxMinute(t)
	a := e.create(t, m, sandbox.CreateSpec{Tenant: "acme"})
	if r := exec(t, m, a.ID, workspaceScript, 60); r.Output != "ok\n" {
		t.Fatalf("fill the workspace: %q", r.Output)
	}
	want := exec(t, m, a.ID, listScript, 60).Output
	for _, s := range []string{"./hard file", "./escape link /etc/passwd", "./fifo fifo", "./d/e dir", "640 2 1000"} {
		if !strings.Contains(want, s) {
			t.Fatalf("the listing lacks %q:\n%s", s, want)
		}
	}

	first, err := m.Snapshot(ctx, a.ID)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if first.Size < 3<<20 || first.StoredBytes < 3<<20 {
		t.Errorf("first snapshot: size %d, stored %d", first.Size, first.StoredBytes)
	}
	if info, _ := m.Get(ctx, a.ID); info.State != sandbox.StateRunning {
		t.Errorf("after a snapshot the box is %s", info.State)
	}
	second, err := m.Snapshot(ctx, a.ID)
	if err != nil {
		t.Fatalf("second snapshot: %v", err)
	}
	if second.StoredBytes*20 > first.StoredBytes || second.Parent != first.ID {
		t.Errorf("an unchanged second snapshot stored %d bytes (first %d; over 5%%), parent %q", second.StoredBytes, first.StoredBytes, second.Parent)
	}

	// Both fills restore exactly the same workspace (each on a worker of
	// its own that shares the store).
	for _, fill := range fills {
		t.Run(fill.name, func(t *testing.T) {
			e := newEnv(t)
			e.cfg.Snapshots, e.cfg.EngineFill = m.Config().Snapshots, fill.engine
			api := &countingCopy{Client: e.cli}
			m := e.managerOn(t, api)
			b, err := m.Create(ctx, sandbox.CreateSpec{Tenant: "acme", Snapshot: first.ID})
			if err != nil {
				t.Fatalf("create from the snapshot: %v", err)
			}
			if n := api.copied.Load(); (n > 0) != fill.engine {
				t.Errorf("the engine copied %d bytes", n)
			}
			sandboxtest.AssertHardened(t, e.cli, b.ContainerID)
			if got := exec(t, m, b.ID, listScript, 60).Output; got != want {
				t.Errorf("restored workspace differs:\n got: %s\nwant: %s", got, want)
			}
			if r := exec(t, m, b.ID, "echo more > /workspace/d/new && cat /workspace/hard", 30); r.Output != "hello" {
				t.Errorf("the restored box: %q", r.Output)
			}
			if err := m.Delete(ctx, b.ID); err != nil {
				t.Error(err)
			}
		})
	}

	// Another tenant sees no such snapshot.
	if _, err := m.Create(ctx, sandbox.CreateSpec{Tenant: "evil", Snapshot: first.ID}); sandbox.CodeOf(err) != sandbox.CodeSnapshotNotFound {
		t.Errorf("create from another tenant's snapshot: %v", err)
	}
	if l, err := m.ListSnapshots(ctx, "evil"); err != nil || len(l) != 0 {
		t.Errorf("another tenant lists %v (%v)", l, err)
	}
	if err := m.DeleteSnapshot(ctx, "evil", first.ID); sandbox.CodeOf(err) != sandbox.CodeSnapshotNotFound {
		t.Errorf("another tenant deletes: %v", err)
	}
	if l, err := m.ListSnapshots(ctx, "acme"); err != nil || len(l) != 2 {
		t.Errorf("list: %v (%v)", l, err)
	}
	for _, s := range []string{first.ID, second.ID} {
		if err := m.DeleteSnapshot(ctx, "acme", s); err != nil {
			t.Errorf("delete %s: %v", s, err)
		}
	}
}

func TestRestoreCorruptSnapshotIsDataLoss(t *testing.T) {
	e := newEnv(t)
	dir := e.withSnapshots(t, 0)
	m := e.manager(t)
	ctx := ctxMinute(t)
	a := e.create(t, m, sandbox.CreateSpec{})
	exec(t, m, a.ID, "dd if=/dev/urandom of=/workspace/x bs=1024 count=100 2>/dev/null", 30)
	snap, err := m.Snapshot(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte in every chunk of the store.
	n := 0
	_ = filepath.WalkDir(filepath.Join(dir, "chunks"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0x55
			n++
			return os.WriteFile(p, b, 0o600)
		}
		return err
	})
	if n == 0 {
		t.Fatal("no chunk in the store")
	}
	before := len(m.List(nil))
	_, err = m.Create(ctx, sandbox.CreateSpec{Snapshot: snap.ID})
	if sandbox.CodeOf(err) != sandbox.CodeDataLoss {
		t.Fatalf("create from a corrupt snapshot: %v, want data loss", err)
	}
	if after := len(m.List(nil)); after != before {
		t.Errorf("%d sandboxes after the failed restore, %d before", after, before)
	}
	list, err := e.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", sandbox.LabelWorker+"="+e.worker)})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("the failed restore left containers: %d of the worker's exist, want 1", len(list.Items))
	}
}

func TestPauseThenExecuteWakes(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t)
	ctx := ctxMinute(t)
	a := e.create(t, m, sandbox.CreateSpec{})
	exec(t, m, a.ID, "echo kept > /workspace/f", 30)
	res, err := m.Suspend(ctx, a.ID, sandbox.SuspendPause)
	if err != nil {
		t.Fatalf("pause: %v", err)
	}
	if res.Info.State != sandbox.StatePaused || !res.ProcessesKept {
		t.Fatalf("pause: %+v", res)
	}
	ci, err := e.cli.ContainerInspect(ctx, a.ContainerID, client.ContainerInspectOptions{})
	if err != nil || !ci.Container.State.Paused {
		t.Fatalf("the container is not paused: %v", err)
	}
	if r := exec(t, m, a.ID, "cat /workspace/f", 30); r.Output != "kept\n" {
		t.Fatalf("execute on a paused box: %q", r.Output)
	}
	if info, _ := m.Get(ctx, a.ID); info.State != sandbox.StateRunning {
		t.Errorf("after the wake the box is %s", info.State)
	}
	// A paused box is deleted as it is.
	if _, err := m.Suspend(ctx, a.ID, sandbox.SuspendPause); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, a.ID); err != nil {
		t.Fatalf("delete a paused box: %v", err)
	}
	if _, err := e.cli.ContainerInspect(ctx, a.ContainerID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("the deleted paused box's container: %v", err)
	}
}

func TestHibernateThenExecuteRecreates(t *testing.T) {
	e := newEnv(t)
	for _, rt := range sandboxtest.Runtimes(t, e.cli) {
		t.Run(rt, func(t *testing.T) { testHibernate(t, newEnv(t), rt) })
	}
}

func testHibernate(t *testing.T, e *env, runtime string) {
	e.withSnapshots(t, 0)
	m := e.manager(t)
	ctx := ctxMinute(t)
	a := e.create(t, m, sandbox.CreateSpec{Tenant: "acme", Overrides: sandbox.Template{Runtime: runtime}})
	if r := exec(t, m, a.ID, workspaceScript, 60); r.Output != "ok\n" {
		t.Fatalf("fill: %q", r.Output)
	}
	want := exec(t, m, a.ID, listScript, 60).Output
	res, err := m.Suspend(ctx, a.ID, sandbox.SuspendHibernate)
	if err != nil {
		t.Fatalf("hibernate: %v", err)
	}
	if res.Info.State != sandbox.StateHibernated || res.ProcessesKept || res.Snapshot == "" {
		t.Fatalf("hibernate: %+v", res)
	}
	if ci, err := e.cli.ContainerInspect(ctx, a.ContainerID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("the hibernated box's container still exists: %v %+v", err, ci.Container.State)
	}
	if _, err := e.cli.VolumeInspect(ctx, "plumb-ws-"+a.ID, client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("the hibernated box's volume still exists: %v", err)
	}
	if runtime == "runsc" {
		// gVisor keeps a FIFO made by box code in its own kernel: the host's
		// view of the volume, and so the snapshot, has no such file.
		want = strings.Replace(want, "./fifo fifo 664 1000\n", "", 1)
	}
	if got := exec(t, m, a.ID, listScript, 60).Output; got != want {
		t.Errorf("woken workspace differs:\n got: %s\nwant: %s", got, want)
	}
	info, err := m.Get(ctx, a.ID)
	if err != nil || info.State != sandbox.StateRunning || info.ContainerID == a.ContainerID {
		t.Fatalf("after the wake: %+v %v", info, err)
	}
	sandboxtest.AssertHardened(t, e.cli, info.ContainerID)
	// Delete removes the hibernation's snapshot with the box.
	if err := m.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if l, _ := m.ListSnapshots(ctx, "acme"); len(l) != 1 {
		t.Logf("snapshots after delete: %v", l) // the box was awake: its snapshot is an ordinary one
	}
}

func TestIdleBoxesSuspendThemselves(t *testing.T) {
	e := newEnv(t)
	e.withSnapshots(t, 0)
	var offset atomic.Int64 // the worker's reap loop reads the clock too
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	e.cfg.Templates = map[string]sandbox.Template{
		"pausing":     {IdleSuspendAfter: time.Minute},
		"hibernating": {HibernateAfter: 10 * time.Minute},
	}
	m := e.manager(t, sandbox.WithClock(clock))
	ctx := ctxMinute(t)
	p := e.create(t, m, sandbox.CreateSpec{Template: "pausing"})
	h := e.create(t, m, sandbox.CreateSpec{Template: "hibernating", Tenant: "acme"})
	exec(t, m, h.ID, "echo kept > /workspace/f", 30)
	offset.Store(int64(2 * time.Minute))
	m.Reap(ctx)
	if info, _ := m.Get(ctx, p.ID); info.State != sandbox.StatePaused {
		t.Errorf("an idle box with idle_suspend_after is %s", info.State)
	}
	if info, _ := m.Get(ctx, h.ID); info.State != sandbox.StateRunning {
		t.Errorf("a box idle less than hibernate_after is %s", info.State)
	}
	offset.Store(int64(20 * time.Minute))
	m.Reap(ctx)
	if info, _ := m.Get(ctx, h.ID); info.State != sandbox.StateHibernated {
		t.Errorf("an idle box with hibernate_after is %s", info.State)
	}
	if r := exec(t, m, h.ID, "cat /workspace/f", 30); r.Output != "kept\n" {
		t.Errorf("the woken box: %q", r.Output)
	}
	if r := exec(t, m, p.ID, "echo awake", 30); r.Output != "awake\n" {
		t.Errorf("the unpaused box: %q", r.Output)
	}
}

// A paused box survives a worker restart: re-adopted as paused (not
// removed as a stopped container), with its template's idle settings, and
// woken by the next call.
func TestRestartReadoptsPausedBox(t *testing.T) {
	e := newEnv(t)
	e.cfg.Templates = map[string]sandbox.Template{"idle": {IdleSuspendAfter: time.Hour}}
	ctx := ctxMinute(t)
	m1, err := sandbox.NewManager(ctx, e.cli, e.cfg, sandbox.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	info := e.create(t, m1, sandbox.CreateSpec{Template: "idle"})
	exec(t, m1, info.ID, "echo kept > /workspace/note", 30)
	if _, err := m1.Suspend(ctx, info.ID, sandbox.SuspendPause); err != nil {
		t.Fatal(err)
	}
	m1.Close()

	m2 := e.manager(t)
	got, err := m2.Get(ctx, info.ID)
	if err != nil || got.State != sandbox.StatePaused || got.Settings.IdleSuspendAfter != time.Hour {
		t.Fatalf("re-adopted paused box: %+v %v", got, err)
	}
	if r := exec(t, m2, info.ID, "cat /workspace/note", 30); r.Output != "kept\n" {
		t.Fatalf("after restart: %q", r.Output)
	}
}

// A workspace with a file system of its own (a disk limit) snapshots
// without the file system's lost+found, restores into a new one, and a
// snapshot over the new box's disk limit is refused before anything is
// made.
func TestSnapshotWithDiskLimit(t *testing.T) {
	e := newEnv(t)
	e.withSnapshots(t, 0)
	m := e.manager(t)
	ctx := ctxMinute(t)
	a := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{DiskBytes: 64 << 20}})
	exec(t, m, a.ID, "dd if=/dev/urandom of=/workspace/x bs=1024 count=3072 2>/dev/null; echo hi > /workspace/y", 30)
	snap, err := m.Snapshot(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range snap.Entries {
		if en.Path == "lost+found" {
			t.Error("the snapshot holds the file system's lost+found")
		}
	}
	b, err := m.Create(ctx, sandbox.CreateSpec{Snapshot: snap.ID, Overrides: sandbox.Template{DiskBytes: 64 << 20}})
	if err != nil {
		t.Fatalf("restore into a workspace file system: %v", err)
	}
	if r := exec(t, m, b.ID, "cat /workspace/y; wc -c < /workspace/x", 30); r.Output != "hi\n3145728\n" {
		t.Errorf("restored: %q", r.Output)
	}
	n := len(m.List(nil))
	_, err = m.Create(ctx, sandbox.CreateSpec{Snapshot: snap.ID, Overrides: sandbox.Template{DiskBytes: sandbox.MinDiskBytes}})
	if sandbox.CodeOf(err) != sandbox.CodeInvalid || !strings.Contains(err.Error(), "disk limit") {
		t.Errorf("a snapshot over the disk limit: %v", err)
	}
	if len(m.List(nil)) != n {
		t.Error("a refused restore left a sandbox")
	}
}

// unfinishedFreeze fails the first fails pauses the way runc does under
// cgroup v1 when a task of the box stays between states, then lets the
// engine pause.
type unfinishedFreeze struct {
	*client.Client
	fails atomic.Int32
}

func (u *unfinishedFreeze) ContainerPause(ctx context.Context, id string, opts client.ContainerPauseOptions) (client.ContainerPauseResult, error) {
	if u.fails.Add(-1) >= 0 {
		return client.ContainerPauseResult{}, fmt.Errorf("Error response from daemon: Cannot pause container %s: OCI runtime pause failed: unable to freeze: unknown", id)
	}
	return u.Client.ContainerPause(ctx, id, opts)
}

// TestPauseRetriesAnUnfinishedFreeze: a freeze the runtime gives up on is
// tried again; one that never finishes is UNAVAILABLE and leaves the box
// running and serving, never an internal error.
func TestPauseRetriesAnUnfinishedFreeze(t *testing.T) {
	e := newEnv(t)
	api := &unfinishedFreeze{Client: e.cli}
	m := e.managerOn(t, api)
	ctx := ctxMinute(t)
	a := e.create(t, m, sandbox.CreateSpec{})

	api.fails.Store(2)
	if _, err := m.Suspend(ctx, a.ID, sandbox.SuspendPause); err != nil {
		t.Fatalf("pause after two unfinished freezes: %v", err)
	}
	ci, err := e.cli.ContainerInspect(ctx, a.ContainerID, client.ContainerInspectOptions{})
	if err != nil || !ci.Container.State.Paused {
		t.Fatalf("the container is not paused: %v", err)
	}
	if _, err := m.Resume(ctx, a.ID); err != nil {
		t.Fatal(err)
	}

	api.fails.Store(1 << 20)
	_, err = m.Suspend(ctx, a.ID, sandbox.SuspendPause)
	if sandbox.CodeOf(err) != sandbox.CodeUnavailable {
		t.Fatalf("pause that never freezes: %v (code %v), want UNAVAILABLE", err, sandbox.CodeOf(err))
	}
	if info, _ := m.Get(ctx, a.ID); info.State != sandbox.StateRunning {
		t.Errorf("after the failed pause the box is %s, want running", info.State)
	}
	if r := exec(t, m, a.ID, "echo up", 30); r.Output != "up\n" {
		t.Errorf("execute after the failed pause: %q", r.Output)
	}
}
