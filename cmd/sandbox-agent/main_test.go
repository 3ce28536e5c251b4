package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/plumbhq/plumb/internal/version"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentlog"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// initModeEnv makes the test binary act as the container's init (see
// TestInitReapsOrphans).
const initModeEnv = "PLUMB_SANDBOX_AGENT_TEST_INIT"

func TestMain(m *testing.M) {
	if os.Getenv(initModeEnv) == "1" {
		os.Exit(initChild())
	}
	if raw := os.Getenv(pid1ArgsEnv); raw != "" {
		var args []string
		if err := json.Unmarshal([]byte(raw), &args); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(run(args, os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// initChild stands in for PID 1: as a child subreaper it inherits orphans
// the way PID 1 does. It makes one orphan, prints its pid, then runs init.
func initChild() int {
	const prSetChildSubreaper = 36
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		fmt.Fprintln(os.Stderr, "prctl:", errno)
		return 3
	}
	out, err := exec.Command("/bin/sh", "-c", "sleep 0.2 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "orphan:", err)
		return 3
	}
	fmt.Print(string(out))
	return runInit()
}

func TestInitReapsOrphans(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Fatalf("the executes need /bin/sh: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), initModeEnv+"=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("read orphan pid: %q %v", line, err)
	}
	// Reaped means gone from /proc; an unreaped orphan stays a zombie.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("orphan %d was not reaped", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("init exited with %v after SIGTERM, want status 0", err)
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("init did not exit on SIGTERM")
	}
}

func TestRunArgs(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		wantStdout string
		wantStderr string
	}{
		{name: "version", args: []string{"--version"}, code: 0, wantStdout: "sandbox-agent dev"},
		{name: "no command", args: nil, code: 2, wantStderr: "usage"},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, wantStderr: `unknown command "frobnicate"`},
		{name: "help", args: []string{"--help"}, code: 0, wantStdout: "usage"},
		{name: "serve with a bad flag", args: []string{"serve", "--nope"}, code: 1, wantStderr: "nope"},
		{name: "serve with extra arguments", args: []string{"serve", "extra"}, code: 1, wantStderr: "unexpected arguments"},
		{name: "serve with a missing root", args: []string{"serve", "--root", "/no/such/dir/plumb"}, code: 1, wantStderr: "open root"},
		{name: "serve with a bad log level", args: []string{"serve", "--log-level", "loud"}, code: 1, wantStderr: "log-level"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, strings.NewReader(""), &stdout, &stderr)
			if code != tt.code || !strings.Contains(stdout.String(), tt.wantStdout) || !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Fatalf("exit %d stdout %q stderr %q; want exit %d, stdout ~%q, stderr ~%q", code, stdout.String(), stderr.String(), tt.code, tt.wantStdout, tt.wantStderr)
			}
		})
	}
}

// TestServe runs `serve` on pipes, wired as in a container: hello reports
// the flags, execute runs in the workspace, file ops go to the fileops
// engine under --root (uploads and downloads in chunks), and closing stdin
// ends the command with status 0.
func TestServe(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Fatalf("the executes need /bin/sh: %v", err)
	}
	// The hello reports the build version, which -ldflags -X sets.
	old := version.Version
	version.Version = "v9.8.7-test"
	t.Cleanup(func() { version.Version = old })
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"serve", "--root", root, "--workspace", ws, "--log-level", "warn"}, inR, outW, &stderr)
		outW.Close()
	}()
	enc := agentproto.NewWriter(inW)
	frames := agentproto.NewReader(outR, 0)
	call := func(id uint64, op agentproto.Op, args any) agentproto.Response {
		t.Helper()
		return roundTrip(t, enc, frames, id, op, args)
	}

	var h agentproto.Hello
	if r := call(1, agentproto.OpHello, struct{}{}); r.Error != nil || json.Unmarshal(r.Result, &h) != nil || h.Root != root || h.Workspace != ws || h.AgentVersion != "v9.8.7-test" {
		t.Fatalf("hello: %+v (%+v)", r, h)
	}
	var res backend.ExecuteResult
	if r := call(2, agentproto.OpExecute, backend.ExecuteRequest{Command: "pwd"}); r.Error != nil || json.Unmarshal(r.Result, &res) != nil || res.Output != ws+"\n" {
		t.Fatalf("execute: %+v (%+v)", r, res)
	}
	if r := call(3, agentproto.OpExecute, backend.ExecuteRequest{Command: "printf 'one\\ntwo\\n' > made.txt"}); r.Error != nil {
		t.Fatalf("execute: %+v", r)
	}
	var rr backend.ReadResult
	if r := call(4, agentproto.OpRead, backend.ReadRequest{Path: "/ws/made.txt", Limit: 10}); r.Error != nil || json.Unmarshal(r.Result, &rr) != nil || rr.Content != "one\ntwo" {
		t.Fatalf("read what execute wrote: %+v (%+v)", r, rr)
	}
	if r := call(5, agentproto.OpRead, backend.ReadRequest{Path: "/ws/missing", Limit: 10}); r.Error == nil || r.Error.Code != backend.CodeFileNotFound {
		t.Fatalf("read missing: %+v", r)
	}

	// Upload in two chunks, then download.
	data := bytes.Repeat([]byte{0, 1, 2, 0xff, '\n'}, agentproto.ChunkBytes/4)
	var uh agentproto.UploadHandle
	if r := call(6, agentproto.OpUploadOpen, agentproto.PathArgs{Path: "/ws/up/blob.bin"}); r.Error != nil || json.Unmarshal(r.Result, &uh) != nil {
		t.Fatalf("upload_open: %+v", r)
	}
	// The second chunk first: chunks carry their offsets.
	parts := []struct {
		off  int64
		data []byte
	}{{agentproto.ChunkBytes, data[agentproto.ChunkBytes:]}, {0, data[:agentproto.ChunkBytes]}}
	for i, part := range parts {
		if r := call(uint64(7+i), agentproto.OpUploadChunk, chunk{agentproto.UploadChunkArgs{Handle: uh.Handle, Offset: part.off}, part.data}); r.Error != nil {
			t.Fatalf("upload_chunk: %+v", r)
		}
	}
	if r := call(9, agentproto.OpUploadClose, agentproto.UploadCloseArgs{Handle: uh.Handle, Commit: true, Size: int64(len(data))}); r.Error != nil {
		t.Fatalf("upload_close: %+v", r)
	}
	if got, err := os.ReadFile(filepath.Join(ws, "up", "blob.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("uploaded file: %d bytes, %v", len(got), err)
	}
	var dh agentproto.DownloadHandle
	if r := call(10, agentproto.OpDownloadOpen, agentproto.PathArgs{Path: "/ws/up/blob.bin"}); r.Error != nil || json.Unmarshal(r.Result, &dh) != nil || dh.Size != int64(len(data)) {
		t.Fatalf("download_open: %+v (%+v)", r, dh)
	}
	var got []byte
	for id, off := uint64(11), int64(0); off < dh.Size; id++ {
		n := int(min(dh.Size-off, agentproto.ChunkBytes))
		r := call(id, agentproto.OpDownloadRead, agentproto.DownloadReadArgs{Handle: dh.Handle, Offset: off, Length: n})
		if r.Error != nil || len(r.Data) != n {
			t.Fatalf("download_read: %+v", r)
		}
		got = append(got, r.Data...)
		off += int64(n)
	}
	if r := call(20, agentproto.OpDownloadClose, agentproto.DownloadCloseArgs{Handle: dh.Handle}); r.Error != nil {
		t.Fatalf("download_close: %+v", r)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("downloaded %d bytes, want the %d uploaded", len(got), len(data))
	}
	var ls backend.LsResult
	if r := call(11, agentproto.OpLs, agentproto.PathArgs{Path: "/ws"}); r.Error != nil || json.Unmarshal(r.Result, &ls) != nil || len(ls.Entries) != 2 {
		t.Fatalf("ls: %+v (%+v)", r, ls)
	}
	inW.Close()
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("serve exited %d; stderr %s", c, stderr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("serve did not exit after stdin closed")
	}
}

func TestVirtualUnder(t *testing.T) {
	tests := []struct {
		name, root, dir, want string
	}{
		{"root /", "/", "/workspace", "/workspace"},
		{"nested", "/", "/a/b/", "/a/b"},
		{"workspace is the root", "/workspace", "/workspace", "/"},
		{"under a non-/ root", "/srv", "/srv/ws", "/ws"},
		{"outside the root", "/srv", "/workspace", "/"},
		{"dot-dot prefix name is inside", "/srv", "/srv/..x", "/..x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := virtualUnder(tt.root, tt.dir); got != tt.want {
				t.Fatalf("virtualUnder(%q, %q) = %q, want %q", tt.root, tt.dir, got, tt.want)
			}
		})
	}
}

// roundTrip sends one request to an agent and returns its final response,
// skipping events and other requests' frames.
// chunk is a request's arguments with a binary payload.
type chunk struct {
	args any
	data []byte
}

func roundTrip(t *testing.T, enc *agentproto.Writer, frames *agentproto.Reader, id uint64, op agentproto.Op, args any) agentproto.Response {
	t.Helper()
	var payload []byte
	if c, ok := args.(chunk); ok {
		args, payload = c.args, c.data
	}
	raw, _ := json.Marshal(args)
	if err := enc.Write(agentproto.Request{ID: id, Op: op, Args: raw, Payload: payload}); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := frames.Next()
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
		resp, err := agentproto.DecodeResponse(f)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Bin > 0 {
			if resp.Data, err = frames.ReadPayload(resp.Bin); err != nil {
				t.Fatal(err)
			}
		}
		if resp.ID == id && resp.Done {
			return resp
		}
	}
}

// pid1ArgsEnv makes the test binary run `run` with these arguments
// (JSON), as a process of its own: `serve --pid1` reaps every child of its
// process, which the test process must not do.
const pid1ArgsEnv = "PLUMB_SANDBOX_AGENT_TEST_PID1_ARGS"

// startPID1 starts `serve --pid1 args…` in a child process on pipes and
// returns it with its request writer and response reader. The process is
// killed when the test ends, whatever happened.
func startPID1(t *testing.T, args ...string) (*exec.Cmd, *agentproto.Writer, *agentproto.Reader, io.WriteCloser, *bytes.Buffer) {
	t.Helper()
	raw, _ := json.Marshal(append([]string{"serve", "--pid1"}, args...))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), pid1ArgsEnv+"="+string(raw))
	var stderr bytes.Buffer
	cmd.Stderr = &syncWriter{w: &stderr}
	w, r, in := startPiped(t, cmd)
	return cmd, w, r, in, &stderr
}

// buildAgent builds this command statically to bin, with flags added to
// go build's.
func buildAgent(t *testing.T, bin string, flags ...string) {
	t.Helper()
	build := exec.Command("go", append(append([]string{"build"}, flags...), "-o", bin, ".")...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the agent: %v\n%s", err, b)
	}
}

// startPiped starts cmd, an agent serving its stdin and stdout, and
// returns its request writer, response reader and stdin. The process is
// killed when the test ends, unless the test waited for it.
func startPiped(t *testing.T, cmd *exec.Cmd) (*agentproto.Writer, *agentproto.Reader, io.WriteCloser) {
	t.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return agentproto.NewWriter(in), agentproto.NewReader(out, 0), in
}

// syncWriter serializes writes (the child's stderr is copied by a
// goroutine of exec.Cmd).
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// zombies counts the zombie children of pid.
func zombies(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 2 && f[0] == "Z" && f[1] == strconv.Itoa(pid) {
			n++
		}
	}
	return n
}

// TestPID1ReapsWithoutStealing runs `serve --pid1` (a child subreaper,
// as PID 1 would be) and many concurrent executes with every exit code
// from 0 up, a few killed by a signal, while orphaned background children
// exit all the time: every execute's status must be exact (the reaper
// must not take a command's status for an orphan's, nor the other way
// round), no zombie may stay, and a signal a Go program dies of by
// default (SIGHUP) must leave PID 1 serving. Closing stdin stops serving
// but not the process, which exits 0 on SIGTERM.
func TestPID1ReapsWithoutStealing(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Fatalf("the executes need /bin/sh: %v", err)
	}
	ws := t.TempDir()
	cmd, enc, frames, stdin, stderr := startPID1(t, "--root", "/", "--workspace", ws, "--log-level", "warn")
	pid := cmd.Process.Pid
	var wmu sync.Mutex
	send := func(id uint64, op agentproto.Op, args any) {
		raw, _ := json.Marshal(args)
		wmu.Lock()
		defer wmu.Unlock()
		if err := enc.Write(agentproto.Request{ID: id, Op: op, Args: raw}); err != nil {
			t.Error(err)
		}
	}
	// One reader hands each final response to its request.
	finals := map[uint64]chan agentproto.Response{}
	var fmu sync.Mutex
	waitFor := func(id uint64) chan agentproto.Response {
		fmu.Lock()
		defer fmu.Unlock()
		if finals[id] == nil {
			finals[id] = make(chan agentproto.Response, 1)
		}
		return finals[id]
	}
	go func() {
		for {
			f, err := frames.Next()
			if err != nil {
				return
			}
			resp, err := agentproto.DecodeResponse(f)
			if err != nil {
				return
			}
			if resp.Bin > 0 {
				if _, err := frames.ReadPayload(resp.Bin); err != nil {
					return
				}
			}
			if resp.Done {
				waitFor(resp.ID) <- resp
			}
		}
	}()
	call := func(id uint64, op agentproto.Op, args any) agentproto.Response {
		send(id, op, args)
		select {
		case r := <-waitFor(id):
			return r
		case <-time.After(2 * time.Minute):
			t.Fatalf("no answer to request %d; stderr %s", id, stderr.String())
			return agentproto.Response{}
		}
	}
	if r := call(1, agentproto.OpHello, struct{}{}); r.Error != nil {
		t.Fatalf("hello: %+v", r)
	}
	// SIGHUP would end a Go program that did not ignore it.
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}

	// A churn of orphans: double-forked children re-parented to the
	// reaper, exiting while the executes below run.
	churn := uint64(2)
	send(churn, agentproto.OpExecute, backend.ExecuteRequest{Command: "i=0; while [ $i -lt 300 ]; do (sh -c 'exit 9' &) ; (sleep 0.01 >/dev/null 2>&1 &); i=$((i+1)); done"})

	const n = 60
	want := make([]int, n)
	results := make(chan struct {
		i    int
		resp agentproto.Response
	}, n)
	for i := range n {
		// Each command leaves an orphan that outlives it and several
		// background children that exit at about the same time as it.
		body := fmt.Sprintf("(sleep 0.05; exit 5) >/dev/null 2>&1 & (exit 3) & (exit 4) & exit %d", i)
		want[i] = i
		if i%10 == 7 {
			body = "(exit 3) & kill -KILL $$"
			want[i] = 128 + int(syscall.SIGKILL)
		}
		id := uint64(100 + i)
		go func() {
			results <- struct {
				i    int
				resp agentproto.Response
			}{i, call(id, agentproto.OpExecute, backend.ExecuteRequest{Command: body})}
		}()
	}
	for range n {
		r := <-results
		var res backend.ExecuteResult
		if r.resp.Error != nil || json.Unmarshal(r.resp.Result, &res) != nil {
			t.Fatalf("execute %d: %+v", r.i, r.resp)
		}
		if res.ExitCode == nil || *res.ExitCode != want[r.i] {
			got := "unknown"
			if res.ExitCode != nil {
				got = strconv.Itoa(*res.ExitCode)
			}
			t.Errorf("execute %d exited %s, want %d", r.i, got, want[r.i])
		}
	}
	if r := <-waitFor(churn); r.Error != nil {
		t.Fatalf("orphan churn: %+v", r)
	}
	var res backend.ExecuteResult
	if r := call(3, agentproto.OpExecute, backend.ExecuteRequest{Command: "exit 42"}); r.Error != nil || json.Unmarshal(r.Result, &res) != nil || res.ExitCode == nil || *res.ExitCode != 42 {
		t.Fatalf("execute after the churn: %+v", r)
	}
	// Every orphan has exited or is about to: none may stay a zombie.
	deadline := time.Now().Add(2 * time.Minute)
	for z := zombies(t, pid); z > 0; z = zombies(t, pid) {
		if time.Now().After(deadline) {
			t.Fatalf("%d zombie children of PID 1 stay unreaped", z)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Stdin ends: serving stops, the process stays (as PID 1 must).
	stdin.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("PID 1 exited (%v) when its stdin ended; stderr %s", err, stderr.String())
	case <-time.After(200 * time.Millisecond):
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("PID 1 exited with %v after SIGTERM, want status 0; stderr %s", err, stderr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("PID 1 did not exit on SIGTERM")
	}
}

func TestLevelFlag(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want agentlog.Level
		ok   bool
	}{
		{"debug", agentlog.LevelDebug, true},
		{"info", agentlog.LevelInfo, true},
		{"WARN", agentlog.LevelWarn, true},
		{"Error", agentlog.LevelError, true},
		{"warning", 0, false},
		{"info+2", 0, false},
		{"", 0, false},
	} {
		t.Run(tt.in, func(t *testing.T) {
			var l levelFlag
			err := l.Set(tt.in)
			if (err == nil) != tt.ok || tt.ok && agentlog.Level(l) != tt.want {
				t.Fatalf("Set(%q) = %v, level %v; want ok %v, level %v", tt.in, err, agentlog.Level(l), tt.ok, tt.want)
			}
			if tt.ok && l.String() != strings.ToLower(tt.in) {
				t.Fatalf("String() = %q after Set(%q)", l.String(), tt.in)
			}
			if want := "unknown level " + strconv.Quote(tt.in) + " (debug, info, warn, error)"; !tt.ok && err.Error() != want {
				t.Fatalf("Set(%q) = %v, want %s", tt.in, err, want)
			}
		})
	}
}
