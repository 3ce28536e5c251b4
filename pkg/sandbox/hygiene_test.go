package sandbox_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"go.uber.org/zap/zaptest"
)

// TestFailedSandboxReleasesQuota: a sandbox whose container dies gives
// its sandbox and memory quota back at once, so a new sandbox fits, while
// its record stays readable (failed, with the reason) until deleted.
func TestFailedSandboxReleasesQuota(t *testing.T) {
	e := newEnv(t)
	e.cfg.MaxSandboxes = 1
	e.cfg.MaxMemoryBytes = 128 << 20
	m := e.manager(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	first := e.create(t, m, sandbox.CreateSpec{})
	if _, err := m.Create(ctx, sandbox.CreateSpec{}); sandbox.CodeOf(err) != sandbox.CodeQuota {
		t.Fatalf("second create while the first runs: %v, want %s", err, sandbox.CodeQuota)
	}
	if _, err := e.cli.ContainerRemove(ctx, first.ContainerID, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	got, err := m.Get(ctx, first.ID)
	if err != nil || got.State != sandbox.StateFailed || got.FailureReason == "" {
		t.Fatalf("killed sandbox: %+v, %v; want failed with a reason", got, err)
	}
	if n, mem := m.Usage(); n != 0 || mem != 0 {
		t.Fatalf("usage after the failure = %d sandboxes, %d bytes; want 0, 0", n, mem)
	}
	second := e.create(t, m, sandbox.CreateSpec{})
	if got, err := m.Get(ctx, first.ID); err != nil || got.State != sandbox.StateFailed {
		t.Fatalf("failed record gone after a new create: %+v, %v", got, err)
	}
	if err := m.Delete(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if n, mem := m.Usage(); n != 1 || mem != second.Settings.MemoryBytes {
		t.Fatalf("usage after deleting the failed sandbox = %d, %d; want 1, %d", n, mem, second.Settings.MemoryBytes)
	}
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// TestReadoptionKeepsExpiry: a restarted worker re-adopts sandboxes with
// the expiry recorded in its state dir (a keep-alive survives, no restart
// extends it); without a state dir a sandbox expires at its creation plus
// TTL however often the worker restarts.
func TestReadoptionKeepsExpiry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // hang guard
	defer cancel()
	t0 := time.Now()
	start := func(t *testing.T, e *env, clock *fakeClock) *sandbox.Manager {
		t.Helper()
		m, err := sandbox.NewManager(ctx, e.cli, e.cfg, sandbox.WithLogger(zaptest.NewLogger(t)), sandbox.WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	t.Run("state dir", func(t *testing.T) {
		e := newEnv(t)
		e.cfg.StateDir = t.TempDir()
		clock := &fakeClock{now: t0}
		m1 := start(t, e, clock)
		info := e.create(t, m1, sandbox.CreateSpec{Overrides: sandbox.Template{TTL: time.Hour}})
		clock.Set(t0.Add(50 * time.Minute))
		if _, err := m1.KeepAlive(ctx, info.ID, 0); err != nil {
			t.Fatal(err)
		}
		want := t0.Add(110 * time.Minute)
		m1.Close()

		for _, at := range []time.Duration{100 * time.Minute, 105 * time.Minute} { // two restarts
			clock.Set(t0.Add(at))
			m := start(t, e, clock)
			got, err := m.Get(ctx, info.ID)
			if err != nil || !got.ExpiresAt.Equal(want) {
				m.Close()
				t.Fatalf("after a restart at +%s: expires %v, %v; want %v", at, got.ExpiresAt, err, want)
			}
			m.Close()
		}
		clock.Set(t0.Add(111 * time.Minute))
		m := e.manager(t, sandbox.WithClock(clock.Now))
		if got := m.Reap(ctx); len(got) != 1 || got[0] != info.ID {
			t.Fatalf("reaped %v after the recorded expiry, want [%s]", got, info.ID)
		}
	})

	t.Run("no state dir", func(t *testing.T) {
		e := newEnv(t)
		clock := &fakeClock{now: t0}
		m1 := start(t, e, clock)
		info := e.create(t, m1, sandbox.CreateSpec{Overrides: sandbox.Template{TTL: time.Hour}})
		m1.Close()
		for _, at := range []time.Duration{20 * time.Minute, 40 * time.Minute} { // a crash loop
			clock.Set(t0.Add(at))
			m := start(t, e, clock)
			got, err := m.Get(ctx, info.ID)
			if err != nil || got.ExpiresAt.After(info.CreatedAt.Add(time.Hour)) {
				m.Close()
				t.Fatalf("after a restart at +%s: expires %v, %v; want no later than %v", at, got.ExpiresAt, err, info.CreatedAt.Add(time.Hour))
			}
			m.Close()
		}
		clock.Set(t0.Add(61 * time.Minute))
		m := e.manager(t, sandbox.WithClock(clock.Now))
		if got := m.Reap(ctx); len(got) != 1 || got[0] != info.ID {
			t.Fatalf("reaped %v after creation+TTL, want [%s]", got, info.ID)
		}
	})
}

// TestCollectorRemovesOrphans: the collector (run by the reaper loop)
// removes this worker's workspace volumes that no sandbox uses, derive
// containers older than their grace and superseded derived images (built
// for another agent), and keeps live sandboxes' volumes and images, fresh
// derive containers and images, and what other workers own.
func TestCollectorRemovesOrphans(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // hang guard
	defer cancel()
	clock := &fakeClock{now: time.Now()}
	m := e.manager(t, sandbox.WithClock(clock.Now))
	live := e.create(t, m, sandbox.CreateSpec{})

	mine := map[string]string{sandbox.LabelWorker: e.worker, "plumb.test": testRun}
	orphan := "plumb-ws-sbx-" + e.worker + "-orphan"
	notMine := "plumb-ws-sbx-" + e.worker + "x-other"
	derive := "plumb-test-derive-" + e.worker
	stale := sandbox.DerivedRepository + ":test-" + e.worker
	t.Cleanup(func() { // even when the test fails
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = e.cli.ContainerRemove(ctx, derive, client.ContainerRemoveOptions{Force: true})
		_, _ = e.cli.ImageRemove(ctx, stale, client.ImageRemoveOptions{Force: true})
		for _, v := range []string{orphan, notMine} {
			_, _ = e.cli.VolumeRemove(ctx, v, client.VolumeRemoveOptions{Force: true})
		}
	})
	for name, labels := range map[string]map[string]string{orphan: mine, notMine: {sandbox.LabelWorker: e.worker + "x", "plumb.test": testRun}} {
		if _, err := e.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name, Labels: labels}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       derive,
		Config:     &container.Config{Image: e.image, Cmd: []string{"true"}, Labels: map[string]string{sandbox.LabelDerivedFrom: e.image, "plumb.test": testRun}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	}); err != nil {
		t.Fatal(err)
	}
	// A derived image of another agent binary: superseded.
	if _, err := e.cli.ContainerCommit(ctx, derive, client.ContainerCommitOptions{Reference: stale, Changes: []string{
		"LABEL " + sandbox.LabelDerivedFrom + "=" + e.image + " " + sandbox.LabelDerivedAgent + "=another-agent",
	}}); err != nil {
		t.Fatal(err)
	}
	imageExists := func(ref string) bool {
		_, err := e.cli.ImageInspect(ctx, ref)
		return err == nil
	}
	liveImage, err := e.cli.ContainerInspect(ctx, live.ContainerID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}

	m.Collect(ctx)
	if !imageExists(stale) {
		t.Fatal("a fresh superseded image was collected before its grace")
	}
	exists := func(name string) bool {
		_, err := e.cli.VolumeInspect(ctx, name, client.VolumeInspectOptions{})
		return err == nil
	}
	if exists(orphan) || !exists(notMine) || !exists("plumb-ws-"+live.ID) {
		t.Fatalf("volumes after collect: orphan %v (want gone), other worker's %v, live sandbox's %v (want kept)", exists(orphan), exists(notMine), exists("plumb-ws-"+live.ID))
	}
	if _, err := e.cli.ContainerInspect(ctx, derive, client.ContainerInspectOptions{}); err != nil {
		t.Fatalf("a fresh derive container was collected: %v", err)
	}
	clock.Set(clock.Now().Add(11 * time.Minute))
	m.Collect(ctx)
	if _, err := e.cli.ContainerInspect(ctx, derive, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("old derive container after collect: %v, want removed", err)
	}
	if imageExists(stale) || !imageExists(liveImage.Container.Image) {
		t.Fatalf("images after collect: superseded %v (want gone), the live sandbox's %v (want kept)", imageExists(stale), imageExists(liveImage.Container.Image))
	}
	if r := exec(t, m, live.ID, "echo ok", 30); r.Output != "ok\n" {
		t.Fatalf("live sandbox after collect: %q", r.Output)
	}
}

// TestContainerPinnedByImageID: a sandbox's container is created from the
// derived image's ID, not a tag that could move.
func TestContainerPinnedByImageID(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t)
	info := e.create(t, m, sandbox.CreateSpec{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard
	defer cancel()
	c, err := e.cli.ContainerInspect(ctx, info.ContainerID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Container.Config.Image != c.Container.Image || !strings.HasPrefix(c.Container.Image, "sha256:") {
		t.Fatalf("container created from %q (image %s), want the image ID", c.Container.Config.Image, c.Container.Image)
	}
}

// TestCollectorOnSharedEngine: workers of different versions share one
// engine. A worker of the same agent shares another's derived image by
// tagging it for itself; a worker of another agent binary collects
// nothing of theirs, though to it their image is superseded; and a worker
// that comes back with a new agent collects only its own tag, leaving the
// image to the worker that still tags it.
func TestCollectorOnSharedEngine(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // hang guard
	defer cancel()
	clock := &fakeClock{now: time.Now()}
	worker := func(name string, agent []byte) *sandbox.Manager {
		w := *e
		w.worker, w.cfg.Worker, w.cfg.Agent = name, name, agent
		sandboxtest.ReleaseImagesOnCleanup(t, e.cli, name)
		return w.manager(t, sandbox.WithClock(clock.Now))
	}
	newAgent := append(append([]byte{}, e.cfg.Agent...), 0) // another build: another sum
	a, c := e.worker+"a", e.worker+"c"
	ma, mc := worker(a, e.cfg.Agent), worker(c, e.cfg.Agent)
	image := func(m *sandbox.Manager) string {
		info := e.create(t, m, sandbox.CreateSpec{})
		ci, err := e.cli.ContainerInspect(ctx, info.ContainerID, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Delete(ctx, info.ID); err != nil {
			t.Fatal(err)
		}
		return ci.Container.Image
	}
	id := image(ma)
	if other := image(mc); other != id {
		t.Fatalf("worker %s derived image %s, want %s's %s shared", c, other, a, id)
	}
	tags := func() (mine map[string]bool) {
		ii, err := e.cli.ImageInspect(ctx, id)
		if err != nil {
			t.Fatalf("the shared image is gone: %v", err)
		}
		mine = map[string]bool{}
		for _, r := range ii.RepoTags {
			for _, w := range []string{a, c} {
				if strings.HasSuffix(r, "-"+w) {
					mine[w] = true
				}
			}
		}
		return mine
	}
	if got := tags(); !got[a] || !got[c] {
		t.Fatalf("tags of the shared image: %v, want one of %s and one of %s", got, a, c)
	}

	clock.Set(clock.Now().Add(11 * time.Minute)) // past the derive grace
	worker(e.worker+"b", newAgent).Collect(ctx)
	if got := tags(); !got[a] || !got[c] {
		t.Fatalf("after another version's collect: tags %v, want %s's and %s's kept", got, a, c)
	}
	worker(a, newAgent).Collect(ctx) // a comes back as the new version
	if got := tags(); got[a] || !got[c] {
		t.Fatalf("after %s's new version collected: tags %v, want only %s's own tag gone", a, got, a)
	}
}

// TestDerivedImageRemovedBehindTheWorker: the worker remembers its derived
// image; when an image prune removed it, the next create derives it again
// instead of failing.
func TestDerivedImageRemovedBehindTheWorker(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // hang guard
	defer cancel()
	w := *e
	// An agent of its own: no other worker (or test) shares its image.
	w.worker = e.worker + "p"
	w.cfg.Worker, w.cfg.Agent = w.worker, append(append([]byte{}, e.cfg.Agent...), 0, 0)
	sandboxtest.ReleaseImagesOnCleanup(t, e.cli, w.worker)
	m := w.manager(t)
	image := func() string {
		info := e.create(t, m, sandbox.CreateSpec{})
		ci, err := e.cli.ContainerInspect(ctx, info.ContainerID, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := exec(t, m, info.ID, "echo ok", 30); r.Output != "ok\n" {
			t.Fatalf("execute: %q", r.Output)
		}
		if err := m.Delete(ctx, info.ID); err != nil {
			t.Fatal(err)
		}
		return ci.Container.Image
	}
	first := image()
	if _, err := e.cli.ImageRemove(ctx, first, client.ImageRemoveOptions{Force: true}); err != nil {
		t.Fatalf("remove the derived image: %v", err)
	}
	image()
}
