package sandbox_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/snapshot"
)

// hibernate suspends sandbox id by HIBERNATE and checks it is hibernated.
func hibernate(t *testing.T, m *sandbox.Manager, id string) sandbox.SuspendResult {
	t.Helper()
	res, err := m.Suspend(ctxMinute(t), id, sandbox.SuspendHibernate)
	if err != nil || res.Info.State != sandbox.StateHibernated {
		t.Fatalf("hibernate %s: %+v %v", id, res, err)
	}
	return res
}

// assertNoBox fails unless sandbox id has no container and no workspace
// volume on the engine.
func (e *env) assertNoBox(t *testing.T, id string) {
	t.Helper()
	ctx := ctxMinute(t)
	if _, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("sandbox %s has a container: %v", id, err)
	}
	if _, err := e.cli.VolumeInspect(ctx, "plumb-ws-"+id, client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("sandbox %s has a workspace volume: %v", id, err)
	}
}

// A hibernated box counts toward neither max_sandboxes nor max_memory: a
// create beside it succeeds on a full worker. Waking it on that full
// worker is CodeQuota naming the limit, and leaves it hibernated with
// nothing made; once there is room it wakes with its files.
func TestHibernatedBoxCountsTowardNoQuota(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   func(*sandbox.Config)
		limit string
	}{
		{"max_sandboxes", func(c *sandbox.Config) { c.MaxSandboxes = 1 }, sandbox.LimitMaxSandboxes},
		{"max_memory", func(c *sandbox.Config) { c.MaxMemoryBytes = 128 << 20 }, sandbox.LimitMaxMemory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.withSnapshots(t, 0)
			tc.set(&e.cfg)
			m := e.manager(t)
			ctx := ctxMinute(t)
			a := e.create(t, m, sandbox.CreateSpec{Tenant: "acme"})
			exec(t, m, a.ID, "echo kept > /workspace/f", 30)
			hibernate(t, m, a.ID)
			if n, mem := m.Usage(); n != 0 || mem != 0 || m.Hibernated() != 1 {
				t.Fatalf("usage with one hibernated box: %d sandboxes, %d bytes, %d hibernated; want 0, 0, 1", n, mem, m.Hibernated())
			}
			b := e.create(t, m, sandbox.CreateSpec{Tenant: "acme"}) // the worker is now full

			_, err := m.Resume(ctx, a.ID)
			var se *sandbox.Error
			if !errors.As(err, &se) || se.Code != sandbox.CodeQuota || se.Limit != tc.limit {
				t.Fatalf("wake on a full worker: %v, want quota_exceeded naming %s", err, tc.limit)
			}
			if info, err := m.Get(ctx, a.ID); err != nil || info.State != sandbox.StateHibernated {
				t.Fatalf("after the refused wake: %+v %v", info, err)
			}
			e.assertNoBox(t, a.ID)
			if n, _ := m.Usage(); n != 1 || m.Hibernated() != 1 {
				t.Fatalf("after the refused wake: %d sandboxes, %d hibernated; want 1, 1", n, m.Hibernated())
			}

			if err := m.Delete(ctx, b.ID); err != nil {
				t.Fatal(err)
			}
			if r := exec(t, m, a.ID, "cat /workspace/f", 30); r.Output != "kept\n" {
				t.Fatalf("the woken box: %q", r.Output)
			}
			if n, mem := m.Usage(); n != 1 || mem != 128<<20 || m.Hibernated() != 0 {
				t.Fatalf("after the wake: %d sandboxes, %d bytes, %d hibernated; want 1, %d, 0", n, mem, m.Hibernated(), 128<<20)
			}
			// Deleting a hibernated box gives back nothing it did not hold.
			hibernate(t, m, a.ID)
			if err := m.Delete(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			if n, mem := m.Usage(); n != 0 || mem != 0 || m.Hibernated() != 0 {
				t.Fatalf("after deleting the hibernated box: %d sandboxes, %d bytes, %d hibernated", n, mem, m.Hibernated())
			}
		})
	}
}

// A hibernated box survives a restart of its worker on the same engine,
// state dir and store: the new manager lists it hibernated, and a call on
// it wakes it with its files (not NOT_FOUND).
func TestRestartReadoptsHibernatedBox(t *testing.T) {
	e := newEnv(t)
	dir := e.withSnapshots(t, 0)
	e.cfg.StateDir = t.TempDir()
	ctx := ctxMinute(t)
	m1, closeM1 := e.restartableOn(t, e.cli)
	a := e.create(t, m1, sandbox.CreateSpec{Tenant: "acme", Labels: map[string]string{"thread": "t1"}})
	exec(t, m1, a.ID, "mkdir -p /workspace/d && echo kept > /workspace/d/f", 30)
	res := hibernate(t, m1, a.ID)
	closeM1()

	// A new store and repo over the same directory: nothing shared in
	// memory with the first worker.
	store, err := snapshot.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if e.cfg.Snapshots, err = snapshot.NewRepo(store, 0); err != nil {
		t.Fatal(err)
	}
	m2 := e.manager(t)
	got, err := m2.Get(ctx, a.ID)
	if err != nil || got.State != sandbox.StateHibernated || got.Snapshot != res.Snapshot || got.Tenant != "acme" || got.Labels["thread"] != "t1" {
		t.Fatalf("re-adopted hibernated box: %+v %v", got, err)
	}
	if !got.ExpiresAt.Equal(a.ExpiresAt) && got.ExpiresAt.Before(a.ExpiresAt) {
		t.Errorf("expiry %v, before the box's %v", got.ExpiresAt, a.ExpiresAt)
	}
	if m2.Hibernated() != 1 {
		t.Errorf("%d hibernated after the restart, want 1", m2.Hibernated())
	}
	if r := exec(t, m2, a.ID, "cat /workspace/d/f", 30); r.Output != "kept\n" {
		t.Fatalf("after the restart: %q", r.Output)
	}
	if info, _ := m2.Get(ctx, a.ID); info.State != sandbox.StateRunning || info.Settings.MemoryBytes != a.Settings.MemoryBytes {
		t.Fatalf("after the wake: %+v", info)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.StateDir, "hibernated", a.ID+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the woken box's hibernation record: %v, want none", err)
	}
}

// countingCopy counts the tar bytes the engine read in each
// CopyToContainer.
type countingCopy struct {
	*client.Client
	copied atomic.Int64
}

func (c *countingCopy) CopyToContainer(ctx context.Context, id string, opts client.CopyToContainerOptions) (client.CopyToContainerResult, error) {
	opts.Content = &countReader{r: opts.Content, n: &c.copied}
	return c.Client.CopyToContainer(ctx, id, opts)
}

type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (r *countReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n.Add(int64(n))
	return n, err
}

// fills are the two ways a restore fills a workspace: this worker writes
// the volume's host directory (the default here: the engine's data root is
// on this host), or the engine copies the tar into the created container.
var fills = []struct {
	name   string
	engine bool
}{{"host fill", false}, {"engine fill", true}}

// A wake streams its snapshot into the box: a chunk that fails after the
// files before it were written fails the wake with DATA_LOSS, leaves no
// container or volume, and the box hibernated; once the chunk is good
// again the box wakes.
func TestWakeChunkFailingMidStream(t *testing.T) {
	for _, fill := range fills {
		t.Run(fill.name, func(t *testing.T) { testWakeChunkFailingMidStream(t, fill.engine) })
	}
}

func testWakeChunkFailingMidStream(t *testing.T, engineFill bool) {
	e := newEnv(t)
	dir := e.withSnapshots(t, 0)
	e.cfg.EngineFill = engineFill
	api := &countingCopy{Client: e.cli}
	m := e.managerOn(t, api)
	ctx := ctxMinute(t)
	a := e.create(t, m, sandbox.CreateSpec{Tenant: "acme"})
	// Three files of 3 MiB (three chunks each), the last one written
	// last in the tar.
	exec(t, m, a.ID, "cd /workspace && for f in a b c; do dd if=/dev/urandom of=$f bs=1024 count=3072 2>/dev/null; done; md5sum a b c > sums", 60)
	res := hibernate(t, m, a.ID)
	man, err := e.cfg.Snapshots.Get(ctx, "acme", res.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	var last snapshot.Chunk
	for _, en := range man.Entries {
		if en.Path == "c" {
			last = en.Chunks[len(en.Chunks)-1]
		}
	}
	if last.Hash == "" {
		t.Fatalf("no chunk of c in %+v", man.Entries)
	}
	p := filepath.Join(dir, "chunks", filepath.FromSlash(snapshot.ChunkKey("acme", last.Hash)))
	good, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), good...)
	bad[len(bad)/2] ^= 0x55
	if err := os.WriteFile(p, bad, 0o600); err != nil {
		t.Fatal(err)
	}

	api.copied.Store(0)
	_, err = m.Resume(ctx, a.ID)
	if sandbox.CodeOf(err) != sandbox.CodeDataLoss {
		t.Fatalf("wake with a corrupt chunk: %v, want data loss", err)
	}
	switch n := api.copied.Load(); {
	case engineFill && n < 6<<20:
		t.Errorf("the engine read %d bytes before the failure, want the files before the corrupt chunk (over 6 MiB): not streamed", n)
	case !engineFill && n != 0:
		t.Errorf("the engine copied %d bytes: no host fill", n)
	}
	if info, err := m.Get(ctx, a.ID); err != nil || info.State != sandbox.StateHibernated {
		t.Fatalf("after the failed wake: %+v %v", info, err)
	}
	e.assertNoBox(t, a.ID)
	if n, mem := m.Usage(); n != 0 || mem != 0 {
		t.Errorf("after the failed wake: %d sandboxes, %d bytes reserved", n, mem)
	}

	if err := os.WriteFile(p, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := exec(t, m, a.ID, "cd /workspace && md5sum -c sums >/dev/null && echo same", 60); r.Output != "same\n" {
		t.Fatalf("after the repaired wake: %q", r.Output)
	}
}
