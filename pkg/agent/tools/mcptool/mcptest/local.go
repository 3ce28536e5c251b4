package mcptest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"github.com/plumbhq/plumb/pkg/backend"
)

// Local starts processes on this machine with /bin/sh -c, each in its own
// process group. It implements backend.ProcessStarter for tests; Env adds
// to (and overrides) this process's environment, Cwd is ignored.
type Local struct {
	mu   sync.Mutex
	live map[*process]bool
	all  []int
}

var _ backend.ProcessStarter = (*Local)(nil)

// Running returns how many started processes have not exited yet.
func (l *Local) Running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.live)
}

// Started returns the process ids of every started process.
func (l *Local) Started() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.all...)
}

// StartProcess implements backend.ProcessStarter.
func (l *Local) StartProcess(ctx context.Context, req backend.ProcessRequest) (backend.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cmd := exec.Command("/bin/sh", "-c", req.Command)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = os.Environ()
	for k, v := range req.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	err = cmd.Start()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("start %q: %w", req.Command, err)
	}
	p := &process{cmd: cmd, stdin: inW, stdout: outR, stderr: errR, exited: make(chan struct{}), owner: l}
	l.mu.Lock()
	if l.live == nil {
		l.live = map[*process]bool{}
	}
	l.live[p] = true
	l.all = append(l.all, cmd.Process.Pid)
	l.mu.Unlock()
	go p.wait()
	return p, nil
}

type process struct {
	cmd            *exec.Cmd
	stdin          *os.File
	stdout, stderr *os.File
	exited         chan struct{}
	exit           backend.ProcessExit
	owner          *Local
	closeOnce      sync.Once
}

func (p *process) wait() {
	err := p.cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.exit = backend.ProcessExit{ExitCode: 128 + int(ws.Signal()), Signal: signalName(ws.Signal())}
		} else {
			p.exit = backend.ProcessExit{ExitCode: ee.ExitCode()}
		}
	default:
		p.exit = backend.ProcessExit{ExitCode: -1}
	}
	p.owner.mu.Lock()
	delete(p.owner.live, p)
	p.owner.mu.Unlock()
	close(p.exited)
}

func signalName(s syscall.Signal) string {
	for name, sig := range signals {
		if sig == s {
			return name
		}
	}
	return fmt.Sprint(int(s))
}

var signals = map[string]syscall.Signal{
	"INT": syscall.SIGINT, "TERM": syscall.SIGTERM, "KILL": syscall.SIGKILL, "HUP": syscall.SIGHUP,
	"QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
}

func (p *process) Stdin() io.WriteCloser { return p.stdin }
func (p *process) Stdout() io.Reader     { return p.stdout }
func (p *process) Stderr() io.Reader     { return p.stderr }

func (p *process) Signal(_ context.Context, signal string) error {
	sig, ok := signals[signal]
	if !ok {
		return fmt.Errorf("unknown signal %q", signal)
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

func (p *process) Wait(ctx context.Context) (backend.ProcessExit, error) {
	select {
	case <-p.exited:
		return p.exit, nil
	case <-ctx.Done():
		return backend.ProcessExit{}, ctx.Err()
	}
}

// Close kills the process group, waits for the exit and closes the
// parent's pipe ends; readers see EOF or a closed file.
func (p *process) Close() error {
	p.closeOnce.Do(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
		p.stdin.Close()
		p.stdout.Close()
		p.stderr.Close()
	})
	return nil
}
