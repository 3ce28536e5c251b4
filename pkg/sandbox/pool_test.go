package sandbox_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"go.uber.org/zap/zaptest"
)

// poolEnv is a test env whose defaults have a warm pool of size boxes.
func poolEnv(t *testing.T, size int) *env {
	e := newEnv(t)
	e.cfg.StateDir = t.TempDir()
	e.cfg.Pools = map[string]sandbox.PoolConfig{"": {Size: size}}
	return e
}

// poolOf returns the state of the defaults' pool.
func poolOf(t *testing.T, m *sandbox.Manager) sandbox.PoolState {
	t.Helper()
	for _, p := range m.Pools() {
		if p.Template == "" {
			return p
		}
	}
	t.Fatal("no pool for the defaults")
	return sandbox.PoolState{}
}

// waitPool polls until the defaults' pool has ready boxes and none starting.
func waitPool(t *testing.T, m *sandbox.Manager, ready int) sandbox.PoolState {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		p := poolOf(t, m)
		if p.Ready == ready && p.Starting == 0 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool never reached %d ready boxes: %+v", ready, p)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// poolBoxes lists the ids of this worker's containers made for a pool.
func (e *env) poolBoxes(t *testing.T) []string {
	t.Helper()
	list, err := e.cli.ContainerList(context.Background(), client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", sandbox.LabelWorker+"="+e.worker).Add("label", sandbox.LabelPool),
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, c.Labels[sandbox.LabelSandbox])
	}
	slices.Sort(ids)
	return ids
}

// restartable starts a manager with a full pool for a test that restarts
// the worker (restartableOn).
func (e *env) restartable(t *testing.T) (m *sandbox.Manager, close func()) {
	t.Helper()
	m, close = e.restartableOn(t, e.cli)
	waitPool(t, m, 1)
	return m, close
}

// restartableOn starts a manager of e's config on api for a test that
// restarts the worker: close leaves its boxes as they are, and the
// manager is cleaned up (its boxes deleted) only if the test ends before
// close.
func (e *env) restartableOn(t *testing.T, api sandbox.DockerAPI) (m *sandbox.Manager, close func()) {
	t.Helper()
	m, err := sandbox.NewManager(context.Background(), api, e.cfg, sandbox.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = m.DeleteAll(context.Background())
			m.Close()
		}
	})
	return m, func() { m.Close(); closed = true }
}

// TestPoolClaim: a create that matches the pool claims a warm box, which
// gets the request's owner, labels and TTL (counted from the claim) and a
// workspace nothing ever touched; the pool then refills with a new box.
func TestPoolClaim(t *testing.T) {
	e := poolEnv(t, 1)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	m := e.manager(t, sandbox.WithClock(clock))
	waitPool(t, m, 1)
	pooled := e.poolBoxes(t)
	if len(pooled) != 1 {
		t.Fatalf("pool boxes %v, want 1", pooled)
	}
	if n, _ := m.Usage(); n != 0 {
		t.Fatalf("usage %d with only a pool box, want 0", n)
	}

	mu.Lock()
	now = now.Add(10 * time.Minute) // well inside the idle lifetime
	claimedAt := now
	mu.Unlock()
	info := e.create(t, m, sandbox.CreateSpec{
		Labels: map[string]string{"thread": "t1"}, Tenant: "acme", Overrides: sandbox.Template{TTL: 5 * time.Minute},
	})
	if info.ID != pooled[0] {
		t.Fatalf("claimed %s, want the pool box %s", info.ID, pooled[0])
	}
	if p := poolOf(t, m); p.Hits != 1 || p.Misses != 0 {
		t.Fatalf("pool after a claim: %+v", p)
	}
	if !info.CreatedAt.Equal(claimedAt) || !info.ExpiresAt.Equal(claimedAt.Add(5*time.Minute)) || info.Settings.TTL != 5*time.Minute {
		t.Fatalf("claimed box times: created %v expires %v ttl %v; want created at the claim %v with a 5m TTL", info.CreatedAt, info.ExpiresAt, info.Settings.TTL, claimedAt)
	}
	if owner, err := m.Owner(info.ID); err != nil || owner != "acme" {
		t.Fatalf("owner %q, %v; want acme", owner, err)
	}
	if !maps.Equal(info.Labels, map[string]string{"thread": "t1"}) {
		t.Fatalf("labels %v", info.Labels)
	}
	if got := m.List(map[string]string{"thread": "t1"}); len(got) != 1 || got[0].ID != info.ID {
		t.Fatalf("list by the claim's label: %+v", got)
	}
	if n, _ := m.Usage(); n != 1 {
		t.Fatalf("usage %d after the claim, want 1", n)
	}

	// A cold box of the same settings sees the same clean box.
	cold := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{MemoryBytes: 96 << 20}})
	const look = "ls -A /workspace /tmp; ps -o user,args | grep -v -e ' ps ' -e grep -e 'sh -c'"
	got, want := exec(t, m, info.ID, look, 30).Output, exec(t, m, cold.ID, look, 30).Output
	if got != want {
		t.Fatalf("claimed box:\n%s\nfresh box:\n%s", got, want)
	}
	if p := poolOf(t, m); p.Misses != 0 {
		t.Fatalf("a create of other settings counted as a miss: %+v", p)
	}

	waitPool(t, m, 1)
	if boxes := e.poolBoxes(t); len(boxes) != 2 || !slices.Contains(boxes, info.ID) {
		t.Fatalf("after the refill, pool boxes %v: want the claimed one and a new one", boxes)
	}
	mu.Lock()
	now = now.Add(5*time.Minute + time.Second)
	mu.Unlock()
	if got := m.Reap(context.Background()); !slices.Contains(got, info.ID) {
		t.Fatalf("reaped %v, want the claimed box past its claim's TTL", got)
	}
}

// TestPoolQuota: pool boxes count toward the quota, a claim never fails
// for it, a create that finds the pool empty is a miss, and a create of
// other settings evicts a pool box rather than fail.
func TestPoolQuota(t *testing.T) {
	e := poolEnv(t, 1)
	e.cfg.MaxSandboxes = 1
	m := e.manager(t)
	waitPool(t, m, 1)
	ctx := context.Background()

	claimed := e.create(t, m, sandbox.CreateSpec{}) // the quota is full of pool
	if p := poolOf(t, m); p.Hits != 1 {
		t.Fatalf("claim under a full quota: %+v", p)
	}
	if _, err := m.Create(ctx, sandbox.CreateSpec{}); sandbox.CodeOf(err) != sandbox.CodeQuota {
		t.Fatalf("create over the quota: %v, want %s", err, sandbox.CodeQuota)
	}
	if p := poolOf(t, m); p.Misses != 1 || p.Ready != 0 {
		t.Fatalf("the pool could not refill under the quota and the create missed: %+v", p)
	}

	if err := m.Delete(ctx, claimed.ID); err != nil {
		t.Fatal(err)
	}
	waitPool(t, m, 1) // refilled once the quota had room
	other := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{MemoryBytes: 96 << 20}})
	if p := poolOf(t, m); p.Ready != 0 {
		t.Fatalf("a create of other settings over the quota left the pool box: %+v", p)
	}
	if boxes := e.poolBoxes(t); len(boxes) != 0 {
		t.Fatalf("evicted pool box still exists: %v", boxes)
	}
	if n, _ := m.Usage(); n != 1 || other.ID == "" {
		t.Fatalf("usage %d, want the one live sandbox", n)
	}
}

// TestPoolSurvivesRestart: after a worker restart, a claimed box is
// re-adopted as its claim made it (owner, labels, expiry, workspace) and
// an unclaimed one as a pool box, which is claimed next.
func TestPoolSurvivesRestart(t *testing.T) {
	e := poolEnv(t, 1)
	ctx := context.Background()
	m1, closed := e.restartable(t)
	claimed := e.create(t, m1, sandbox.CreateSpec{Labels: map[string]string{"k": "v"}, Tenant: "acme"})
	exec(t, m1, claimed.ID, "echo kept > /workspace/note", 30)
	waitPool(t, m1, 1)
	boxes := e.poolBoxes(t)
	last, err := m1.Get(ctx, claimed.ID)
	if err != nil {
		t.Fatal(err)
	}
	closed()

	m2 := e.manager(t)
	got, err := m2.Get(ctx, claimed.ID)
	if err != nil {
		t.Fatalf("claimed box after the restart: %v", err)
	}
	// The expiry is the last one recorded: between the claim's and the
	// one its last operation set, never later.
	if got.Tenant != "acme" || !maps.Equal(got.Labels, claimed.Labels) || !got.CreatedAt.Equal(claimed.CreatedAt) ||
		got.ExpiresAt.Before(claimed.ExpiresAt) || got.ExpiresAt.After(last.ExpiresAt) {
		t.Fatalf("re-adopted claimed box %+v, want %+v (expiring by %v)", got, claimed, last.ExpiresAt)
	}
	if r := exec(t, m2, claimed.ID, "cat /workspace/note", 30); r.Output != "kept\n" {
		t.Fatalf("workspace after the restart: %q", r.Output)
	}
	waitPool(t, m2, 1)
	if after := e.poolBoxes(t); !slices.Equal(after, boxes) {
		t.Fatalf("pool boxes after the restart %v, want the same %v", after, boxes)
	}
	next := e.create(t, m2, sandbox.CreateSpec{})
	if next.ID == claimed.ID || !slices.Contains(boxes, next.ID) || poolOf(t, m2).Hits != 1 {
		t.Fatalf("claim after the restart got %s (pool boxes %v), want the re-adopted pool box", next.ID, boxes)
	}
	if r := exec(t, m2, next.ID, "ls -A /workspace", 30); r.Output != "" {
		t.Fatalf("re-adopted pool box's workspace: %q", r.Output)
	}
}

// TestPoolDrainedOnTemplateChange: a worker restarted with other template
// settings removes the old pool's unclaimed boxes and fills a new pool;
// claimed boxes stay.
func TestPoolDrainedOnTemplateChange(t *testing.T) {
	e := poolEnv(t, 1)
	ctx := context.Background()
	m1, closed := e.restartable(t)
	claimed := e.create(t, m1, sandbox.CreateSpec{})
	waitPool(t, m1, 1)
	var old string
	for _, id := range e.poolBoxes(t) {
		if id != claimed.ID {
			old = id
		}
	}
	closed()

	e.cfg.Defaults.Env = map[string]string{"CHANGED": "1"}
	m2 := e.manager(t)
	if _, err := e.cli.ContainerInspect(ctx, old, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("old pool box %s after the template changed: %v, want removed", old, err)
	}
	if _, err := m2.Get(ctx, claimed.ID); err != nil {
		t.Fatalf("claimed box after the template changed: %v", err)
	}
	waitPool(t, m2, 1)
	info := e.create(t, m2, sandbox.CreateSpec{})
	if r := exec(t, m2, info.ID, "echo $CHANGED", 30); r.Output != "1\n" || poolOf(t, m2).Hits != 1 {
		t.Fatalf("box from the new pool: %q (pool %+v)", r.Output, poolOf(t, m2))
	}
}

func TestPoolBadConfig(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name  string
		state string
		pools map[string]sandbox.PoolConfig
	}{
		{"no state dir", "", map[string]sandbox.PoolConfig{"": {Size: 1}}},
		{"unknown template", t.TempDir(), map[string]sandbox.PoolConfig{"nope": {Size: 1}}},
		{"too big", t.TempDir(), map[string]sandbox.PoolConfig{"": {Size: sandbox.MaxPoolSize + 1}}},
		{"negative lifetime", t.TempDir(), map[string]sandbox.PoolConfig{"": {Size: 1, IdleLifetime: -time.Second}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := e.cfg
			cfg.StateDir, cfg.Pools = tt.state, tt.pools
			m, err := sandbox.NewManager(context.Background(), e.cli, cfg)
			if err == nil {
				m.Close()
				t.Fatal("accepted")
			}
			var ce *sandbox.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a ConfigError", err)
			}
		})
	}
}

// TestPoolFollowsItsImage: when the template's image tag moves to another
// image, the pool's boxes of the old image are replaced, so a claim hands
// out what a cold create would run.
func TestPoolFollowsItsImage(t *testing.T) {
	e := poolEnv(t, 1)
	ctx := context.Background()
	base := "plumb-test-pool-" + e.worker + ":latest"
	var built string
	t.Cleanup(func() { // after the manager's own cleanup (LIFO)
		// Children first: what was derived from the new image, then it.
		var refs []string
		if built != "" {
			derived, err := e.cli.ImageList(ctx, client.ImageListOptions{Filters: client.Filters{}.Add("label", sandbox.LabelDerivedBaseID+"="+built)})
			if err != nil {
				t.Errorf("list derived images: %v", err)
			}
			for _, im := range derived.Items {
				refs = append(refs, im.ID)
			}
		}
		refs = append(refs, base)
		if built != "" {
			refs = append(refs, built)
		}
		for _, ref := range refs {
			if _, err := e.cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				t.Errorf("remove image %s: %v", ref, err)
			}
		}
	})
	if _, err := e.cli.ImageTag(ctx, client.ImageTagOptions{Source: e.image, Target: base}); err != nil {
		t.Fatal(err)
	}
	e.cfg.Defaults.Image = base
	e.cfg.ReapInterval = 100 * time.Millisecond
	m := e.manager(t)
	waitPool(t, m, 1)
	old := e.poolBoxes(t)

	// The tag moves to an image that differs by one variable.
	c, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: e.image, Cmd: []string{"true"}, Labels: sandboxtest.Labels(testRun)}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.cli.ContainerCommit(ctx, c.ID, client.ContainerCommitOptions{Config: &container.Config{Image: e.image, Env: []string{"POOLIMG=2"}}})
	if _, rerr := e.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); rerr != nil {
		t.Error(rerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	built = res.ID
	if _, err := e.cli.ImageTag(ctx, client.ImageTagOptions{Source: built, Target: base}); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(3 * time.Minute)
	for now := e.poolBoxes(t); len(now) != 1 || now[0] == old[0]; now = e.poolBoxes(t) {
		if time.Now().After(deadline) {
			t.Fatalf("pool boxes %v after the image moved, want one new box instead of %v", now, old)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitPool(t, m, 1)
	info := e.create(t, m, sandbox.CreateSpec{})
	if r := exec(t, m, info.ID, "echo $POOLIMG", 30); r.Output != "2\n" || poolOf(t, m).Hits != 1 {
		t.Fatalf("claimed box runs %q (pool %+v), want the moved image and a hit", r.Output, poolOf(t, m))
	}
}

// removalFailingEngine is the real engine, except that while fail is set
// every ContainerRemove fails (as an engine that cannot remove a container
// does) and leaves the container running.
type removalFailingEngine struct {
	*client.Client
	fail atomic.Bool
}

func (f *removalFailingEngine) ContainerRemove(ctx context.Context, id string, opts client.ContainerRemoveOptions) (client.ContainerRemoveResult, error) {
	if f.fail.Load() {
		return client.ContainerRemoveResult{}, errors.New("injected: the engine could not remove the container")
	}
	return f.Client.ContainerRemove(ctx, id, opts)
}

// removeWorkerLeftovers removes, when t ends, every container and volume
// of e's worker: a test whose engine fails removals must leave nothing even
// when it fails (a failed delete that reports success loses the box).
func (e *env) removeWorkerLeftovers(t *testing.T) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, vs, err := sandboxtest.Leftovers(ctx, e.cli, sandboxtest.Label(sandbox.LabelWorker, e.worker))
		if err != nil {
			t.Errorf("list the worker's leftovers: %v", err)
			return
		}
		for _, c := range cs {
			_, _ = e.cli.ContainerRemove(ctx, c, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		}
		for _, v := range vs {
			_, _ = e.cli.VolumeRemove(ctx, v, client.VolumeRemoveOptions{Force: true})
		}
	})
}

// TestFailedRemovalNeverReachesAnotherTenant: a claimed pool box whose
// container the engine fails to remove is not reported deleted (its delete
// is unavailable, it stays deleting); after a restart that lost the claim
// record, the box is never adopted into the pool (its container is
// removed), and a second tenant's create gets another box, without the
// first tenant's file.
func TestFailedRemovalNeverReachesAnotherTenant(t *testing.T) {
	e := poolEnv(t, 1)
	e.removeWorkerLeftovers(t)
	eng := &removalFailingEngine{Client: e.cli}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // hang guard
	defer cancel()
	m1, err := sandbox.NewManager(ctx, eng, e.cfg, sandbox.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		eng.fail.Store(false)
		if !closed {
			_ = m1.DeleteAll(context.Background())
			m1.Close()
		}
	})
	waitPool(t, m1, 1)
	pooled := e.poolBoxes(t)
	a := e.create(t, m1, sandbox.CreateSpec{Tenant: "tenant-a"})
	if len(pooled) != 1 || a.ID != pooled[0] {
		t.Fatalf("tenant a got %s, want the pool box %v", a.ID, pooled)
	}
	if r := exec(t, m1, a.ID, "echo tenant-a-secret > /workspace/secret && echo ok", 30); r.Output != "ok\n" {
		t.Fatalf("write the secret: %q", r.Output)
	}

	eng.fail.Store(true)
	if err := m1.Delete(ctx, a.ID); sandbox.CodeOf(err) != sandbox.CodeUnavailable {
		t.Fatalf("delete with removals failing: %v, want %s", err, sandbox.CodeUnavailable)
	}
	if info, err := m1.Get(ctx, a.ID); err != nil || info.State != sandbox.StateDeleting {
		t.Fatalf("after a failed delete: %+v, %v; want the sandbox listed as deleting", info, err)
	}
	if res, err := e.cli.ContainerInspect(ctx, a.ContainerID, client.ContainerInspectOptions{}); err != nil || res.Container.State == nil || !res.Container.State.Running {
		t.Fatalf("the box's container should still run (the engine failed to remove it): %v", err)
	}
	m1.Close()
	closed = true
	// The worker restarts having lost its claim record: only the box
	// itself can say it was claimed.
	if err := os.Remove(filepath.Join(e.cfg.StateDir, "sandbox-claims.json")); err != nil {
		t.Fatal(err)
	}
	eng.fail.Store(false)
	m2 := e.managerOn(t, eng)
	if _, err := m2.Get(ctx, a.ID); sandbox.CodeOf(err) != sandbox.CodeNotFound {
		t.Fatalf("the claimed box after the restart: %v, want not found", err)
	}
	if _, err := e.cli.ContainerInspect(ctx, a.ContainerID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("the claimed box's container after the restart: %v, want it removed", err)
	}
	waitPool(t, m2, 1)
	if slices.Contains(e.poolBoxes(t), a.ID) {
		t.Fatalf("the claimed box %s is in the pool again", a.ID)
	}
	b := e.create(t, m2, sandbox.CreateSpec{Tenant: "tenant-b"})
	if b.ID == a.ID || b.ContainerID == a.ContainerID {
		t.Fatalf("tenant b got tenant a's box %s", a.ID)
	}
	if r := exec(t, m2, b.ID, "cat /workspace/secret 2>/dev/null || echo absent", 30); r.Output != "absent\n" {
		t.Fatalf("tenant b reads %q", r.Output)
	}
}

// TestFailedDeleteIsRetried: a delete whose container removal fails is
// unavailable, holds no quota and keeps the sandbox listed as deleting (a
// retry while the engine still fails is unavailable again); once the
// engine removes containers again, the reaper finishes the delete without
// waiting for the box's TTL.
func TestFailedDeleteIsRetried(t *testing.T) {
	e := newEnv(t)
	e.removeWorkerLeftovers(t)
	eng := &removalFailingEngine{Client: e.cli}
	t.Cleanup(func() { eng.fail.Store(false) }) // before managerOn's cleanup deletes
	m := e.managerOn(t, eng)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // hang guard
	defer cancel()
	box := e.create(t, m, sandbox.CreateSpec{})
	eng.fail.Store(true)
	for range 2 {
		if err := m.Delete(ctx, box.ID); sandbox.CodeOf(err) != sandbox.CodeUnavailable {
			t.Fatalf("delete with removals failing: %v, want %s", err, sandbox.CodeUnavailable)
		}
		if info, err := m.Get(ctx, box.ID); err != nil || info.State != sandbox.StateDeleting || !info.ExpiresAt.Equal(box.ExpiresAt) {
			t.Fatalf("after a failed delete: %+v, %v; want deleting with its expiry %v", info, err, box.ExpiresAt)
		}
		if n, mem := m.Usage(); n != 0 || mem != 0 {
			t.Fatalf("usage %d sandboxes, %d bytes after a failed delete, want none", n, mem)
		}
	}
	f, err := m.Files(box.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ls(ctx, "/workspace"); err == nil {
		t.Fatal("a sandbox being deleted still serves file operations")
	}
	eng.fail.Store(false)
	m.Reap(ctx)
	if _, err := m.Get(ctx, box.ID); sandbox.CodeOf(err) != sandbox.CodeNotFound {
		t.Fatalf("after the reaper's retry: %v, want not found", err)
	}
	if _, err := e.cli.ContainerInspect(ctx, box.ContainerID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("the container after the reaper's retry: %v, want it removed", err)
	}
}

// TestTouchedPoolBoxNotHandedOut: a warm pool box whose workspace changed
// while it waited (written here from outside, as the sandbox user) is not
// handed out: the create gets a box started cold, and the touched box is
// removed.
func TestTouchedPoolBoxNotHandedOut(t *testing.T) {
	e := poolEnv(t, 1)
	m := e.manager(t)
	waitPool(t, m, 1)
	pooled := e.poolBoxes(t)
	if len(pooled) != 1 {
		t.Fatalf("pool boxes %v, want 1", pooled)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // hang guard
	defer cancel()
	res, err := e.cli.ContainerInspect(ctx, pooled[0], client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out := execAs(t, e.cli, res.Container.ID, sandbox.DefaultUser, "echo left-behind > /workspace/secret && echo ok"); out != "ok\n" {
		t.Fatalf("write into the pool box: %q", out)
	}
	info := e.create(t, m, sandbox.CreateSpec{Tenant: "tenant-b"})
	if info.ID == pooled[0] {
		t.Fatalf("the touched pool box %s was handed out", pooled[0])
	}
	if r := exec(t, m, info.ID, "cat /workspace/secret 2>/dev/null || echo absent", 30); r.Output != "absent\n" {
		t.Fatalf("the new box reads %q", r.Output)
	}
	if p := poolOf(t, m); p.Hits != 0 || p.Misses != 1 {
		t.Fatalf("pool after a refused claim: %+v, want no hit and one miss", p)
	}
	if _, err := e.cli.ContainerInspect(ctx, res.Container.ID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("the touched pool box's container: %v, want it removed", err)
	}
}
