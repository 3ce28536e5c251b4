package xengine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/plumbhq/plumb/pkg/sandbox/testimage"
)

// Engine is a running private dockerd.
type Engine struct {
	// Client talks to it; Image is the busybox test image imported into it.
	Client *client.Client
	Image  string

	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
	logf   *os.File
}

// Runsc returns the path and arguments of the engine cli's runtime
// "runsc" (ok false when it has none).
func Runsc(ctx context.Context, cli *client.Client) (path string, args []string, ok bool, err error) {
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return "", nil, false, err
	}
	r, ok := info.Info.Runtimes["runsc"]
	return r.Path, r.Args, ok, nil
}

// Start starts a private dockerd with runtime "runsc" (runscPath with
// runscArgs) and the busybox test image imported; Stop ends it.
func Start(ctx context.Context, runscPath string, runscArgs []string) (_ *Engine, err error) {
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		return nil, err
	}
	// A short path: the engine's unix sockets live under it.
	dir, err := os.MkdirTemp("", "plumb-xd-")
	if err != nil {
		return nil, err
	}
	conf, err := json.Marshal(map[string]any{
		"experimental":   true,
		"storage-driver": "vfs",
		"runtimes":       map[string]any{"runsc": map[string]any{"path": runscPath, "runtimeArgs": runscArgs}},
	})
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "daemon.json"), conf, 0o600)
	}
	var logf *os.File
	if err == nil {
		logf, err = os.Create(filepath.Join(dir, "dockerd.log"))
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	sock := filepath.Join(dir, "docker.sock")
	cmd := exec.Command(dockerd, "--config-file", filepath.Join(dir, "daemon.json"),
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "dockerd.pid"), "-H", "unix://"+sock,
		"--iptables=false", "--ip-masq=false", "--bridge=none")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Cloneflags: syscall.CLONE_NEWNET}
	if err := cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	e := &Engine{dir: dir, cmd: cmd, exited: make(chan struct{}), logf: logf}
	go func() { _ = cmd.Wait(); close(e.exited) }()
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Stop())
		}
	}()
	if e.Client, err = client.New(client.WithHost("unix://" + sock)); err != nil {
		return nil, err
	}
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, perr := e.Client.Ping(pctx, client.PingOptions{})
		cancel()
		if perr == nil {
			break
		}
		select {
		case <-e.exited:
			return nil, fmt.Errorf("the experimental engine exited: %v; its log ends:\n%s", perr, e.LogTail())
		case <-ctx.Done():
			return nil, fmt.Errorf("the experimental engine does not answer: %v", perr)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if e.Image, err = testimage.Ensure(ctx, e.Client, ""); err != nil {
		return nil, fmt.Errorf("the test image in the experimental engine: %w", err)
	}
	return e, nil
}

// LogTail is the last 4 KiB of the engine's log.
func (e *Engine) LogTail() string {
	b, err := os.ReadFile(e.logf.Name())
	if err != nil {
		return err.Error()
	}
	return string(b[max(0, len(b)-4096):])
}

// Stop removes the engine's containers and volumes, stops dockerd and
// its containerd (killing them after a minute), unmounts whatever is left
// under the engine's directory and removes it.
func (e *Engine) Stop() error {
	var errs []error
	if e.Client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if list, err := e.Client.ContainerList(ctx, client.ContainerListOptions{All: true}); err == nil {
			for _, c := range list.Items {
				_, _ = e.Client.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			}
		}
		if list, err := e.Client.VolumeList(ctx, client.VolumeListOptions{}); err == nil {
			for _, v := range list.Items {
				_, _ = e.Client.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true})
			}
		}
		cancel()
		e.Client.Close()
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.exited:
	case <-time.After(time.Minute):
		errs = append(errs, errors.New("the experimental engine did not stop in a minute after SIGTERM: killed"))
		_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
		<-e.exited
	}
	// Its containerd stops with it; one that outlived a killed dockerd
	// is stopped here.
	if b, err := os.ReadFile(filepath.Join(e.dir, "exec", "containerd", "containerd.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 && syscall.Kill(pid, 0) == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	e.logf.Close()
	unmountUnder(e.dir)
	if err := os.RemoveAll(e.dir); err != nil {
		errs = append(errs, fmt.Errorf("remove the experimental engine's directory: %w", err))
	}
	return errors.Join(errs...)
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
