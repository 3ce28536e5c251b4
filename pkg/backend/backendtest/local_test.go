package backendtest_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/backendtest"
)

// hangGuard bounds a wait that should end; it is no timing assertion.
const hangGuard = time.Minute

func realDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// talk writes stdin to p, closes it, and returns both outputs and the exit.
func talk(t *testing.T, p backend.Process, stdin string) (stdout, stderr string, exit backend.ProcessExit) {
	t.Helper()
	outc, errc := make(chan string, 1), make(chan string, 1)
	for r, c := range map[io.Reader]chan string{p.Stdout(): outc, p.Stderr(): errc} {
		go func() {
			b, _ := io.ReadAll(r)
			c <- string(b)
		}()
	}
	if _, err := io.WriteString(p.Stdin(), stdin); err != nil {
		t.Errorf("write stdin: %v", err)
	}
	if err := p.Stdin().Close(); err != nil {
		t.Errorf("close stdin: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	exit, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	return <-outc, <-errc, exit
}

// TestLocalProcessesStart: commands run through the shell in Dir or Cwd,
// with Env over this process's environment and Rewrite applied; the exit
// says how they ended; bad requests are refused before anything starts.
func TestLocalProcessesStart(t *testing.T) {
	dir, cwd := realDir(t), realDir(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name     string
		local    *backendtest.LocalProcesses // nil: the zero value
		ctx      context.Context             // nil: Background
		req      backend.ProcessRequest
		stdin    string
		stdout   string
		stderr   string
		exit     backend.ProcessExit
		errCode  backend.Code // refused with this code
		errIs    error
		notFound bool
	}{
		{name: "stdin to stdout", req: backend.ProcessRequest{Command: "cat"}, stdin: "hello\nworld", stdout: "hello\nworld"},
		{name: "stderr and exit status", req: backend.ProcessRequest{Command: "echo oops >&2; exit 3"}, stderr: "oops\n", exit: backend.ProcessExit{ExitCode: 3}},
		{name: "env over the environment", req: backend.ProcessRequest{Command: `echo "$LOCALTEST_A $HOME $PATH"`, Env: map[string]string{"LOCALTEST_A": "a", "HOME": "/nowhere"}},
			stdout: "a /nowhere " + os.Getenv("PATH") + "\n"},
		{name: "dir", local: &backendtest.LocalProcesses{Dir: dir}, req: backend.ProcessRequest{Command: "pwd -P"}, stdout: dir + "\n"},
		{name: "cwd wins over dir", local: &backendtest.LocalProcesses{Dir: dir}, req: backend.ProcessRequest{Command: "pwd -P", Cwd: cwd}, stdout: cwd + "\n"},
		{name: "rewrite", local: &backendtest.LocalProcesses{Rewrite: strings.NewReplacer("say", "echo").Replace}, req: backend.ProcessRequest{Command: "say hi"}, stdout: "hi\n"},
		{name: "missing binary", req: backend.ProcessRequest{Command: "exec localtest-absent-binary"}, exit: backend.ProcessExit{ExitCode: 127}, notFound: true},
		{name: "crash signal named", req: backend.ProcessRequest{Command: "kill -SEGV $$"}, exit: backend.ProcessExit{ExitCode: 139, Signal: "SEGV"}},
		{name: "sent signal named", req: backend.ProcessRequest{Command: "kill -TERM $$"}, exit: backend.ProcessExit{ExitCode: 143, Signal: "TERM"}},
		{name: "blank command", req: backend.ProcessRequest{Command: " \n"}, errCode: backend.CodeInvalidArgument},
		{name: "relative cwd", req: backend.ProcessRequest{Command: "true", Cwd: "sub"}, errCode: backend.CodeInvalidArgument},
		{name: "cancelled start", ctx: cancelled, req: backend.ProcessRequest{Command: "true"}, errIs: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.local
			if l == nil {
				l = &backendtest.LocalProcesses{}
			}
			t.Cleanup(func() { _ = l.Close() })
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			p, err := l.StartProcess(ctx, tc.req)
			switch {
			case tc.errCode != "" || tc.errIs != nil:
				if err == nil {
					_ = p.Close()
					t.Fatal("started, want an error")
				}
				if tc.errCode != "" && backend.CodeOf(err) != tc.errCode {
					t.Errorf("error %v, want code %s", err, tc.errCode)
				}
				if tc.errIs != nil && !errors.Is(err, tc.errIs) {
					t.Errorf("error %v, want %v", err, tc.errIs)
				}
				if n := l.Started(); n != 0 {
					t.Errorf("started %d processes, want 0", n)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			stdout, stderr, exit := talk(t, p, tc.stdin)
			if err := p.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			if stdout != tc.stdout {
				t.Errorf("stdout %q, want %q", stdout, tc.stdout)
			}
			if tc.notFound {
				if !strings.Contains(stderr, "localtest-absent-binary") {
					t.Errorf("stderr %q does not name the missing binary", stderr)
				}
			} else if stderr != tc.stderr {
				t.Errorf("stderr %q, want %q", stderr, tc.stderr)
			}
			if exit != tc.exit {
				t.Errorf("exit %+v, want %+v", exit, tc.exit)
			}
			if l.Started() != 1 || l.Running() != 0 {
				t.Errorf("started %d, running %d after the exit, want 1, 0", l.Started(), l.Running())
			}
		})
	}
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z"
}

// TestLocalProcessesSignalAndClose: Signal reaches the process group and
// accepts only backend.Signals; Close kills the whole group, background
// children included, and may be called again.
func TestLocalProcessesSignalAndClose(t *testing.T) {
	signal := func(name string) func(context.Context, backend.Process) error {
		return func(ctx context.Context, p backend.Process) error { return p.Signal(ctx, name) }
	}
	for _, tc := range []struct {
		name string
		end  func(context.Context, backend.Process) error
		exit backend.ProcessExit
	}{
		{name: "signal TERM", end: signal("TERM"), exit: backend.ProcessExit{ExitCode: 143, Signal: "TERM"}},
		{name: "signal HUP", end: signal("HUP"), exit: backend.ProcessExit{ExitCode: 129, Signal: "HUP"}},
		{name: "close", end: func(_ context.Context, p backend.Process) error { return p.Close() }, exit: backend.ProcessExit{ExitCode: 137, Signal: "KILL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			l := &backendtest.LocalProcesses{}
			t.Cleanup(func() { _ = l.Close() })
			// The background child shares the group, so a signal to the
			// group reaches it (not INT or QUIT: a non-interactive shell's
			// background jobs ignore those).
			p, err := l.StartProcess(ctx, backend.ProcessRequest{Command: "sleep 1000 & echo $!; wait"})
			if err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(p.Stdout()).ReadString('\n')
			if err != nil {
				t.Fatalf("read the child's pid: %v", err)
			}
			child, err := strconv.Atoi(strings.TrimSpace(line))
			if err != nil || !alive(child) {
				t.Fatalf("child %q (%v) is not running", line, err)
			}
			if err := p.Signal(ctx, "SEGV"); backend.CodeOf(err) != backend.CodeInvalidArgument {
				t.Errorf("Signal(SEGV) = %v, want invalid_argument", err)
			}
			if err := tc.end(ctx, p); err != nil {
				t.Fatal(err)
			}
			exit, err := p.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if exit != tc.exit {
				t.Errorf("exit %+v, want %+v", exit, tc.exit)
			}
			for alive(child) {
				if ctx.Err() != nil {
					t.Fatalf("child %d survived", child)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := p.Close(); err != nil {
				t.Errorf("second close: %v", err)
			}
			if _, err := p.Stdin().Write([]byte("x")); err == nil {
				t.Error("stdin writable after close")
			}
			if l.Running() != 0 {
				t.Errorf("running %d, want 0", l.Running())
			}
		})
	}
}

// TestLocalProcessesCounters: Started and Pids count every start, Running
// only processes that neither exited nor were closed, and Close ends all.
func TestLocalProcessesCounters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	l := &backendtest.LocalProcesses{}
	var procs []backend.Process
	for range 3 {
		p, err := l.StartProcess(ctx, backend.ProcessRequest{Command: "cat"})
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	if l.Started() != 3 || l.Running() != 3 {
		t.Fatalf("started %d, running %d, want 3, 3", l.Started(), l.Running())
	}
	pids := l.Pids()
	if len(pids) != 3 || pids[0] == pids[1] || pids[1] == pids[2] || pids[0] <= 0 {
		t.Errorf("pids %v, want 3 distinct", pids)
	}
	procs[0].Stdin().Close() // cat ends
	if exit, err := procs[0].Wait(ctx); err != nil || exit != (backend.ProcessExit{}) {
		t.Fatalf("exit %+v, %v; want 0", exit, err)
	}
	if err := procs[1].Close(); err != nil {
		t.Fatal(err)
	}
	if n := l.Running(); n != 1 {
		t.Errorf("running %d after one exit and one close, want 1", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if exit, err := procs[2].Wait(ctx); err != nil || exit.Signal != "KILL" {
		t.Errorf("last process after Close: %+v, %v; want killed", exit, err)
	}
	if _, err := procs[0].Stdout().Read(make([]byte, 1)); !errors.Is(err, os.ErrClosed) {
		t.Errorf("read the exited process's stdout after Close: %v, want closed", err)
	}
	if l.Running() != 0 || l.Started() != 3 || len(l.Pids()) != 3 {
		t.Errorf("after Close: running %d, started %d, pids %v", l.Running(), l.Started(), l.Pids())
	}
}

func intp(n int) *int { return &n }

// TestLocalProcessesExecute: output merged in order and capped head and
// tail, exit statuses, timeouts, Dir, Env and Rewrite as for processes,
// and the requests Execute refuses.
func TestLocalProcessesExecute(t *testing.T) {
	dir := realDir(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	// 100 lines of 37 bytes.
	lines := `i=0; while [ $i -lt 100 ]; do echo 0123456789abcdefghijklmnopqrstuvwxyz; i=$((i+1)); done`
	for _, tc := range []struct {
		name      string
		local     *backendtest.LocalProcesses // nil: the zero value
		ctx       context.Context
		req       backend.ExecuteRequest
		output    string   // exact, unless has is set
		has       []string // in order
		exit      int
		timedOut  bool
		truncated bool
		bytes     int64
		check     func(t *testing.T, err error) // the call fails
	}{
		{name: "echo", req: backend.ExecuteRequest{Command: "echo hi"}, output: "hi\n", bytes: 3},
		{name: "merged output and exit", req: backend.ExecuteRequest{Command: "echo out; echo err 1>&2; echo out2; exit 3"}, output: "out\nerr\nout2\n", exit: 3, bytes: 13},
		{name: "killed by a signal", req: backend.ExecuteRequest{Command: "kill -KILL $$"}, exit: 137},
		{name: "timeout kills the group", req: backend.ExecuteRequest{Command: "echo before; sleep 60; echo after", TimeoutSeconds: intp(1)}, output: "before\n", exit: 124, timedOut: true, bytes: 7},
		{name: "output capped head and tail", req: backend.ExecuteRequest{Command: lines, MaxOutputBytes: 200},
			has: []string{"0123456789abcdefghijklmnopqrstuvwxyz\n0123456789", "bytes of output omitted ...]\n", "uvwxyz\n0123456789abcdefghijklmnopqrstuvwxyz\n"}, truncated: true, bytes: 3700},
		{name: "default cap keeps it all", req: backend.ExecuteRequest{Command: lines}, output: strings.Repeat("0123456789abcdefghijklmnopqrstuvwxyz\n", 100), bytes: 3700},
		{name: "invalid UTF-8 replaced", req: backend.ExecuteRequest{Command: `printf 'a\377b'`}, output: "a\uFFFDb", bytes: 3},
		{name: "dir, env and rewrite", local: &backendtest.LocalProcesses{Dir: dir, Rewrite: strings.NewReplacer("say", "echo").Replace},
			req: backend.ExecuteRequest{Command: `say "$LOCALTEST_B" $(pwd -P)`, Env: map[string]string{"LOCALTEST_B": "b"}}, output: "b " + dir + "\n", bytes: int64(len(dir)) + 3},
		{name: "blank command", req: backend.ExecuteRequest{Command: ""}, check: wantCode(backend.CodeInvalidArgument)},
		{name: "negative timeout", req: backend.ExecuteRequest{Command: "true", TimeoutSeconds: intp(-1)}, check: wantCode(backend.CodeInvalidArgument)},
		{name: "relative cwd", req: backend.ExecuteRequest{Command: "true", Cwd: "sub"}, check: wantCode(backend.CodeInvalidArgument)},
		{name: "offload", req: backend.ExecuteRequest{Command: "true", OffloadPath: "/out.txt"}, check: func(t *testing.T, err error) {
			if !backend.IsOffloadError(err, "/out.txt") {
				t.Errorf("error %v, want an offload error", err)
			}
		}},
		{name: "cancelled", ctx: cancelled, req: backend.ExecuteRequest{Command: "true"}, check: wantCode(backend.CodeCancelled)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			l := tc.local
			if l == nil {
				l = &backendtest.LocalProcesses{}
			}
			res, err := l.Execute(ctx, tc.req)
			if tc.check != nil {
				if err == nil {
					t.Fatalf("result %+v, want an error", res)
				}
				tc.check(t, err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.has == nil && res.Output != tc.output {
				t.Errorf("output %q, want %q", res.Output, tc.output)
			}
			rest := res.Output
			for _, h := range tc.has {
				i := strings.Index(rest, h)
				if i < 0 {
					t.Errorf("output %q lacks %q (in order)", res.Output, h)
					break
				}
				rest = rest[i+len(h):]
			}
			if tc.truncated && len(res.Output) > tc.req.MaxOutputBytes+100 {
				t.Errorf("capped output has %d bytes, want about %d", len(res.Output), tc.req.MaxOutputBytes)
			}
			if res.ExitCode == nil || *res.ExitCode != tc.exit || res.TimedOut != tc.timedOut || res.Truncated != tc.truncated || res.OutputBytes != tc.bytes {
				t.Errorf("result %+v, want exit %d timed out %v truncated %v bytes %d", res, tc.exit, tc.timedOut, tc.truncated, tc.bytes)
			}
		})
	}
}

// TestLocalProcessesExecuteCancel: cancelling a running command kills its
// group and fails the call.
func TestLocalProcessesExecuteCancel(t *testing.T) {
	dir := realDir(t)
	l := &backendtest.LocalProcesses{Dir: dir}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := l.Execute(ctx, backend.ExecuteRequest{Command: "touch started; sleep 60"})
		errc <- err
	}()
	deadline := time.Now().Add(hangGuard)
	for {
		if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-errc; backend.CodeOf(err) != backend.CodeCancelled {
		t.Errorf("cancelled execute: %v, want cancelled", err)
	}
}

func wantCode(code backend.Code) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		if backend.CodeOf(err) != code {
			t.Errorf("error %v, want code %s", err, code)
		}
	}
}
