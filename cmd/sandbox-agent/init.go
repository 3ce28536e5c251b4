package main

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
)

// runInit is the container's PID 1: it reaps every child that exits
// (background processes of executes are re-parented to it when their shell
// exits) and returns 0 on SIGTERM or SIGINT. It starts nothing and must not
// be combined with code that waits for its own children, since it reaps
// them all.
func runInit() int {
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
