//go:build linux && (amd64 || arm64)

package fileops

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawCalls makes the fast path's system calls raw (UseRawCalls).
var rawCalls atomic.Bool

// UseRawCalls makes the fast path's system calls (direct_linux.go) raw for
// every Engine of this process: made without telling the Go scheduler, so
// that none hands its processor over or wakes the runtime's monitor
// thread. Under gVisor each such hand-over is a round of futex and
// nanosleep calls on other threads, every one a trip through the sentry,
// and a file operation of 5-25 calls paid 0.1-0.4 ms for them
// (docs/benchmarks.md, B1-runsc). The price: while a raw call runs, its
// goroutine keeps its processor, and a stop of the world (a garbage
// collection's start or end) waits for the call. That is right only for a
// process whose files are on a local file system, where each call ends in
// microseconds: the box agent, whose workspace is a volume of its own
// box. A process whose files may sit on a network file system must not
// call it: a call that hangs there would stall every goroutine.
func UseRawCalls() { rawCalls.Store(true) }

// sys holds the fast path's system calls, with unix's signatures: unix's
// own, or raw ones after UseRawCalls. A raw call converts its pointers in
// the call's own argument list, which keeps them valid for the call.
var sys sysCalls

type sysCalls struct{}

// result is a raw call's result as unix returns it.
func result(r, _ uintptr, errno unix.Errno) (int, error) {
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

// errOf is result's error alone.
func errOf(r, r2 uintptr, errno unix.Errno) error {
	_, err := result(r, r2, errno)
	return err
}

func (sysCalls) Openat(dirfd int, name string, flags int, mode uint32) (int, error) {
	if !rawCalls.Load() {
		return unix.Openat(dirfd, name, flags, mode)
	}
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	return result(unix.RawSyscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags), uintptr(mode), 0, 0))
}

func (sysCalls) Openat2(dirfd int, name string, how *unix.OpenHow) (int, error) {
	if !rawCalls.Load() {
		return unix.Openat2(dirfd, name, how)
	}
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	return result(unix.RawSyscall6(unix.SYS_OPENAT2, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(how)), unsafe.Sizeof(*how), 0, 0))
}

func (sysCalls) Close(fd int) error {
	if !rawCalls.Load() {
		return unix.Close(fd)
	}
	return errOf(unix.RawSyscall6(unix.SYS_CLOSE, uintptr(fd), 0, 0, 0, 0, 0))
}

func (sysCalls) Fstatat(dirfd int, name string, st *unix.Stat_t, flags int) error {
	if !rawCalls.Load() {
		return unix.Fstatat(dirfd, name, st, flags)
	}
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	return errOf(unix.RawSyscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0))
}

func (sysCalls) Fstat(fd int, st *unix.Stat_t) error {
	if !rawCalls.Load() {
		return unix.Fstat(fd, st)
	}
	return errOf(unix.RawSyscall6(unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(st)), 0, 0, 0, 0))
}

func (sysCalls) Read(fd int, b []byte) (int, error) {
	if !rawCalls.Load() {
		return unix.Read(fd, b)
	}
	return result(unix.RawSyscall6(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0, 0, 0))
}

func (sysCalls) Write(fd int, b []byte) (int, error) {
	if !rawCalls.Load() {
		return unix.Write(fd, b)
	}
	return result(unix.RawSyscall6(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0, 0, 0))
}

func (sysCalls) Fchmod(fd int, mode uint32) error {
	if !rawCalls.Load() {
		return unix.Fchmod(fd, mode)
	}
	return errOf(unix.RawSyscall6(unix.SYS_FCHMOD, uintptr(fd), uintptr(mode), 0, 0, 0, 0))
}

func (sysCalls) Renameat(olddirfd int, oldname string, newdirfd int, newname string) error {
	if !rawCalls.Load() {
		return unix.Renameat(olddirfd, oldname, newdirfd, newname)
	}
	p, err := unix.BytePtrFromString(oldname)
	if err != nil {
		return err
	}
	q, err := unix.BytePtrFromString(newname)
	if err != nil {
		return err
	}
	return errOf(unix.RawSyscall6(unix.SYS_RENAMEAT, uintptr(olddirfd), uintptr(unsafe.Pointer(p)), uintptr(newdirfd), uintptr(unsafe.Pointer(q)), 0, 0))
}

func (sysCalls) Unlinkat(dirfd int, name string, flags int) error {
	if !rawCalls.Load() {
		return unix.Unlinkat(dirfd, name, flags)
	}
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	return errOf(unix.RawSyscall6(unix.SYS_UNLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags), 0, 0, 0))
}

func (sysCalls) Getdents(fd int, b []byte) (int, error) {
	if !rawCalls.Load() {
		return unix.Getdents(fd, b)
	}
	return result(unix.RawSyscall6(unix.SYS_GETDENTS64, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0, 0, 0))
}

// Faccessat2 is faccessat2 itself, never emulated (see writeAccess).
func (sysCalls) Faccessat2(dirfd int, name string, mode uint32, flags int) error {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	if rawCalls.Load() {
		return errOf(unix.RawSyscall6(unix.SYS_FACCESSAT2, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(mode), uintptr(flags), 0, 0))
	}
	return errOf(unix.Syscall6(unix.SYS_FACCESSAT2, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(mode), uintptr(flags), 0, 0))
}
