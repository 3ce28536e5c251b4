package main

import (
	"errors"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
)

// runInit is the container's PID 1: it reaps every child that exits
// (background processes of executes are re-parented to it when their shell
// exits) and returns 0 on SIGTERM or SIGINT. It starts nothing and must not
// be combined with code that waits for its own children, since it reaps
// them all.
func runInit() int {
	runtime.GOMAXPROCS(1)
	keepThreads(spareThreads)
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
