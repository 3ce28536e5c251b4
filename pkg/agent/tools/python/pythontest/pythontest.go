// Package pythontest runs the python tool's interpreters on the host, for
// tests: Local implements backend.ProcessStarter and backend.Executor over
// os/exec with /bin/sh -c, the way a sandbox runs them in its container.
// It is a test seam; it confines nothing and must not serve real runs.
package pythontest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
)

// Local starts processes on the host in Dir ("" = the current directory).
type Local struct {
	// Dir is the working directory of every command.
	Dir string
	// Python, when set, replaces "python3" at the start of commands and
	// probes (a test makes it a missing binary).
	Python string

	mu      sync.Mutex
	started int
	procs   map[*Process]bool
}

var (
	_ backend.ProcessStarter = (*Local)(nil)
	_ backend.Executor       = (*Local)(nil)
)

// Resolver returns a python.Resolver (a func, so that this package need not
// import python) that answers l for every backend.
func (l *Local) Resolver() func(backend.Backend) (backend.ProcessStarter, backend.Executor) {
	return func(backend.Backend) (backend.ProcessStarter, backend.Executor) { return l, l }
}

// Started reports how many processes StartProcess started.
func (l *Local) Started() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started
}

// Running reports how many started processes have not been closed or
// exited.
func (l *Local) Running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for p := range l.procs {
		select {
		case <-p.done:
		default:
			n++
		}
	}
	return n
}

func (l *Local) command(ctx context.Context, line string) *exec.Cmd {
	if l.Python != "" {
		line = strings.ReplaceAll(line, "python3", l.Python)
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", line)
	cmd.Dir = l.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// StartProcess implements backend.ProcessStarter.
func (l *Local) StartProcess(_ context.Context, req backend.ProcessRequest) (backend.Process, error) {
	if strings.TrimSpace(req.Command) == "" {
		return nil, backend.Errorf(backend.CodeInvalidArgument, "", "command is blank")
	}
	cmd := l.command(context.Background(), req.Command)
	if len(req.Env) > 0 {
		cmd.Env = cmd.Environ()
		for k, v := range req.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, err
	}
	p := &Process{cmd: cmd, stdin: stdin, stdout: outR, stderr: errR, done: make(chan struct{})}
	go p.wait()
	l.mu.Lock()
	l.started++
	if l.procs == nil {
		l.procs = map[*Process]bool{}
	}
	l.procs[p] = true
	l.mu.Unlock()
	return p, nil
}

// Execute implements backend.Executor (merged output, exit code, timeout).
func (l *Local) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	timeout := 120 * time.Second
	if req.TimeoutSeconds != nil && *req.TimeoutSeconds > 0 {
		timeout = time.Duration(*req.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := l.command(ctx, req.Command)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	res := backend.ExecuteResult{Output: out.String(), OutputBytes: int64(out.Len()), DurationMS: time.Since(start).Milliseconds()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		code := 124
		res.ExitCode, res.TimedOut = &code, true
	case err == nil:
		code := 0
		res.ExitCode = &code
	case errors.As(err, &ee):
		code := exitOf(ee.ProcessState).ExitCode
		res.ExitCode = &code
	default:
		return backend.ExecuteResult{}, err
	}
	return res, nil
}

// Process is a process started by Local.
type Process struct {
	cmd            *exec.Cmd
	stdin          io.WriteCloser
	stdout, stderr *os.File
	done           chan struct{}
	exit           backend.ProcessExit
	closeOnce      sync.Once
}

func (p *Process) wait() {
	_ = p.cmd.Wait()
	p.exit = exitOf(p.cmd.ProcessState)
	close(p.done)
}

// Stdin implements backend.Process.
func (p *Process) Stdin() io.WriteCloser { return p.stdin }

// Stdout implements backend.Process.
func (p *Process) Stdout() io.Reader { return p.stdout }

// Stderr implements backend.Process.
func (p *Process) Stderr() io.Reader { return p.stderr }

var signals = map[string]syscall.Signal{
	"INT": syscall.SIGINT, "TERM": syscall.SIGTERM, "KILL": syscall.SIGKILL, "HUP": syscall.SIGHUP,
	"QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
	"SEGV": syscall.SIGSEGV, "ABRT": syscall.SIGABRT, "PIPE": syscall.SIGPIPE, "BUS": syscall.SIGBUS,
}

// Signal implements backend.Process: the whole process group gets it.
func (p *Process) Signal(_ context.Context, name string) error {
	sig, ok := signals[name]
	if !ok {
		return backend.Errorf(backend.CodeInvalidArgument, "", "unknown signal %q", name)
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// Wait implements backend.Process.
func (p *Process) Wait(ctx context.Context) (backend.ProcessExit, error) {
	select {
	case <-p.done:
		return p.exit, nil
	case <-ctx.Done():
		return backend.ProcessExit{}, ctx.Err()
	}
}

// Close implements backend.Process: it kills the process group, reaps the
// process and closes the output pipes.
func (p *Process) Close() error {
	p.closeOnce.Do(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		p.stdout.Close()
		p.stderr.Close()
	})
	return nil
}

func exitOf(ps *os.ProcessState) backend.ProcessExit {
	if ps == nil {
		return backend.ProcessExit{ExitCode: -1}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		name := "SIG" + ws.Signal().String()
		for n, s := range signals {
			if s == ws.Signal() {
				name = n
			}
		}
		return backend.ProcessExit{ExitCode: 128 + int(ws.Signal()), Signal: name}
	}
	return backend.ProcessExit{ExitCode: ps.ExitCode()}
}
