// Package sandboxtest gives tests a real Docker Engine, the offline busybox
// sandbox image and a freshly built sandbox-agent binary. Under CI=true a
// missing engine fails the test; elsewhere it skips it with the reason. A
// worker serving SandboxService on top of these is in
// internal/server/sandboxsvc/sandboxsvctest.
package sandboxtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/testimage"
	"golang.org/x/sys/unix"
)

// Docker returns a client of the local engine. Without a reachable engine
// the test fails under CI=true and is skipped otherwise.
func Docker(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = cli.Ping(ctx, client.PingOptions{})
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Docker Engine unreachable under CI=true: %v", err)
		}
		t.Skipf("Docker Engine unreachable: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

var (
	imageOnce sync.Once
	imageRef  string
	imageErr  error
)

// Image returns the busybox sandbox test image, importing it on first use.
func Image(t testing.TB, cli *client.Client) string {
	t.Helper()
	imageOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		imageRef, imageErr = testimage.Ensure(ctx, cli, "")
	})
	if imageErr != nil {
		t.Fatalf("sandbox test image: %v", imageErr)
	}
	return imageRef
}

var (
	agentOnce sync.Once
	agentBin  []byte
	agentErr  error
)

// Agent returns a static sandbox-agent binary built from this checkout.
func Agent(t testing.TB) []byte {
	t.Helper()
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sandbox-agent")
		if err != nil {
			agentErr = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "sandbox-agent")
		cmd := exec.Command("go", "build", "-trimpath", "-o", out, "github.com/plumbhq/plumb/cmd/sandbox-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
		if b, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("build sandbox-agent: %v: %s", err, b)
			return
		}
		agentBin, agentErr = os.ReadFile(out)
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return agentBin
}

var (
	egressOnce sync.Once
	egressBin  []byte
	egressErr  error
	probeOnce  sync.Once
	probeBin   []byte
	probeErr   error
)

// EgressProxy returns a static plumb-egress binary built from this
// checkout (Config.EgressProxy).
func EgressProxy(t testing.TB) []byte {
	t.Helper()
	egressOnce.Do(func() { egressBin, egressErr = buildStatic("github.com/plumbhq/plumb/cmd/plumb-egress") })
	if egressErr != nil {
		t.Fatal(egressErr)
	}
	return egressBin
}

// TLSProbe returns a static tlsprobe binary (sandboxtest/tlsprobe) to copy
// into a box.
func TLSProbe(t testing.TB) []byte {
	t.Helper()
	probeOnce.Do(func() { probeBin, probeErr = buildStatic("github.com/plumbhq/plumb/pkg/sandbox/sandboxtest/tlsprobe") })
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	return probeBin
}

// buildStatic builds a static Linux binary of pkg and returns it.
func buildStatic(pkg string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "plumb-build")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "bin")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build %s: %v: %s", pkg, err, b)
	}
	return os.ReadFile(out)
}

// Networks lists the engine networks (names) matching any of the filters,
// each once.
func Networks(ctx context.Context, cli *client.Client, filters ...client.Filters) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, f := range filters {
		nl, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
		if err != nil {
			return nil, err
		}
		for _, n := range nl.Items {
			if !seen[n.ID] {
				seen[n.ID] = true
				out = append(out, n.Name)
			}
		}
	}
	return out, nil
}

// RemoveNetworks removes the networks matching any of the filters (their
// containers must be gone) and returns their names.
func RemoveNetworks(ctx context.Context, cli *client.Client, filters ...client.Filters) ([]string, error) {
	names, err := Networks(ctx, cli, filters...)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, n := range names {
		if _, err := cli.NetworkRemove(ctx, n, client.NetworkRemoveOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("remove network %s: %w", n, err))
		}
	}
	return names, errors.Join(errs...)
}

// Runtimes returns the OCI runtimes the sandbox suites run under, by the
// engine's names: "runc" always, and "runsc" (gVisor) when the engine
// lists it. Under CI=true runsc is required (scripts/test-deps.sh
// installs and registers it): a missing runsc fails the test. Tests run
// one subtest per runtime.
func Runtimes(t testing.TB, cli *client.Client) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		t.Fatalf("engine info: %v", err)
	}
	out := []string{"runc"}
	if _, ok := info.Info.Runtimes["runsc"]; ok {
		out = append(out, "runsc")
	} else if os.Getenv("CI") == "true" {
		t.Fatalf("the engine has no runsc runtime under CI=true (it has %v); run scripts/test-deps.sh as root", slices.Sorted(maps.Keys(info.Info.Runtimes)))
	} else {
		t.Logf("the engine has no runsc runtime: the sandbox suites run under runc only (scripts/test-deps.sh installs it)")
	}
	return out
}

// ChannelEnv names the environment variable that runs a sandbox suite
// with another sandbox.Config.Channel: PLUMB_TEST_CHANNEL=exec runs
// ./pkg/sandbox/... with init as PID 1 and the agent a docker exec.
const ChannelEnv = "PLUMB_TEST_CHANNEL"

// Channel is the sandbox.Config.Channel the suites use: ChannelEnv's
// value, or the manager's default (sandbox.ChannelStdio) when it is unset.
func Channel() string { return cmp.Or(os.Getenv(ChannelEnv), sandbox.ChannelStdio) }

// Labels that tests put on every container and volume they create, so
// that what a test leaves behind can be found and removed.
const (
	// LabelTest carries one id per test (or test binary).
	LabelTest = "plumb.test"
	// LabelTestRun carries the id of the whole `make test` run (RunEnv).
	LabelTestRun = "plumb.test-run"
	// RunEnv is the environment variable `make test` sets to its run id;
	// at the end of the run it removes and reports anything carrying it.
	RunEnv = "PLUMB_TEST_RUN"
)

// Labels returns the labels for the things a test identified by run
// creates: LabelTest=run, plus LabelTestRun when RunEnv is set.
func Labels(run string) map[string]string {
	l := map[string]string{LabelTest: run}
	if r := os.Getenv(RunEnv); r != "" {
		l[LabelTestRun] = r
	}
	return l
}

// Label is the Docker filter for label key=value.
func Label(key, value string) client.Filters { return client.Filters{}.Add("label", key+"="+value) }

// Leftovers lists the containers (ids) and volumes (names) matching any of
// the filters, each once.
func Leftovers(ctx context.Context, cli *client.Client, filters ...client.Filters) (containers, volumes []string, err error) {
	seen := map[string]bool{}
	for _, f := range filters {
		cl, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
		if err != nil {
			return nil, nil, err
		}
		for _, c := range cl.Items {
			if !seen[c.ID] {
				seen[c.ID] = true
				containers = append(containers, c.ID)
			}
		}
		vl, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
		if err != nil {
			return nil, nil, err
		}
		for _, v := range vl.Items {
			if !seen[v.Name] {
				seen[v.Name] = true
				volumes = append(volumes, v.Name)
			}
		}
	}
	return containers, volumes, nil
}

// RemoveLeftovers force-removes the containers, then the volumes, matching
// any of the filters and returns what it found. err reports what could
// not be listed or removed.
func RemoveLeftovers(ctx context.Context, cli *client.Client, filters ...client.Filters) (containers, volumes []string, err error) {
	containers, volumes, err = Leftovers(ctx, cli, filters...)
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	for _, id := range containers {
		if _, err := cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			errs = append(errs, fmt.Errorf("remove container %s: %w", id, err))
		}
	}
	for _, v := range volumes {
		// A workspace image's loop device outlives its volume: detach it
		// first (the host's root only).
		if id, ok := strings.CutPrefix(v, sandbox.DiskVolume("")); ok {
			if err := DetachLoops(id + ".img"); err != nil {
				errs = append(errs, fmt.Errorf("volume %s: %w", v, err))
			}
		}
	}
	for _, v := range volumes {
		if _, err := cli.VolumeRemove(ctx, v, client.VolumeRemoveOptions{Force: true}); err != nil {
			errs = append(errs, fmt.Errorf("remove volume %s: %w", v, err))
		}
	}
	return containers, volumes, errors.Join(errs...)
}

// SweepOnCleanup registers a cleanup that removes whatever still carries
// label key=value when the test ends, however it ends, and fails the test
// if something cannot be removed. Register it before starting the
// processes that create sandboxes, so it runs after they have stopped.
func SweepOnCleanup(t testing.TB, cli *client.Client, key, value string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cs, vs, err := RemoveLeftovers(ctx, cli, Label(key, value))
		ns, nerr := RemoveNetworks(ctx, cli, Label(key, value))
		if len(cs)+len(vs)+len(ns) > 0 {
			t.Logf("removed what the daemons left with %s=%s: containers %v volumes %v networks %v", key, value, cs, vs, ns)
		}
		if err = errors.Join(err, nerr); err != nil {
			t.Errorf("sweep %s=%s: %v", key, value, err)
		}
	})
}

// KeeperOwner is the owner suffix under which tests keep the images their
// workers made (see ReleaseImagesOnCleanup).
const KeeperOwner = "plumbtest"

// ReleaseImagesOnCleanup registers a cleanup that drops the image tags
// worker made for itself (<plumb repository>:<key>-<worker>, the worker's
// own tags that its collector owns) when the test ends, so the random
// worker names of tests do not pile up tags on the engine. Each image
// keeps a tag <key>-plumbtest, which the next test's worker shares
// instead of building the image again.
func ReleaseImagesOnCleanup(t testing.TB, cli *client.Client, worker string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, err := cli.ImageList(ctx, client.ImageListOptions{})
		if err != nil {
			t.Errorf("list images: %v", err)
			return
		}
		for _, img := range list.Items {
			for _, ref := range img.RepoTags {
				repo, tag, _ := strings.Cut(ref, ":")
				key, ok := strings.CutSuffix(tag, "-"+worker)
				if !ok || !strings.HasPrefix(repo, "plumb-") || key == "" || strings.Contains(key, "-") {
					continue
				}
				if _, err := cli.ImageTag(ctx, client.ImageTagOptions{Source: img.ID, Target: repo + ":" + key + "-" + KeeperOwner}); err != nil {
					t.Errorf("keep image %s: %v", ref, err)
					continue
				}
				if _, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
					t.Errorf("untag %s: %v", ref, err)
				}
			}
		}
	})
}

// AssertHardened inspects container id and fails t unless it carries every
// default hardening of a sandbox: no capabilities, no-new-privileges, the
// default seccomp profile, no privilege, a read-only root with tmpfs /tmp,
// a non-root user, pids/memory (swap = memory)/CPU limits, no host
// namespaces, no host paths or Docker socket, and plumb's labels.
func AssertHardened(t testing.TB, cli *client.Client, id string) {
	t.Helper()
	res, err := cli.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	AssertInspectHardened(t, res)
}

// AssertInspectHardened is AssertHardened on a container already
// inspected (for a caller that must tell a container removed meanwhile
// from one that is not hardened).
func AssertInspectHardened(t testing.TB, res client.ContainerInspectResult) {
	t.Helper()
	id := res.Container.ID
	c, hc := res.Container.Config, res.Container.HostConfig
	check := func(ok bool, what string, got any) {
		if !ok {
			t.Errorf("container %s: %s (got %v)", id[:12], what, got)
		}
	}
	caps := slices.Sorted(slices.Values([]string(hc.CapAdd)))
	check(len(hc.CapDrop) == 1 && strings.EqualFold(hc.CapDrop[0], "ALL") && slices.Equal(caps, []string{"CAP_KILL", "CAP_SETGID", "CAP_SETUID"}),
		"all capabilities dropped, only KILL, SETGID, SETUID added (for the agent)", [2]any{hc.CapDrop, hc.CapAdd})
	check(slices.Contains(hc.SecurityOpt, "no-new-privileges:true"), "no-new-privileges", hc.SecurityOpt)
	for _, o := range hc.SecurityOpt {
		check(!strings.Contains(o, "unconfined"), "default seccomp/apparmor profile", o)
	}
	check(!hc.Privileged, "not privileged", hc.Privileged)
	check(hc.ReadonlyRootfs, "read-only root filesystem", hc.ReadonlyRootfs)
	_, hasTmp := hc.Tmpfs["/tmp"]
	check(hasTmp, "tmpfs /tmp", hc.Tmpfs)
	// PID 1 and the agent are container root with the three capabilities
	// above; commands run as the sandbox user (checked from inside).
	check(c.User == sandbox.AgentUser, "agent user "+sandbox.AgentUser, c.User)
	check(hc.LogConfig.Type == "none", "no engine log of the box's output", hc.LogConfig)
	// With the agent as PID 1 on the container's stdio, its stdin must
	// close when the worker's first attach ends: no later attach may write
	// frames into it.
	check(!c.OpenStdin || c.StdinOnce, "stdin closed after the worker's attach", [2]bool{c.OpenStdin, c.StdinOnce})
	check(slices.Equal(c.Entrypoint, []string{sandbox.AgentPath}) && len(c.Cmd) > 0 && (c.Cmd[0] == "init" || len(c.Cmd) > 1 && c.Cmd[0] == "serve" && c.Cmd[1] == "--pid1"),
		"PID 1 is the agent (init, or serve --pid1)", [2]any{c.Entrypoint, c.Cmd})
	// An image's HEALTHCHECK would run as container root with the box's
	// environment.
	check(c.Healthcheck != nil && slices.Equal(c.Healthcheck.Test, []string{"NONE"}), "health check off", c.Healthcheck)
	check(hc.OomScoreAdj == sandbox.OomScoreAdj, "OOM score adjustment", hc.OomScoreAdj)
	nofile := false
	for _, u := range hc.Ulimits {
		nofile = nofile || (u.Name == "nofile" && u.Hard > 0 && u.Hard <= sandbox.NofileHard)
	}
	check(nofile, "nofile ulimit", hc.Ulimits)
	check(hc.PidsLimit != nil && *hc.PidsLimit > 0, "pids limit", hc.PidsLimit)
	check(hc.Memory > 0 && hc.MemorySwap == hc.Memory, "memory limit with swap = memory", [2]int64{hc.Memory, hc.MemorySwap})
	check(hc.NanoCPUs > 0, "CPU quota", hc.NanoCPUs)
	check(hc.NetworkMode == "none" || strings.HasPrefix(string(hc.NetworkMode), "plumb-egress-"), "network none or its own egress network", hc.NetworkMode)
	check(hc.PidMode == "" && hc.UTSMode == "" && hc.UsernsMode == "" && !hc.IpcMode.IsHost() && !hc.NetworkMode.IsHost(), "no host namespaces", hc)
	check(len(hc.Binds) == 0, "no bind mounts", hc.Binds)
	for _, mt := range hc.Mounts {
		check(mt.Type == mount.TypeVolume, "only volume mounts", mt)
	}
	for _, mp := range res.Container.Mounts {
		check(!strings.Contains(mp.Source, "docker.sock") && mp.Type != mount.TypeBind, "no docker socket, no host paths", mp)
	}
	check(c.Labels[sandbox.LabelSandbox] != "" && c.Labels[sandbox.LabelWorker] != "", "plumb labels", c.Labels)
}

// LoopsBacking returns the loop devices of the host whose backing file's
// name matches pattern (filepath.Match; /sys/block/loop*/loop/backing_file,
// readable by anyone).
func LoopsBacking(pattern string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		p := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if ok, _ := filepath.Match(pattern, filepath.Base(p)); ok {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return out
}

// DetachLoops detaches the loop devices of the host whose backing file is
// named name (a device still mounted is detached once unmounted); it needs
// root.
func DetachLoops(name string) error {
	var errs []error
	for _, dev := range LoopsBacking(name) {
		f, err := os.OpenFile("/dev/"+dev, os.O_RDWR, 0)
		if err == nil {
			err = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
			f.Close()
		}
		if err != nil && !errors.Is(err, unix.ENXIO) {
			errs = append(errs, fmt.Errorf("detach %s (backed by %s): %w", dev, name, err))
		}
	}
	return errors.Join(errs...)
}

// AllocatedBytes is what a file takes on its file system (its blocks,
// not its length).
func AllocatedBytes(st os.FileInfo) int64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Blocks * 512
	}
	return st.Size()
}
