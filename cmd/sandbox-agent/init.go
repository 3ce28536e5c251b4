package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
)

// runInit is the container's PID 1: it reaps every child that exits
// (background processes of executes are re-parented to it when their shell
// exits) and returns 0 on SIGTERM or SIGINT. It must not be combined with
// code that waits for its own children, since it reaps them all.
//
// With arguments (`init serve FLAGS…`), it first starts `serve FLAGS…` as
// its child on the container's own stdin, stdout and stderr, and lets go of
// them: the worker attached to the container before starting it, so that
// agent is the sandbox's first channel, greeted without a `docker exec`.
// When the worker detaches, the engine closes the container's stdin (the
// container is created with StdinOnce), the agent stops, and init goes on
// reaping; later channels are opened with an exec, as before.
func runInit(args []string, stderr io.Writer) int {
	keepThreads()
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	if len(args) > 0 {
		if err := startServe(args); err != nil {
			fmt.Fprintln(stderr, "sandbox-agent init:", err)
		}
	}
	reapAll() // children that exited before Notify
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			reapAll()
			return 0
		}
		reapAll() // SIGCHLDs coalesce: reap until none is left
	}
	return 0
}

// startServe starts this binary with args (which must be a serve command
// line) on init's stdio, then closes init's own stdin and stdout, so the
// agent's end is the only one: when the agent exits, the worker reads EOF
// instead of waiting on a pipe init keeps open. The child is reaped by
// reapAll like any other.
func startServe(args []string) error {
	if args[0] != "serve" {
		return fmt.Errorf("init runs only serve, not %q", args[0])
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if _, err := os.StartProcess(exe, append([]string{exe}, args...), &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	}); err != nil {
		return fmt.Errorf("start agent: %w", err)
	}
	_ = os.Stdin.Close()
	_ = os.Stdout.Close()
	return nil
}

// spareThreads is how many idle OS threads init keeps (see keepThreads).
const spareThreads = 4

// keepThreads makes init need no new OS thread later. Box code shares the
// container's pids limit with init, and a fork bomb can use every pid; a Go
// program that then fails to create a thread dies, and PID 1 dying ends
// the sandbox. Init runs on one P and makes spareThreads threads up front
// (each held by a locked goroutine until all exist, then let go), which
// the scheduler reuses instead of creating new ones.
func keepThreads() {
	runtime.GOMAXPROCS(1)
	var held sync.WaitGroup
	release := make(chan struct{})
	done := make(chan struct{}, spareThreads)
	held.Add(spareThreads)
	for range spareThreads {
		go func() {
			runtime.LockOSThread()
			held.Done()
			<-release
			runtime.UnlockOSThread() // the thread goes idle, not away
			done <- struct{}{}
		}()
	}
	held.Wait()
	close(release)
	for range spareThreads {
		<-done
	}
}

// reapAll collects every exited child without blocking.
func reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}
