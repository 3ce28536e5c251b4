package sandbox_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
)

// volumeTenants are the tenants the volume tests use; cleanupVolumes
// deletes their volumes.
var volumeTenants = []string{"acme", "evil", ""}

// cleanupVolumes deletes every volume of volumeTenants that *m holds when
// t ends. Register it before the manager: cleanups run last first, so it
// runs after the manager's own (which deletes its sandboxes, so no volume
// is in use any more).
func cleanupVolumes(t *testing.T, m **sandbox.Manager) {
	t.Cleanup(func() {
		if *m == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, tenant := range volumeTenants {
			for _, v := range (*m).ListVolumes(tenant) {
				if err := (*m).DeleteVolume(ctx, tenant, v.ID); err != nil {
					t.Errorf("delete volume %s: %v", v.ID, err)
				}
			}
		}
	})
}

func TestNamedVolume(t *testing.T) {
	e := newEnv(t)
	for _, rt := range sandboxtest.Runtimes(t, e.cli) {
		t.Run(rt, func(t *testing.T) { testNamedVolume(t, newEnv(t), rt) })
	}
}

func testNamedVolume(t *testing.T, e *env, runtime string) {
	var m *sandbox.Manager
	cleanupVolumes(t, &m)
	m = e.manager(t)
	ctx := ctxMinute(t)
	v, err := m.CreateVolume(ctx, "acme", "data", 16<<20)
	if err != nil {
		t.Fatalf("create volume: %v", err)
	}
	if sandboxapi.VolumeWorkerOf(v.ID) != e.worker || v.Name != "data" || v.SizeBytes != 16<<20 {
		t.Fatalf("volume: %+v", v)
	}
	ev, err := e.cli.VolumeInspect(ctx, sandbox.VolumeEngineName(v.ID), client.VolumeInspectOptions{})
	if err != nil || ev.Volume.Options["o"] != "nosuid,nodev" || ev.Volume.Options["type"] != "ext2" {
		t.Fatalf("engine volume: %+v %v", ev.Volume.Options, err)
	}
	rt := sandbox.Template{Runtime: runtime}
	a := e.create(t, m, sandbox.CreateSpec{Tenant: "acme", Overrides: rt, Volumes: []sandbox.VolumeMount{{Name: "data", MountPath: "/data"}}})
	if len(a.Volumes) != 1 || a.Volumes[0].ID != v.ID {
		t.Fatalf("the box's mounts: %+v", a.Volumes)
	}
	// The root belongs to the sandbox user; box code writes into it.
	if r := exec(t, m, a.ID, "stat -c '%u %a' /data && echo kept > /data/f && mkdir /data/d && echo ok", 30); r.Output != "1000 755\nok\n" {
		t.Fatalf("write the volume: %q", r.Output)
	}
	if runtime == "runc" { // gVisor shows its own mount table
		if r := exec(t, m, a.ID, "grep ' /data ' /proc/mounts", 30); !strings.Contains(r.Output, "nosuid") || !strings.Contains(r.Output, "nodev") {
			t.Errorf("the volume's mount: %q, want nosuid and nodev", r.Output)
		}
	}
	// Bounded like a workspace file system.
	if r := exec(t, m, a.ID, "dd if=/dev/zero of=/data/big bs=1048576 count=32 2>&1; rm -f /data/big", 60); !strings.Contains(r.Output, "No space left") {
		t.Errorf("writing past the volume's size: %q", r.Output)
	}
	// By id, read-only, in a second box at another path.
	b := e.create(t, m, sandbox.CreateSpec{Tenant: "acme", Overrides: rt, Volumes: []sandbox.VolumeMount{{Name: v.ID, MountPath: "/mnt/in", ReadOnly: true}}})
	if r := exec(t, m, b.ID, "cat /mnt/in/f; (echo x > /mnt/in/g) 2>/dev/null || echo refused", 30); r.Output != "kept\nrefused\n" {
		t.Errorf("a read-only mount: %q", r.Output)
	}
	if l := m.ListVolumes("acme"); len(l) != 1 || strings.Join(l[0].Sandboxes, ",") != strings.Join(sortedIDs(a.ID, b.ID), ",") {
		t.Errorf("list: %+v", l)
	}
	if err := m.DeleteVolume(ctx, "acme", "data"); sandbox.CodeOf(err) != sandbox.CodeVolumeInUse {
		t.Errorf("delete a volume in use: %v", err)
	}

	// Another tenant: not found, by name or id, for every call.
	if _, err := m.Create(ctx, sandbox.CreateSpec{Tenant: "evil", Volumes: []sandbox.VolumeMount{{Name: v.ID, MountPath: "/data"}}}); sandbox.CodeOf(err) != sandbox.CodeVolumeNotFound {
		t.Errorf("another tenant mounts it by id: %v", err)
	}
	if _, err := m.Create(ctx, sandbox.CreateSpec{Tenant: "evil", Volumes: []sandbox.VolumeMount{{Name: "data", MountPath: "/data"}}}); sandbox.CodeOf(err) != sandbox.CodeVolumeNotFound {
		t.Errorf("another tenant mounts it by name: %v", err)
	}
	if err := m.DeleteVolume(ctx, "evil", v.ID); sandbox.CodeOf(err) != sandbox.CodeVolumeNotFound {
		t.Errorf("another tenant deletes it: %v", err)
	}
	if l := m.ListVolumes("evil"); len(l) != 0 {
		t.Errorf("another tenant lists %+v", l)
	}
	// A mount path over the workspace is refused, naming the field.
	_, err = m.Create(ctx, sandbox.CreateSpec{Tenant: "acme", Volumes: []sandbox.VolumeMount{{Name: "data", MountPath: "/workspace/data"}}})
	if se := asError(err); se == nil || se.Code != sandbox.CodeInvalid || se.Field != "volumes[0].mount_path" {
		t.Errorf("a mount under the workspace: %v", err)
	}

	// The data outlives the boxes.
	for _, id := range []string{a.ID, b.ID} {
		if err := m.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	c := e.create(t, m, sandbox.CreateSpec{Tenant: "acme", Overrides: rt, Volumes: []sandbox.VolumeMount{{Name: "data", MountPath: "/data"}}})
	if r := exec(t, m, c.ID, "cat /data/f; ls /data", 30); r.Output != "kept\nd\nf\n" {
		t.Errorf("a later box reads %q", r.Output)
	}
	if err := m.Delete(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteVolume(ctx, "acme", "data"); err != nil {
		t.Fatalf("delete the unused volume: %v", err)
	}
	for _, name := range []string{sandbox.VolumeEngineName(v.ID), sandbox.DiskVolume(v.ID)} {
		if _, err := e.cli.VolumeInspect(ctx, name, client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
			t.Errorf("engine volume %s after the delete: %v", name, err)
		}
	}
	if l := m.ListVolumes("acme"); len(l) != 0 {
		t.Errorf("list after the delete: %+v", l)
	}
}

func sortedIDs(a, b string) []string {
	if a < b {
		return []string{a, b}
	}
	return []string{b, a}
}

func asError(err error) *sandbox.Error {
	if se, ok := err.(*sandbox.Error); ok {
		return se
	}
	return nil
}

func TestVolumeQuotaAndNames(t *testing.T) {
	e := newEnv(t)
	e.cfg.Volumes.PerTenantBytes = 40 << 20
	var m *sandbox.Manager
	cleanupVolumes(t, &m)
	m = e.manager(t)
	ctx := ctxMinute(t)
	for _, tt := range []struct {
		name, tenant, volume string
		size                 int64
		code                 sandbox.Code
		field, limit         string
	}{
		{"first", "acme", "one", 16 << 20, "", "", ""},
		{"same name", "acme", "one", 8 << 20, sandbox.CodeVolumeExists, "", ""},
		{"second", "acme", "two", 16 << 20, "", "", ""},
		{"over the tenant's quota", "acme", "three", 16 << 20, sandbox.CodeQuota, "", "volumes.per_tenant_bytes"},
		{"another tenant, same name", "evil", "one", 16 << 20, "", "", ""},
		{"bad name", "acme", "Bad/name", 8 << 20, sandbox.CodeInvalid, "name", ""},
		{"id-like name", "acme", "vol-x-y", 8 << 20, sandbox.CodeInvalid, "name", ""},
		{"too small", "acme", "tiny", 4096, sandbox.CodeInvalid, "size_bytes", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.CreateVolume(ctx, tt.tenant, tt.volume, tt.size)
			if sandbox.CodeOf(err) != tt.code {
				t.Fatalf("create: %v, want code %q", err, tt.code)
			}
			if se := asError(err); se != nil && (se.Field != tt.field || se.Limit != tt.limit) {
				t.Errorf("create: field %q limit %q, want %q %q", se.Field, se.Limit, tt.field, tt.limit)
			}
		})
	}
	if l := m.ListVolumes("acme"); len(l) != 2 || l[0].Name != "one" || l[1].Name != "two" {
		t.Errorf("acme's volumes: %+v", l)
	}
	// Nothing of the refused ones is left in the engine.
	list, err := e.cli.VolumeList(ctx, client.VolumeListOptions{Filters: client.Filters{}.Add("label", sandbox.LabelVolume).Add("label", sandbox.LabelWorker+"="+e.worker)})
	if err != nil || len(list.Items) != 3 {
		t.Errorf("engine volumes: %d (%v), want 3", len(list.Items), err)
	}
}

// A restarted worker knows its volumes again and which boxes mount them.
func TestVolumeSurvivesRestart(t *testing.T) {
	e := newEnv(t)
	ctx := ctxMinute(t)
	var m2 *sandbox.Manager
	cleanupVolumes(t, &m2)
	m1, err := sandbox.NewManager(ctx, e.cli, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := m1.CreateVolume(ctx, "acme", "cache", 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	a := e.create(t, m1, sandbox.CreateSpec{Tenant: "acme", Volumes: []sandbox.VolumeMount{{Name: "cache", MountPath: "/cache"}}})
	exec(t, m1, a.ID, "echo kept > /cache/f", 30)
	m1.Close()

	m2 = e.manager(t)
	l := m2.ListVolumes("acme")
	if len(l) != 1 || l[0].ID != v.ID || l[0].Name != "cache" || l[0].SizeBytes != 8<<20 || len(l[0].Sandboxes) != 1 || l[0].Sandboxes[0] != a.ID {
		t.Fatalf("after the restart: %+v", l)
	}
	if err := m2.DeleteVolume(ctx, "acme", "cache"); sandbox.CodeOf(err) != sandbox.CodeVolumeInUse {
		t.Errorf("delete a volume an adopted box mounts: %v", err)
	}
	if r := exec(t, m2, a.ID, "cat /cache/f", 30); r.Output != "kept\n" {
		t.Errorf("the adopted box reads %q", r.Output)
	}
	// The collector leaves volumes and their images alone.
	m2.Collect(ctx)
	for _, name := range []string{sandbox.VolumeEngineName(v.ID), sandbox.DiskVolume(v.ID)} {
		if _, err := e.cli.VolumeInspect(ctx, name, client.VolumeInspectOptions{}); err != nil {
			t.Errorf("engine volume %s after a collection: %v", name, err)
		}
	}
}

// Snapshots hold the working directory only: a volume's files are not in
// them, and a restore mounts the volume as it is now.
func TestSnapshotLeavesVolumesOut(t *testing.T) {
	e := newEnv(t)
	e.withSnapshots(t, 0)
	var m *sandbox.Manager
	cleanupVolumes(t, &m)
	m = e.manager(t)
	ctx := ctxMinute(t)
	if _, err := m.CreateVolume(ctx, "acme", "data", 8<<20); err != nil {
		t.Fatal(err)
	}
	mounts := []sandbox.VolumeMount{{Name: "data", MountPath: "/data"}}
	a := e.create(t, m, sandbox.CreateSpec{Tenant: "acme", Volumes: mounts})
	exec(t, m, a.ID, "echo ws > /workspace/w; echo vol > /data/v", 30)
	snap, err := m.Snapshot(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range snap.Entries {
		if en.Path == "v" || strings.HasPrefix(en.Path, "data") {
			t.Errorf("the snapshot holds %q", en.Path)
		}
	}
	exec(t, m, a.ID, "echo later > /data/v", 30)
	b := e.create(t, m, sandbox.CreateSpec{Tenant: "acme", Snapshot: snap.ID, Volumes: mounts})
	if r := exec(t, m, b.ID, "cat /workspace/w /data/v", 30); r.Output != "ws\nlater\n" {
		t.Errorf("restored box reads %q", r.Output)
	}
	// A hibernated box keeps its volume in use and mounts it again when
	// it wakes.
	if _, err := m.Suspend(ctx, a.ID, sandbox.SuspendHibernate); err != nil {
		t.Fatalf("hibernate: %v", err)
	}
	if err := m.DeleteVolume(ctx, "acme", "data"); sandbox.CodeOf(err) != sandbox.CodeVolumeInUse {
		t.Errorf("delete a volume a hibernated box mounts: %v", err)
	}
	exec(t, m, b.ID, "echo while-asleep > /data/v", 30)
	if r := exec(t, m, a.ID, "cat /workspace/w /data/v", 30); r.Output != "ws\nwhile-asleep\n" {
		t.Errorf("the woken box reads %q", r.Output)
	}
}

func TestForkSandbox(t *testing.T) {
	e := newEnv(t)
	for _, rt := range sandboxtest.Runtimes(t, e.cli) {
		t.Run(rt, func(t *testing.T) { testFork(t, newEnv(t), rt) })
	}
}

func testFork(t *testing.T, e *env, runtime string) {
	e.withSnapshots(t, 0)
	e.cfg.MaxSandboxes = 6
	e.cfg.Defaults.Runtime = runtime
	m := e.manager(t)
	ctx := ctxMinute(t)
	a := e.create(t, m, sandbox.CreateSpec{Tenant: "acme"})
	if r := exec(t, m, a.ID, workspaceScript, 60); r.Output != "ok\n" {
		t.Fatalf("fill: %q", r.Output)
	}
	want := exec(t, m, a.ID, listScript, 60).Output
	if runtime == "runsc" {
		// gVisor keeps a FIFO made by box code in its own kernel (see
		// testHibernate): the snapshot has no such file.
		want = strings.Replace(want, "./fifo fifo 664 1000\n", "", 1)
	}
	snap, err := m.Snapshot(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	boxes, err := m.Fork(ctx, sandbox.CreateSpec{Tenant: "acme", Snapshot: snap.ID, Labels: map[string]string{"fork": "1"}}, 3)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	seen := map[string]bool{a.ID: true}
	for i, b := range boxes {
		if b.Settings.Runtime != runtime {
			t.Errorf("fork %d runs under %q, want %q", i, b.Settings.Runtime, runtime)
		}
		if seen[b.ID] || b.State != sandbox.StateRunning || b.Snapshot != snap.ID || b.Labels["fork"] != "1" || b.Tenant != "acme" {
			t.Errorf("fork %d: %+v", i, b)
		}
		seen[b.ID] = true
		sandboxtest.AssertHardened(t, e.cli, b.ContainerID)
		if got := exec(t, m, b.ID, listScript, 60).Output; got != want {
			t.Errorf("fork %d's workspace differs:\n got: %s\nwant: %s", i, got, want)
		}
	}
	// Each fork's workspace is its own.
	exec(t, m, boxes[0].ID, "echo mine > /workspace/d/f", 30)
	if r := exec(t, m, boxes[1].ID, "cat /workspace/d/f", 30); r.Output != "hello" {
		t.Errorf("a sibling fork reads %q", r.Output)
	}

	n := len(m.List(nil))
	for _, tt := range []struct {
		name  string
		spec  sandbox.CreateSpec
		count int
		code  sandbox.Code
		field string
	}{
		{"count 0", sandbox.CreateSpec{Tenant: "acme", Snapshot: snap.ID}, 0, sandbox.CodeInvalid, "count"},
		{"count over the limit", sandbox.CreateSpec{Tenant: "acme", Snapshot: snap.ID}, sandbox.MaxForkCount + 1, sandbox.CodeInvalid, "count"},
		{"no snapshot", sandbox.CreateSpec{Tenant: "acme"}, 1, sandbox.CodeInvalid, "snapshot_id"},
		{"another tenant's snapshot", sandbox.CreateSpec{Tenant: "evil", Snapshot: snap.ID}, 1, sandbox.CodeSnapshotNotFound, ""},
		{"over the worker's capacity", sandbox.CreateSpec{Tenant: "acme", Snapshot: snap.ID}, 3, sandbox.CodeQuota, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Fork(ctx, tt.spec, tt.count)
			if sandbox.CodeOf(err) != tt.code {
				t.Fatalf("fork: %v, want %q", err, tt.code)
			}
			if se := asError(err); tt.field != "" && (se == nil || se.Field != tt.field) {
				t.Errorf("fork: %v, want field %q", err, tt.field)
			}
			if got := len(m.List(nil)); got != n {
				t.Errorf("%d sandboxes after a refused fork, %d before", got, n)
			}
		})
	}
}

// startFailingEngine fails every ContainerStart after the first after.
type startFailingEngine struct {
	*client.Client
	after   atomic.Int32
	started atomic.Int32
}

func (e *startFailingEngine) ContainerStart(ctx context.Context, id string, opts client.ContainerStartOptions) (client.ContainerStartResult, error) {
	if e.started.Add(1) > e.after.Load() {
		return client.ContainerStartResult{}, cerrdefs.ErrUnavailable.WithMessage("injected start failure")
	}
	return e.Client.ContainerStart(ctx, id, opts)
}

// A fork that fails part way removes every box it made: no sandbox,
// container or workspace volume of it is left.
func TestForkIsAllOrNothing(t *testing.T) {
	e := newEnv(t)
	e.withSnapshots(t, 0)
	eng := &startFailingEngine{Client: e.cli}
	eng.after.Store(1 << 30)
	m := e.managerOn(t, eng)
	ctx := ctxMinute(t)
	a := e.create(t, m, sandbox.CreateSpec{})
	exec(t, m, a.ID, "echo hi > /workspace/f", 30)
	snap, err := m.Snapshot(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	eng.after.Store(eng.started.Load() + 2) // the third box of the fork fails to start
	_, err = m.Fork(ctx, sandbox.CreateSpec{Snapshot: snap.ID}, 4)
	if err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("fork with a failing start: %v", err)
	}
	if l := m.List(nil); len(l) != 1 || l[0].ID != a.ID {
		t.Errorf("sandboxes after the failed fork: %+v", l)
	}
	list, err := e.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", sandbox.LabelWorker+"="+e.worker).Add("label", sandbox.LabelSandbox)})
	if err != nil || len(list.Items) != 1 {
		t.Errorf("containers after the failed fork: %d (%v), want 1", len(list.Items), err)
	}
	vols, err := e.cli.VolumeList(ctx, client.VolumeListOptions{Filters: client.Filters{}.Add("name", "plumb-ws-sbx-"+e.worker)})
	if err != nil || len(vols.Items) != 1 {
		t.Errorf("workspace volumes after the failed fork: %d (%v), want 1", len(vols.Items), err)
	}
	if n, _ := m.Usage(); n != 1 {
		t.Errorf("usage after the failed fork: %d sandboxes", n)
	}
}

// Under runc a fork takes warm-pool boxes first and fills their
// workspaces while they run: with a pool of two, a fork of three is two
// pool boxes and one cold, every workspace the snapshot exactly; a fork
// that fails (an unknown snapshot) takes pool boxes and leaves none of
// them, nor any count, behind.
func TestForkTakesWarmPoolBoxes(t *testing.T) {
	e := poolEnv(t, 2)
	e.withSnapshots(t, 0)
	e.cfg.Defaults.Runtime = "runc"
	m := e.manager(t)
	ctx := ctxMinute(t)
	a := e.create(t, m, sandbox.CreateSpec{Tenant: "acme", Overrides: sandbox.Template{TTL: 30 * time.Minute}})
	if r := exec(t, m, a.ID, workspaceScript, 60); r.Output != "ok\n" {
		t.Fatalf("fill: %q", r.Output)
	}
	want := exec(t, m, a.ID, listScript, 60).Output
	snap, err := m.Snapshot(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	waitPool(t, m, 2)
	pooled := e.poolBoxes(t)
	before := poolOf(t, m)
	boxes, err := m.Fork(ctx, sandbox.CreateSpec{Tenant: "acme", Snapshot: snap.ID, Labels: map[string]string{"fork": "1"}}, 3)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	fromPool := 0
	for i, b := range boxes {
		if slices.Contains(pooled, b.ID) {
			fromPool++
		}
		if b.State != sandbox.StateRunning || b.Snapshot != snap.ID || b.Labels["fork"] != "1" || b.Tenant != "acme" {
			t.Errorf("fork %d: %+v", i, b)
		}
		sandboxtest.AssertHardened(t, e.cli, b.ContainerID)
		if got := exec(t, m, b.ID, listScript, 60).Output; got != want {
			t.Errorf("fork %d's workspace differs:\n got: %s\nwant: %s", i, got, want)
		}
	}
	if p := poolOf(t, m); fromPool != 2 || p.Hits != before.Hits+2 {
		t.Errorf("%d of the fork's boxes came from the pool (%+v), want 2", fromPool, p)
	}
	if n, _ := m.Usage(); n != 4 {
		t.Errorf("usage %d after the fork, want 4", n)
	}
	for _, b := range boxes {
		if err := m.Delete(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
	}

	waitPool(t, m, 2)
	pooled = e.poolBoxes(t)
	if _, err := m.Fork(ctx, sandbox.CreateSpec{Tenant: "acme", Snapshot: "snap-nosuchsnapshot0000000000"}, 3); sandbox.CodeOf(err) != sandbox.CodeSnapshotNotFound {
		t.Fatalf("fork of an unknown snapshot: %v", err)
	}
	if n, mem := m.Usage(); n != 1 || len(m.List(nil)) != 1 {
		t.Errorf("after a refused fork: usage %d (%d bytes), %d listed; want only the source box", n, mem, len(m.List(nil)))
	}
	for _, id := range pooled {
		for _, name := range []string{id, id + "-claimed"} {
			if _, err := e.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
				t.Errorf("pool box %s taken by the refused fork is still there: %v", name, err)
			}
		}
	}
}
