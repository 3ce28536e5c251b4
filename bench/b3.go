package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// runB3 times create sandbox → first successful Execute("true") through
// gRPC, cold (the image is present, the derived image already built by the
// warm-up), against Engine-API create + start of an equally hardened
// container followed by an exec of true. Deletion is not timed on either
// side. Under the default runtime it also times B4 in the same rounds: a
// claim from a warm pool → first Execute("true"), on a second worker whose
// defaults have a pool of one box; the refill after each claim runs
// outside the clock and ends before the next timed call.
func runB3(ctx context.Context, e *env) ([]Row, error) {
	w, err := e.sandboxWorker(ctx)
	if err != nil {
		return nil, err
	}
	cli := e.docker
	cleanup := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Minute)
	}

	var (
		id         string
		createOnly samples
	)
	// 20 rounds: the engine's own start varies by ±30 ms from call to
	// call under runsc, and with 12 the p50 ratio moved by ±0.04 from run
	// to run of the same code (docs/benchmarks.md, session 28).
	ours := &probe{name: "create→Execute(true)", warm: 1, n: e.scale(20, 4)}
	ours.f = func(ctx context.Context) error {
		var created time.Duration
		var err error
		if id, created, err = createAndRunTrue(ctx, w, e.createRequest()); err != nil {
			return err
		}
		createOnly = append(createOnly, created)
		return nil
	}
	ours.after = func() {
		if id == "" {
			return
		}
		ctx, cancel := cleanup()
		defer cancel()
		if _, err := w.c.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: id}); err != nil {
			e.log("delete sandbox %s: %v", id, err)
		}
		id = ""
	}

	var cid string
	base := &probe{name: "engine create+start+exec", warm: 1, n: ours.n}
	base.f = func(ctx context.Context) error {
		var err error
		cid, err = engineCreateStart(ctx, cli, e.image, e.runtime, e.labels())
		if err != nil {
			return err
		}
		_, err = engineExecOK(ctx, cli, cid, "true")
		return err
	}
	base.after = func() {
		if cid == "" {
			return
		}
		ctx, cancel := cleanup()
		defer cancel()
		e.removeContainer(ctx, cid)
		cid = ""
	}

	probes := []*probe{ours, base}
	var warm *probe
	if e.runtime == "" {
		pw, stop, err := e.poolWorker(ctx)
		if err != nil {
			return nil, err
		}
		defer stop()
		warm = warmProbe(e, pw, ours.n)
		probes = append(probes, warm)
	}
	if err := alternate(ctx, ours.n, probes...); err != nil {
		return nil, err
	}
	r := latencyRow("B3", `create sandbox → first Execute("true"), cold`, unitMs, ours.got)
	ratio := r.vsLatency("engine create+start, then exec true", latencyRow("", "", unitMs, base.got))
	// Issue 22's target is the ratio, under runc and runsc alike; the
	// spec's p50 ≤ 300 ms depends on the machine and is noted.
	r.Target = "≥ 1.0× the engine (issue 22)"
	r.judge(ratio >= 1)
	r.note("docs/benchmarks.md's absolute p50 ≤ 300 ms: %s", map[bool]string{true: "met", false: "not met"}[r.P50 <= 300])
	r.note("image present (derived agent image built during warm-up); ours = CreateSandbox RPC (volume + container + start + agent hello) then Execute RPC, "+
		"CreateSandbox alone p50 %.0f ms; the baseline container has the same hardening but no volume and runs sleep; deletion untimed on both sides",
		float64(createOnly[len(createOnly)-r.N:].p50())/float64(time.Millisecond))
	if warm == nil {
		return []Row{r}, nil
	}
	b4 := latencyRow("B4", `warm pool claim → first Execute("true")`, unitMs, warm.got)
	vsB3 := b4.vsLatency("B3: cold create → first Execute (same run)", r)
	b4.vsLatency("engine create+start, then exec true", latencyRow("", "", unitMs, base.got))
	b4.Target = "p50 ≤ 15 ms; ≥ 20× B3"
	b4.judge(b4.P50 <= 15 && vsB3 >= 20)
	b4.note("CreateSandbox RPC claiming a box of the defaults' pool (size 1: created, started and greeted ahead, channel open; owner, labels and TTL set by the claim) then Execute RPC; " +
		"every timed create was checked to be a pool hit; the refill (a cold create) and the deletion run untimed, and the pool is full again before the next timed call")
	return []Row{r, b4}, nil
}

// poolWorker starts a second worker whose defaults keep a warm pool of one
// box; stop deletes its sandboxes and pool boxes.
func (e *env) poolWorker(ctx context.Context) (*worker, func(), error) {
	dir, err := os.MkdirTemp("", "plumb-bench-pool")
	if err != nil {
		return nil, nil, err
	}
	w, err := e.startWorker(ctx, e.docker, sandbox.Config{
		Worker: "benchpool" + e.runID, StateDir: dir,
		Pools: map[string]sandbox.PoolConfig{"": {Size: 1}},
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := w.stop(ctx); err != nil {
			e.log("delete pool worker sandboxes: %v", err)
		}
		os.RemoveAll(dir)
	}
	return w, stop, nil
}

// poolFull waits until w's one pool is full with no box starting and
// returns its hits so far.
func poolFull(ctx context.Context, w *worker) (uint64, error) {
	for {
		ps := w.m.Pools()
		if len(ps) == 1 && ps[0].Ready == ps[0].Size && ps[0].Starting == 0 {
			return ps[0].Hits, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the warm pool did not refill: %+v: %w", ps, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// warmProbe times a claim from w's pool and the first Execute in the box.
// Before each call (outside the clock) it waits for the pool to be full;
// after it, it checks the create was a hit and deletes the box.
func warmProbe(e *env, w *worker, n int) *probe {
	var (
		id   string
		hits uint64
	)
	p := &probe{name: "warm claim→Execute(true)", warm: 1, n: n}
	ready := func(ctx context.Context) (err error) {
		hits, err = poolFull(ctx, w)
		return err
	}
	var readyErr error
	p.f = func(ctx context.Context) error {
		if readyErr != nil {
			return readyErr
		}
		var err error
		if id, _, err = createAndRunTrue(ctx, w, e.createRequest()); err != nil {
			return err
		}
		if ps := w.m.Pools(); ps[0].Hits != hits+1 {
			return fmt.Errorf("create was not served from the warm pool: %+v", ps[0])
		}
		return nil
	}
	p.after = func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if id != "" {
			if _, err := w.c.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: id}); err != nil {
				e.log("delete sandbox %s: %v", id, err)
			}
			id = ""
		}
		readyErr = ready(ctx)
	}
	// The first call needs a full pool too.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	readyErr = ready(ctx)
	cancel()
	return p
}

// engineCreateStart creates and starts a container with a sandbox's
// hardening (no capabilities, no-new-privileges, read-only root, tmpfs
// /tmp, no network, memory/CPU/pids limits, the sandbox user) running
// sleep under runtime ("" = the engine's default), and returns its id. It
// carries the run's labels.
func engineCreateStart(ctx context.Context, cli *client.Client, image, runtime string, labels map[string]string) (string, error) {
	id, err := engineCreate(ctx, cli, image, runtime, labels, nil)
	if err != nil {
		return id, err
	}
	if _, err := cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return id, fmt.Errorf("container start: %w", err)
	}
	return id, nil
}

// engineCreate creates (does not start) engineCreateStart's container,
// with mounts added.
func engineCreate(ctx context.Context, cli *client.Client, image, runtime string, labels map[string]string, mounts []mount.Mount) (string, error) {
	return engineCreateCmd(ctx, cli, image, runtime, labels, mounts, false, "sleep", "3600")
}

// engineCreateCmd is engineCreate running cmd as PID 1, with its stdin
// open for an attach when stdin is set. Such a box answers on its stdio,
// as plumb's agent does, and like plumb's box it has no engine log: the
// engine would copy every answer to a log file too.
func engineCreateCmd(ctx context.Context, cli *client.Client, image, runtime string, labels map[string]string, mounts []mount.Mount, stdin bool, cmd ...string) (string, error) {
	pids := int64(256)
	if runtime == "runsc" {
		pids = 1024 // the sentry's threads count too
	}
	mem := int64(512 << 20)
	var logs container.LogConfig // the engine's default
	if stdin {
		logs.Type = "none"
	}
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: image, User: sandbox.DefaultUser, Cmd: cmd, Labels: labels, WorkingDir: "/tmp", OpenStdin: stdin, AttachStdin: stdin},
		HostConfig: &container.HostConfig{
			NetworkMode: "none", CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges:true"},
			ReadonlyRootfs: true, IpcMode: container.IPCModePrivate, Runtime: runtime, LogConfig: logs,
			Tmpfs:     map[string]string{"/tmp": "rw,nosuid,nodev,size=67108864,mode=1777"},
			Resources: container.Resources{Memory: mem, MemorySwap: mem, NanoCPUs: 1e9, PidsLimit: &pids},
			Mounts:    mounts,
		},
	})
	if err != nil {
		return "", fmt.Errorf("container create: %w", err)
	}
	return c.ID, nil
}

// createAndRunTrue creates a sandbox through w and runs `true` in it, the
// work B3 and B4 time. It returns the sandbox's id (set once the create
// succeeded, even if the execute fails, so the caller can delete it) and
// how long the create alone took.
func createAndRunTrue(ctx context.Context, w *worker, req *plumbv1.CreateSandboxRequest) (id string, created time.Duration, err error) {
	t0 := time.Now()
	res, err := w.c.CreateSandbox(ctx, req)
	if err != nil {
		return "", 0, err
	}
	created = time.Since(t0)
	id = res.GetSandbox().GetId()
	r, err := w.c.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "true"}})
	if err != nil {
		return id, created, err
	}
	if code := r.GetResult().GetExitCode(); code != 0 {
		return id, created, fmt.Errorf("true exited %d", code)
	}
	return id, created, nil
}
