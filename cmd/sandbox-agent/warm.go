package main

import (
	"os"
	"syscall"
)

// warmShellMax caps what warmSpawn maps of the shell: a shell bigger than
// this (a hostile or odd image) is left to be read by its first exec.
const warmShellMax = 16 << 20

// warmSpawn does, once and before any command starts, the one-time work of
// a box's first command that does not depend on the command, so the first
// Execute after a create pays only its own spawn (docs/benchmarks.md, B3):
//   - the os package's probe of the kernel's pidfd support (a pidfd of
//     its own, a waitid and a signal through it, a throwaway clone), which
//     it otherwise makes inside the first process start;
//   - the first read of the shell's binary: mapped with MAP_POPULATE and
//     unmapped, it leaves the file in the page cache (gVisor's own cache
//     under runsc), where every exec of the shell maps it from; a box
//     whose first process were the shell would have read it at its start.
//
// It runs as the sandbox user before any box code has run: the shell is
// opened without following a FIFO's wait (O_NONBLOCK) and mapped only when
// it is a regular file of at most warmShellMax bytes; any failure leaves
// the work to the first command, as before.
func warmSpawn(shell string) {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Release()
	}
	fd, err := syscall.Open(shell, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Size <= 0 || st.Size > warmShellMax {
		return
	}
	if b, err := syscall.Mmap(fd, 0, int(st.Size), syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_POPULATE); err == nil {
		_ = syscall.Munmap(b)
	}
}
