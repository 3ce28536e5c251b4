// Package daemontest builds a daemon binary and runs it as a real process
// for tests of startup, flags, exit codes and signals.
package daemontest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

// Build compiles the main package pkg (an import path) into dir, with the
// race detector unless PLUMB_DAEMON_RACE=off (for measuring what a
// release build does, as docs/console.md's large-thread figures), and
// returns the binary's path.
func Build(dir, pkg string) (string, error) {
	bin := filepath.Join(dir, filepath.Base(pkg))
	args := []string{"build", "-race", "-o", bin, pkg}
	if os.Getenv("PLUMB_DAEMON_RACE") == "off" {
		args = append(args[:1], args[2:]...)
	}
	cmd := exec.Command("go", args...)
	cmd.Stderr = os.Stderr
	return bin, cmd.Run()
}

// BuildStatic compiles pkg into dir as a static binary (CGO_ENABLED=0, no
// race detector), as programs that run inside sandbox containers must be.
func BuildStatic(dir, pkg string) (string, error) {
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = os.Stderr
	return bin, cmd.Run()
}

// Result is the outcome of a process that ran to completion.
type Result struct {
	ExitCode int
	Stdout   string
	Stderr   string
}

// Run runs bin with args and env additions to completion (at most 30 s).
func Run(t testing.TB, bin string, env []string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run %s: %v", bin, err)
		}
		code = ee.ExitCode()
	}
	return Result{ExitCode: code, Stdout: out.String(), Stderr: errb.String()}
}

// Proc is a daemon started in the background.
type Proc struct {
	cmd      *exec.Cmd
	GRPCAddr string
	HTTPAddr string
	mu       sync.Mutex
	stderr   bytes.Buffer
	done     chan struct{}
	exitCode int
}

// Start runs bin with args (which should use JSON logs and port-0
// addresses), waits for its "serving" log line and returns it. The process
// is killed when the test ends if it is still running.
func Start(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	p := &Proc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.SysProcAttr = stopWithParent()
	pipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Bytes()
			p.mu.Lock()
			p.stderr.Write(line)
			p.stderr.WriteByte('\n')
			p.mu.Unlock()
			var entry struct {
				Msg      string `json:"msg"`
				GRPCAddr string `json:"grpc-addr"`
				HTTPAddr string `json:"http-addr"`
			}
			if json.Unmarshal(line, &entry) == nil && entry.Msg == "serving" {
				p.GRPCAddr, p.HTTPAddr = entry.GRPCAddr, entry.HTTPAddr
				close(ready)
			}
		}
		err := p.cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			p.exitCode = ee.ExitCode()
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		// Stop it as an operator would, so it can clean up (sandboxd's
		// --delete-sandboxes-on-exit); kill it only if it hangs.
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(hangGuard):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	select {
	case <-ready:
		return p
	case <-p.done:
		t.Fatalf("%s exited before serving: %s", bin, p.Stderr())
	case <-time.After(hangGuard):
		t.Fatalf("%s did not start serving within %v: %s", bin, hangGuard, p.Stderr())
	}
	return nil
}

// hangGuard bounds waits for a daemon to start or stop. It tells a hung
// daemon from a slow one on a loaded machine, so it is generous.
const hangGuard = 3 * time.Minute

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Wait waits up to d for the process to exit and returns its exit code, or
// -1 if it is still running.
func (p *Proc) Wait(d time.Duration) int {
	select {
	case <-p.done:
		return p.exitCode
	case <-time.After(d):
		return -1
	}
}

// Stderr returns what the process logged so far.
func (p *Proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// OneLine reports whether s is a single non-empty line, as startup errors
// must be (no stack trace, no usage dump).
func OneLine(s string) bool {
	s = strings.TrimSuffix(s, "\n")
	return s != "" && !strings.Contains(s, "\n")
}

// ListServices asks the server at addr for its services through server
// reflection, exactly as `grpcurl -plaintext addr list` does.
func ListServices(ctx context.Context, addr string) ([]string, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = stream.CloseSend() }()
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	sort.Strings(names)
	return names, nil
}
