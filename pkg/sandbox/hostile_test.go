package sandbox_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
)

// agentPID is a shell snippet that sets A to the agent's pid: the
// command's shell is the agent's child.
const agentPID = `A=$PPID; `

// TestBoxCannotReachTheAgent runs box code that attacks the in-box agent
// and PID 1; every attack fails with EPERM or EACCES, the sandbox keeps
// serving (the channel is never reset) after each one, a neighbour keeps
// serving during each one, and the worker's heap stays within its channel
// memory budget.
func TestBoxCannotReachTheAgent(t *testing.T) {
	e := newEnv(t)
	e.cfg.ChannelMemoryBytes = testChannelBudget
	m := e.manager(t)
	neighbour := e.create(t, m, sandbox.CreateSpec{})
	heap := watchHeap(t, testChannelBudget)
	for _, rt := range sandboxtest.Runtimes(t, e.cli) {
		t.Run(rt, func(t *testing.T) { boxCannotReachTheAgent(t, e, m, rt, neighbour.ID) })
	}
	heap.check(t)
}

// testChannelBudget is the worker's channel memory budget in the
// hostile-box tests, small enough that heap growth past it is a finding.
const testChannelBudget = 64 << 20

// keepsServing runs attack while the neighbour sandbox answers "echo
// alive" over and over, and fails t unless every answer came: the first
// asked as the attack starts, more while it runs, and one after it.
func keepsServing(t *testing.T, m *sandbox.Manager, neighbour string, attack func()) {
	t.Helper()
	f, err := m.Files(neighbour)
	if err != nil {
		t.Fatal(err)
	}
	echo := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
		defer cancel()
		timeout := 60
		r, err := f.Execute(ctx, backend.ExecuteRequest{Command: "echo alive", TimeoutSeconds: &timeout})
		if err == nil && r.Output != "alive\n" {
			err = fmt.Errorf("output %q, exit %d", r.Output, exitCode(r))
		}
		return err
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	var answers int
	var failure error
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond) // pacing, not synchronisation
		defer tick.Stop()
		for failure == nil {
			if failure = echo(); failure == nil {
				answers++
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	halt := sync.OnceFunc(func() { close(stop); <-done })
	defer halt() // when attack fails the test
	attack()
	halt()
	if failure != nil {
		t.Fatalf("neighbour %s during the attack: %v", neighbour, failure)
	}
	if err := echo(); err != nil {
		t.Fatalf("neighbour %s after the attack: %v", neighbour, err)
	}
	if answers == 0 {
		t.Fatalf("neighbour %s never answered during the attack", neighbour)
	}
}

// heapWatch samples the worker's (this process's) heap until check.
type heapWatch struct {
	budget uint64
	base   uint64
	peak   atomic.Uint64 // written by the sampler
	halt   func()        // stops the sampler and waits for it; idempotent
}

// watchHeap starts sampling the heap every 100 ms; check stops it and
// fails t if the heap grew past budget.
func watchHeap(t *testing.T, budget uint64) *heapWatch {
	t.Helper()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	stop, done := make(chan struct{}), make(chan struct{})
	h := &heapWatch{budget: budget, base: ms.HeapAlloc, halt: sync.OnceFunc(func() { close(stop); <-done })}
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if ms.HeapAlloc > h.peak.Load() {
					h.peak.Store(ms.HeapAlloc)
				}
			}
		}
	}()
	t.Cleanup(h.halt) // a test that fails early still stops the sampler
	return h
}

// check stops the sampler and fails t if the heap grew past the budget.
func (h *heapWatch) check(t *testing.T) {
	t.Helper()
	h.halt()
	base, peak := h.base, h.peak.Load()
	growth := int64(peak) - int64(base)
	t.Logf("worker heap: base %d bytes, peak %d bytes, growth %d bytes (channel budget %d)", base, peak, growth, h.budget)
	if growth > int64(h.budget) {
		t.Fatalf("worker heap grew %d bytes, more than the %d-byte channel budget", growth, h.budget)
	}
}

func boxCannotReachTheAgent(t *testing.T, e *env, m *sandbox.Manager, runtime, neighbour string) {
	info := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{Runtime: runtime}})
	tests := []struct {
		name string
		cmd  string
		want string // substring of the output
	}{
		{"commands run as the sandbox user with their tag as the only other group", "id -u; id -g; id -G | wc -w; [ $(id -G | cut -d' ' -f2) -ge 1073741824 ] && echo tagged", "1000\n1000\n2\ntagged\n"},
		{"the agent is root, not the sandbox user", agentPID + "stat -c %u /proc/$A", "0\n"},
		{"stop the agent", agentPID + "kill -STOP $A 2>&1; echo status $?", "status 1"},
		{"kill PID 1", "kill -9 1 2>&1; echo status $?", "status 1"},
		{"kill the agent", agentPID + "kill -9 $A 2>&1; echo status $?", "status 1"},
		{"write into the agent's channel", agentPID + "echo '{\"id\":1,\"done\":true}' > /proc/$A/fd/1 2>&1; echo status $?", "status 1"},
		// The engine log is off (AssertHardened checks LogConfig none on
		// every box); PID 1's stdout is out of reach all the same.
		{"flood PID 1's stdout", "head -c 1048576 /dev/zero > /proc/1/fd/1 2>&1; echo status $?", "status 1"},
		{"flood PID 1's stderr", "head -c 1048576 /dev/zero > /proc/1/fd/2 2>&1; echo status $?", "status 1"},
		{"read the agent's environment", agentPID + "cat /proc/$A/environ 2>&1 >/dev/null; echo status $?", "status 1"},
		{"list the agent's fds", agentPID + "ls /proc/$A/fd 2>&1 >/dev/null; echo status $?", "status 1"},
		{"no capabilities", "grep -E 'Cap(Eff|Prm|Inh|Amb)' /proc/self/status | grep -vc 0000000000000000", "0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r backend.ExecuteResult
			keepsServing(t, m, neighbour, func() { r = exec(t, m, info.ID, tt.cmd, 120) })
			if !strings.Contains(r.Output, tt.want) {
				t.Fatalf("%q: output %q, want %q", tt.cmd, r.Output, tt.want)
			}
			if strings.Contains(r.Output, "status 1") && !strings.Contains(r.Output, "not permitted") && !strings.Contains(r.Output, "denied") {
				t.Fatalf("%q failed for another reason than EPERM/EACCES: %q", tt.cmd, r.Output)
			}
			// Still serving on the same channel.
			if r := exec(t, m, info.ID, "echo alive", 120); r.Output != "alive\n" {
				t.Fatalf("after %q: %q", tt.cmd, r.Output)
			}
		})
	}
	got, err := m.Get(context.Background(), info.ID)
	if err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("sandbox after the attacks: %+v, %v", got, err)
	}
}

// TestFilesBelongToTheSandboxUser: files written by file operations and by
// commands, in the workspace and in /tmp, are owned by the sandbox user.
func TestFilesBelongToTheSandboxUser(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t)
	info := e.create(t, m, sandbox.CreateSpec{})
	f, err := m.Files(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, p := range []string{"/workspace/op.txt", "/workspace/sub/dir/op.txt", "/tmp/op.txt"} {
		if _, err := f.Write(ctx, p, []byte("x")); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
	r := exec(t, m, info.ID, "echo x > cmd.txt && echo y > /tmp/cmd.txt && mkdir -p d && "+
		"stat -c '%n %u:%g' /workspace /workspace/op.txt /workspace/sub/dir /workspace/sub/dir/op.txt /tmp/op.txt cmd.txt /tmp/cmd.txt d", 120)
	if exitCode(r) != 0 {
		t.Fatalf("stat: %q exit %d", r.Output, exitCode(r))
	}
	for _, line := range strings.Split(strings.TrimSpace(r.Output), "\n") {
		if !strings.HasSuffix(line, " 1000:1000") {
			t.Errorf("owner: %s, want 1000:1000", line)
		}
	}
	// Permission checks are the user's too: a file the user made
	// unwritable stays unwritable for the agent, though it is root.
	exec(t, m, info.ID, "echo keep > locked.txt && chmod 0444 locked.txt && chmod 0555 /workspace/sub", 120)
	if _, err := f.Write(ctx, "/workspace/sub/new.txt", []byte("x")); backend.CodeOf(err) != backend.CodePermissionDenied {
		t.Fatalf("write into a dir the user made read-only: %v, want permission_denied", err)
	}
}

// TestTimeoutKillsEveryDescendant: a command's children that left its
// process group and session (setsid) die with it on timeout, and so do
// double-forked grandchildren, under every runtime. (With Debian's runsc,
// gVisor 20221219 on the ptrace platform, this very command crashed the
// gVisor sandbox at the timeout; the current gVisor kills the tree.)
func TestTimeoutKillsEveryDescendant(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t)
	for _, rt := range sandboxtest.Runtimes(t, e.cli) {
		t.Run(rt, func(t *testing.T) { timeoutKillsEveryDescendant(t, e, m, rt) })
	}
}

func timeoutKillsEveryDescendant(t *testing.T, e *env, m *sandbox.Manager, runtime string) {
	info := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{Runtime: runtime}})
	r := exec(t, m, info.ID, "setsid sleep 1001 & (setsid sh -c 'sleep 1002 & sleep 1003' &) ; sleep 1004", 2)
	if !r.TimedOut {
		t.Fatalf("not timed out: %+v", r)
	}
	// The agent kills every process carrying the command's tag after
	// backend.KillGrace; poll, with a hang guard only.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r := exec(t, m, info.ID, "ps -o args | grep -c '[s]leep 100'", 60)
		if r.Output == "0\n" {
			break
		}
		if time.Now().After(deadline) {
			out := exec(t, m, info.ID, "ps -o pid,ppid,user,args", 60)
			t.Fatalf("survivors after the timeout: %s", out.Output)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A background process of a command that ends normally lives on.
	exec(t, m, info.ID, "setsid sleep 1005 >/dev/null 2>&1 &", 60)
	if r := exec(t, m, info.ID, "ps -o args | grep -c '[s]leep 1005'", 60); r.Output != "1\n" {
		t.Fatalf("background process after a normal end: %q", r.Output)
	}
}

// TestRefusedUsersAndWorkingDirs: uid or gid 0 is refused at NewManager,
// and working dirs are checked after cleaning.
func TestRefusedUsersAndWorkingDirs(t *testing.T) {
	e := newEnv(t)
	for _, user := range []string{"0:1000", "1000:0", "0:0", "root", "-1:5"} {
		cfg := e.cfg
		cfg.User = user
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		m, err := sandbox.NewManager(ctx, e.cli, cfg)
		cancel()
		if err == nil {
			m.Close()
			t.Fatalf("user %q accepted", user)
		}
		if sandbox.CodeOf(err) != sandbox.CodeInvalid || !strings.Contains(err.Error(), user) {
			t.Fatalf("user %q: %v", user, err)
		}
	}
	m := e.manager(t)
	for _, dir := range []string{"//.plumb", "/.plumb", "/.plumb/x", "/x/../.plumb", "/work/", "/work//x", "relative", "/"} {
		_, err := m.Create(context.Background(), sandbox.CreateSpec{Overrides: sandbox.Template{WorkingDir: dir}})
		if sandbox.CodeOf(err) != sandbox.CodeInvalid || !strings.Contains(err.Error(), fmt.Sprintf("%q", dir)) {
			t.Fatalf("working_dir %q: %v", dir, err)
		}
	}
}

// TestImageWithVolumeRefused: an image that declares a VOLUME (which would
// become an unbounded writable engine volume) is refused, naming it.
func TestImageWithVolumeRefused(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref := e.commitVariant(ctx, t, "plumb-test-volume:"+testRun, client.ContainerCommitOptions{Changes: []string{"VOLUME /data"}})
	m := e.manager(t)
	_, err := m.Create(ctx, sandbox.CreateSpec{Overrides: sandbox.Template{Image: ref}})
	if sandbox.CodeOf(err) != sandbox.CodeInvalid || !strings.Contains(err.Error(), "VOLUME /data") {
		t.Fatalf("create from an image with a VOLUME: %v, want invalid naming VOLUME /data", err)
	}
}

// TestImageHealthcheckNeverRuns: an image's HEALTHCHECK would run as
// container root with the tenant's environment; the worker turns it off,
// so the engine never schedules it (no health state) and its command never
// runs (its marker never appears in the workspace).
func TestImageHealthcheckNeverRuns(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref := e.commitVariant(ctx, t, "plumb-test-healthcheck:"+testRun, client.ContainerCommitOptions{Config: &container.Config{
		Image: e.image, Cmd: []string{"true"},
		Healthcheck: &container.HealthConfig{
			Test:     []string{"CMD", "/bin/sh", "-c", "id -u > /workspace/healthcheck-ran"},
			Interval: time.Second, StartPeriod: time.Second, Retries: 1,
		},
	}})
	if img, err := e.cli.ImageInspect(ctx, ref); err != nil || img.Config == nil || img.Config.Healthcheck == nil {
		t.Fatalf("the test image has no health check: %v", err)
	}
	m := e.manager(t)
	info := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{Image: ref}})
	res, err := e.cli.ContainerInspect(ctx, info.ContainerID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := res.Container.State.Health; h != nil {
		t.Fatalf("the engine schedules the image's health check: status %q, %d runs", h.Status, len(h.Log))
	}
	// Several health intervals of work in the box: the marker stays absent.
	for range 3 {
		if r := exec(t, m, info.ID, "sleep 1; test -e /workspace/healthcheck-ran && echo ran || echo absent", 30); r.Output != "absent\n" {
			t.Fatalf("the image's health check ran: %q", r.Output)
		}
	}
}

// commitVariant commits a never-started container of the test image as
// ref with opts (its Reference is set here) and removes the image on
// cleanup; the container is removed at once.
func (e *env) commitVariant(ctx context.Context, t *testing.T, ref string, opts client.ContainerCommitOptions) string {
	t.Helper()
	c, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: e.image, Cmd: []string{"true"}, Labels: sandboxtest.Labels(testRun)},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = e.cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	}()
	opts.Reference = ref
	if _, err := e.cli.ContainerCommit(ctx, c.ID, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	})
	return ref
}
