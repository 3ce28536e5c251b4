package backendtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
)

// LocalProcesses runs commands on this machine, the way a sandbox runs them
// in its container: /bin/sh -c, each command in its own process group. It
// implements backend.ProcessStarter and backend.Executor so that tools
// built on processes (MCP stdio servers, the python tool) can be tested
// without Docker. It confines nothing: tests only.
//
// Every command runs in Dir ("" = the test's working directory), or in the
// request's Cwd when that is set; Cwd is then an absolute host path (not a
// virtual one: there is no workspace to resolve it against) and a relative
// Cwd is invalid_argument. The request's Env is merged over os.Environ().
//
// The zero value is ready to use; Close ends every process still open.
type LocalProcesses struct {
	// Dir is the working directory of commands whose request has no Cwd.
	Dir string
	// Rewrite, when set, rewrites every command line before it runs (a
	// test replaces "python3" with a binary that does not exist).
	Rewrite func(command string) string

	mu   sync.Mutex
	pids []int
	open map[*localProcess]struct{}
}

var (
	_ backend.ProcessStarter = (*LocalProcesses)(nil)
	_ backend.Executor       = (*LocalProcesses)(nil)
)

// Resolver returns a function that answers l as the process starter and
// the executor of every backend: the shape of python.Resolver, without
// importing it.
func (l *LocalProcesses) Resolver() func(backend.Backend) (backend.ProcessStarter, backend.Executor) {
	return func(backend.Backend) (backend.ProcessStarter, backend.Executor) { return l, l }
}

// Started reports how many processes StartProcess started.
func (l *LocalProcesses) Started() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pids)
}

// Pids returns the process ids of the processes StartProcess started, in
// start order (each is also its process group id).
func (l *LocalProcesses) Pids() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.pids...)
}

// Running reports how many started processes have neither exited nor been
// closed.
func (l *LocalProcesses) Running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for p := range l.open {
		select {
		case <-p.exited:
		default:
			n++
		}
	}
	return n
}

// Close closes every started process that is still open (see
// backend.Process.Close): their process groups are killed. It is meant
// for t.Cleanup and always returns nil.
func (l *LocalProcesses) Close() error {
	l.mu.Lock()
	open := make([]*localProcess, 0, len(l.open))
	for p := range l.open {
		open = append(open, p)
	}
	l.mu.Unlock()
	for _, p := range open {
		_ = p.Close()
	}
	return nil
}

// command builds the shell of one request, in its own process group.
func (l *LocalProcesses) command(ctx context.Context, line, cwd string, env map[string]string) (*exec.Cmd, error) {
	if strings.TrimSpace(line) == "" {
		return nil, backend.Errorf(backend.CodeInvalidArgument, "", "command is blank")
	}
	dir := l.Dir
	if cwd != "" {
		if !filepath.IsAbs(cwd) {
			return nil, backend.Errorf(backend.CodeInvalidArgument, "", "cwd %s is not an absolute host path", backend.Quote(cwd))
		}
		dir = cwd
	}
	if l.Rewrite != nil {
		line = l.Rewrite(line)
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", line)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v) // exec keeps the last value of a key
	}
	return cmd, nil
}

// StartProcess implements backend.ProcessStarter. ctx only bounds the
// start; the process lives until it exits or is closed.
func (l *LocalProcesses) StartProcess(ctx context.Context, req backend.ProcessRequest) (backend.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cmd, err := l.command(context.Background(), req.Command, req.Cwd, req.Env)
	if err != nil {
		return nil, err
	}
	// The child's ends go to the child; the parent keeps the others.
	var child, parent [3]*os.File
	for i := range child {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(child[:i]...)
			closeAll(parent[:i]...)
			return nil, fmt.Errorf("start %q: %w", req.Command, err)
		}
		if i == 0 { // stdin: the child reads
			child[i], parent[i] = r, w
		} else {
			child[i], parent[i] = w, r
		}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = child[0], child[1], child[2]
	err = cmd.Start()
	closeAll(child[:]...)
	if err != nil {
		closeAll(parent[:]...)
		return nil, fmt.Errorf("start %q: %w", req.Command, err)
	}
	p := &localProcess{owner: l, cmd: cmd, stdin: parent[0], stdout: parent[1], stderr: parent[2], exited: make(chan struct{})}
	l.mu.Lock()
	if l.open == nil {
		l.open = map[*localProcess]struct{}{}
	}
	l.open[p] = struct{}{}
	l.pids = append(l.pids, cmd.Process.Pid)
	l.mu.Unlock()
	go p.wait()
	return p, nil
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// Execute implements backend.Executor: stdout and stderr merged in order,
// the exit status (128+n for signal n), a timeout that kills the process
// group and reports exit code 124, and Output capped at MaxOutputBytes by
// keeping its head and tail (see capOutput). The whole stream is held in
// memory, and an OffloadPath cannot be honoured: it is an offload error
// (backend.IsOffloadError), so callers retry without it. A cancelled ctx
// kills the group too and returns ctx's error.
func (l *LocalProcesses) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	timeout := backend.ExecuteDefaultTimeout
	if t := req.TimeoutSeconds; t != nil {
		switch d := time.Duration(*t) * time.Second; {
		case *t == 0:
			timeout = backend.ExecuteMaxTimeout
		case *t < 0 || d > backend.ExecuteMaxTimeout:
			return backend.ExecuteResult{}, backend.Errorf(backend.CodeInvalidArgument, "", "timeout_s %d is outside 0..%d", *t, int(backend.ExecuteMaxTimeout.Seconds()))
		default:
			timeout = d
		}
	}
	if req.OffloadPath != "" {
		return backend.ExecuteResult{}, backend.Errorf(backend.CodeUnsupported, req.OffloadPath, "local processes cannot offload output to %s", req.OffloadPath)
	}
	limit := req.MaxOutputBytes
	if limit <= 0 {
		limit = backend.ExecuteInlineOutput
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd, err := l.command(tctx, req.Command, req.Cwd, req.Env)
	if err != nil {
		return backend.ExecuteResult{}, err
	}
	var killed atomic.Bool
	cmd.Cancel = func() error {
		killed.Store(true)
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	// A background child that keeps the output open does not hold the
	// result back for longer than this.
	cmd.WaitDelay = backend.DrainGrace
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out // one writer: exec serializes the writes
	start := time.Now()
	err = cmd.Run()
	if cmd.ProcessState == nil { // it never started
		return backend.ExecuteResult{}, fmt.Errorf("execute %q: %w", req.Command, err)
	}
	if killed.Load() && ctx.Err() != nil {
		return backend.ExecuteResult{}, fmt.Errorf("execute %q: %w", req.Command, ctx.Err())
	}
	res := backend.ExecuteResult{OutputBytes: int64(out.Len()), DurationMS: time.Since(start).Milliseconds()}
	res.Output, res.Truncated = capOutput(out.Bytes(), limit)
	code := exitOf(cmd.ProcessState).ExitCode
	if killed.Load() {
		code, res.TimedOut = 124, true
	}
	res.ExitCode = &code
	return res, nil
}

// capOutput returns b as UTF-8 (invalid bytes become U+FFFD) when that
// fits in limit bytes; otherwise its first and last limit/2 bytes or so,
// cut at character boundaries, around a line counting the omitted bytes,
// and true.
func capOutput(b []byte, limit int) (string, bool) {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if len(s) <= limit {
		return s, false
	}
	head := limit / 2
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	tail := len(s) - (limit - limit/2)
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	var sb strings.Builder
	sb.WriteString(s[:head])
	if head > 0 && s[head-1] != '\n' {
		sb.WriteByte('\n')
	}
	fmt.Fprintf(&sb, "[... %d bytes of output omitted ...]\n", tail-head)
	sb.WriteString(s[tail:])
	return sb.String(), true
}

// localProcess is a process started by LocalProcesses.
type localProcess struct {
	owner          *LocalProcesses
	cmd            *exec.Cmd
	stdin          *os.File
	stdout, stderr *os.File
	exited         chan struct{}
	exit           backend.ProcessExit // set before exited closes
	closeOnce      sync.Once
}

func (p *localProcess) wait() {
	_ = p.cmd.Wait() // the status is in ProcessState
	p.exit = exitOf(p.cmd.ProcessState)
	close(p.exited)
}

// Stdin implements backend.Process.
func (p *localProcess) Stdin() io.WriteCloser { return p.stdin }

// Stdout implements backend.Process.
func (p *localProcess) Stdout() io.Reader { return p.stdout }

// Stderr implements backend.Process.
func (p *localProcess) Stderr() io.Reader { return p.stderr }

// Signal implements backend.Process: the whole process group gets it.
func (p *localProcess) Signal(_ context.Context, name string) error {
	if err := backend.CheckSignal(name); err != nil {
		return err
	}
	return syscall.Kill(-p.cmd.Process.Pid, syscall.Signal(backend.Signals[name]))
}

// Wait implements backend.Process.
func (p *localProcess) Wait(ctx context.Context) (backend.ProcessExit, error) {
	select {
	case <-p.exited:
		return p.exit, nil
	case <-ctx.Done():
		return backend.ProcessExit{}, ctx.Err()
	}
}

// Close implements backend.Process: it kills the process group (the shell
// and whatever it started and left in the group), reaps the shell and
// closes the parent's pipe ends, so readers see EOF or a closed file.
func (p *localProcess) Close() error {
	p.closeOnce.Do(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) // ESRCH: the group is gone
		<-p.exited
		closeAll(p.stdin, p.stdout, p.stderr)
		p.owner.mu.Lock()
		delete(p.owner.open, p)
		p.owner.mu.Unlock()
	})
	return nil
}

// exitOf is the backend.ProcessExit of a reaped process; exit code -1 when
// the status is unknown.
func exitOf(ps *os.ProcessState) backend.ProcessExit {
	if ps == nil {
		return backend.ProcessExit{ExitCode: -1}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return backend.ProcessExit{ExitCode: 128 + int(ws.Signal()), Signal: backend.SignalName(int(ws.Signal()))}
	}
	return backend.ProcessExit{ExitCode: ps.ExitCode()}
}
