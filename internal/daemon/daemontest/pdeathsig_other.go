//go:build !linux

package daemontest

import "syscall"

// stopWithParent is a no-op where the kernel has no parent-death signal.
func stopWithParent() *syscall.SysProcAttr { return nil }
