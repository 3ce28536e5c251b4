package sandboxtest

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/plumbhq/plumb/pkg/sandbox/testimage"
)

// ExperimentalEngine starts a private dockerd of the test's own, with
// experimental features on (Docker's checkpoint API) and the runsc runtime
// the shared engine has registered, and returns a client of it and the
// busybox test image imported into it. The shared engine is never reconfigured:
// the private one has its own data root, exec root, socket and containerd,
// no bridge and no iptables rules, and vfs storage. When t ends its
// containers and volumes are removed, dockerd and its containerd are
// stopped, and every mount and file under its directory is gone. Without
// dockerd or a runsc runtime on the shared engine the test fails under
// CI=true and is skipped otherwise.
func ExperimentalEngine(t testing.TB, shared *client.Client) (*client.Client, string) {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("experimental engine under CI=true: "+format, args...)
		}
		t.Skipf("experimental engine: "+format, args...)
	}
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		unavailable("no dockerd: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := shared.Info(ctx, client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runsc, ok := info.Info.Runtimes["runsc"]
	if !ok {
		unavailable("the shared engine has no runsc runtime (scripts/test-deps.sh registers it)")
	}
	// A short path: the engine's unix sockets live under it.
	dir, err := os.MkdirTemp("", "plumb-xd-")
	if err != nil {
		t.Fatal(err)
	}
	conf, err := json.Marshal(map[string]any{
		"experimental":   true,
		"storage-driver": "vfs",
		"runtimes":       map[string]any{"runsc": map[string]any{"path": runsc.Path, "runtimeArgs": runsc.Args}},
	})
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "daemon.json"), conf, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "docker.sock")
	cmd := exec.Command(dockerd, "--config-file", filepath.Join(dir, "daemon.json"),
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "dockerd.pid"), "-H", "unix://"+sock,
		"--iptables=false", "--ip-masq=false", "--bridge=none")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	cli, err := client.New(client.WithHost("unix://"+sock), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true}); err == nil {
			for _, c := range list.Items {
				_, _ = cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			}
		}
		if list, err := cli.VolumeList(ctx, client.VolumeListOptions{}); err == nil {
			for _, v := range list.Items {
				_, _ = cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true})
			}
		}
		cli.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			t.Errorf("the experimental engine did not stop in a minute after SIGTERM: killed (log %s)", logf.Name())
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		// Its containerd stops with it; one that outlived a killed
		// dockerd is stopped here.
		if b, err := os.ReadFile(filepath.Join(dir, "exec", "containerd", "containerd.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 && syscall.Kill(pid, 0) == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil && len(b) > 0 {
				t.Logf("experimental engine's log (last 4 KiB):\n%s", b[max(0, len(b)-4096):])
			}
		}
		unmountUnder(dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove the experimental engine's directory: %v", err)
		}
	})
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Ping(pctx, client.PingOptions{})
		pcancel()
		if err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("the experimental engine exited: %v (log %s)", err, logf.Name())
		case <-ctx.Done():
			t.Fatalf("the experimental engine does not answer: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	ref, err := testimage.Ensure(ctx, cli, "")
	if err != nil {
		t.Fatalf("the test image in the experimental engine: %v", err)
	}
	return cli, ref
}

// unmountUnder lazily unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = unix.Unmount(points[i], unix.MNT_DETACH)
	}
}
