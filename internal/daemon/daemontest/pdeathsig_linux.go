package daemontest

import "syscall"

// stopWithParent makes the kernel send SIGTERM to a started daemon when the
// test binary dies (a test timeout panics without running cleanups), so no
// daemon outlives its test and each can still clean up after itself.
func stopWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
