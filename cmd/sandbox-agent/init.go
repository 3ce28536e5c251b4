package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"

	"github.com/plumbhq/plumb/pkg/sandbox/boxagent"
)

// runInit is the container's PID 1: it reaps every child that exits
// (background processes of executes are re-parented to it when their shell
// exits) and returns 0 on SIGTERM or SIGINT. It starts nothing and must not
// be combined with code that waits for its own children, since it reaps
// them all.
func runInit() int {
	runtime.GOMAXPROCS(1)
	keepThreads(spareThreads)
	reapAll := boxagent.NewReaper().Reap // no command registered: every child is an orphan
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
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

// runPID1 is `serve --pid1`: the container's PID 1 is the agent itself. It
// serves the channel on the container's stdio (the worker attached before
// the start) and reaps every child through one boxagent.Reaper, which
// hands the statuses of the commands the agent started to them and drops
// the orphans'. When stdin ends (the worker detached: the engine closes a
// StdinOnce stdin), serving stops as an exec'd agent's does, killing its
// commands, and PID 1 goes on reaping until SIGTERM or SIGINT, on which it
// ends its commands and returns 0. A flag or start-up error while serving
// is printed and PID 1 still stays (a box without its agent is found by
// the worker's hello; exiting would only hide the reason).
//
// It makes itself a child subreaper as well, so the same code reaps its
// descendants' orphans when it is not PID 1 (tests). Signals box code could
// not send anyway (it cannot signal root) but that would end a Go program
// by default are ignored; see docs/security.md, "PID 1 serves the
// channel".
func runPID1(o serveOpts, stdin io.Reader, stdout, stderr io.Writer) int {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		fmt.Fprintln(stderr, "sandbox-agent: become a child subreaper:", errno)
		return 1
	}
	signal.Ignore(syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE)
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	reaper := boxagent.NewReaper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- o.serve(ctx, stdin, stdout, stderr, reaper) }()
	reaper.Reap() // children that exited before Notify
	stopping := false
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGCHLD {
				reaper.Reap() // SIGCHLDs coalesce: Reap takes all there are
				continue
			}
			if served == nil {
				reaper.Reap()
				return 0
			}
			// Serving ends its commands first; they are reaped meanwhile.
			stopping = true
			cancel()
		case err := <-served:
			served = nil
			if stopping {
				reaper.Reap()
				return 0
			}
			if err != nil {
				fmt.Fprintln(stderr, "sandbox-agent: stopped serving:", err)
			}
		}
	}
}

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// spareThreads is how many idle OS threads init keeps (see keepThreads).
const spareThreads = 4

// keepThreads makes n idle OS threads up front (each held by a locked
// goroutine until all exist, then let go), which the scheduler reuses
// instead of creating new ones. Box code shares the container's pids
// limit with init and the agent, and a fork bomb can use every pid; a Go
// program that then fails to create a thread dies. PID 1 dying ends the
// sandbox, so init runs on one P with spareThreads spares; the agent
// dying loses its channel, and a command it could not fork would never be
// reported as such, so serve keeps serveSpareThreads.
func keepThreads(n int) {
	var held sync.WaitGroup
	release := make(chan struct{})
	done := make(chan struct{}, n)
	held.Add(n)
	for range n {
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
	for range n {
		<-done
	}
}
