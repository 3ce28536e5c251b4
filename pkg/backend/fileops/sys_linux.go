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

// sys holds the fast path's system calls, with unix's signatures: regular
// calls, or raw ones after UseRawCalls. Each converts its pointers in the
// call's own argument list, which keeps them valid for the call.
var sys sysCalls

type sysCalls struct{}

// result is a call's result as unix returns it.
func result(r uintptr, errno unix.Errno) (int, error) {
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

func (sysCalls) Openat(dirfd int, name string, flags int, mode uint32) (int, error) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	var r uintptr
	var errno unix.Errno
	if rawCalls.Load() {
		r, _, errno = unix.RawSyscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags), uintptr(mode), 0, 0)
	} else {
		r, _, errno = unix.Syscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags), uintptr(mode), 0, 0)
	}
	return result(r, errno)
}

func (sysCalls) Openat2(dirfd int, name string, how *unix.OpenHow) (int, error) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	var r uintptr
	var errno unix.Errno
	if rawCalls.Load() {
		r, _, errno = unix.RawSyscall6(unix.SYS_OPENAT2, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(how)), unsafe.Sizeof(*how), 0, 0)
	} else {
		r, _, errno = unix.Syscall6(unix.SYS_OPENAT2, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(how)), unsafe.Sizeof(*how), 0, 0)
	}
	return result(r, errno)
}

func (sysCalls) Close(fd int) error {
	var r uintptr
	var errno unix.Errno
	if rawCalls.Load() {
		r, _, errno = unix.RawSyscall6(unix.SYS_CLOSE, uintptr(fd), 0, 0, 0, 0, 0)
	} else {
		r, _, errno = unix.Syscall6(unix.SYS_CLOSE, uintptr(fd), 0, 0, 0, 0, 0)
	}
	_, err := result(r, errno)
	return err
}

func (sysCalls) Fstatat(dirfd int, name string, st *unix.Stat_t, flags int) error {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	var r uintptr
	var errno unix.Errno
	if rawCalls.Load() {
		r, _, errno = unix.RawSyscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0)
	} else {
		r, _, errno = unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0)
	}
	_, err = result(r, errno)
	return err
}

func (sysCalls) Fstat(fd int, st *unix.Stat_t) error {
	var r uintptr
	var errno unix.Errno
	if rawCalls.Load() {
		r, _, errno = unix.RawSyscall6(unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(st)), 0, 0, 0, 0)
	} else {
		r, _, errno = unix.Syscall6(unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(st)), 0, 0, 0, 0)
	}
	_, err := result(r, errno)
	return err
}

func (sysCalls) Faccessat2(dirfd int, name string, mode uint32, flags int) error {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	var r uintptr
	var errno unix.Errno
	if rawCalls.Load() {
		r, _, errno = unix.RawSyscall6(unix.SYS_FACCESSAT2, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(mode), uintptr(flags), 0, 0)
	} else {
		r, _, errno = unix.Syscall6(unix.SYS_FACCESSAT2, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(mode), uintptr(flags), 0, 0)
	}
	_, err = result(r, errno)
	return err
}

func (sysCalls) Read(fd int, b []byte) (int, error) {
	var r uintptr
	var errno unix.Errno
	if rawCalls.Load() {
		r, _, errno = unix.RawSyscall6(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0, 0, 0)
	} else {
		r, _, errno = unix.Syscall6(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0, 0, 0)
	}
	return result(r, errno)
}

func (sysCalls) Write(fd int, b []byte) (int, error) {
	var r uintptr
	var errno unix.Errno
	if rawCalls.Load() {
		r, _, errno = unix.RawSyscall6(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0, 0, 0)
	} else {
		r, _, errno = unix.Syscall6(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0, 0, 0)
	}
	return result(r, errno)
}

func (sysCalls) Fchmod(fd int, mode uint32) error {
	var r uintptr
	var errno unix.Errno
	if rawCalls.Load() {
		r, _, errno = unix.RawSyscall6(unix.SYS_FCHMOD, uintptr(fd), uintptr(mode), 0, 0, 0, 0)
	} else {
		r, _, errno = unix.Syscall6(unix.SYS_FCHMOD, uintptr(fd), uintptr(mode), 0, 0, 0, 0)
	}
	_, err := result(r, errno)
	return err
}

func (sysCalls) Renameat(olddirfd int, oldname string, newdirfd int, newname string) error {
	p, err := unix.BytePtrFromString(oldname)
	if err != nil {
		return err
	}
	q, err := unix.BytePtrFromString(newname)
	if err != nil {
		return err
	}
	var r uintptr
	var errno unix.Errno
	if rawCalls.Load() {
		r, _, errno = unix.RawSyscall6(unix.SYS_RENAMEAT, uintptr(olddirfd), uintptr(unsafe.Pointer(p)), uintptr(newdirfd), uintptr(unsafe.Pointer(q)), 0, 0)
	} else {
		r, _, errno = unix.Syscall6(unix.SYS_RENAMEAT, uintptr(olddirfd), uintptr(unsafe.Pointer(p)), uintptr(newdirfd), uintptr(unsafe.Pointer(q)), 0, 0)
	}
	_, err = result(r, errno)
	return err
}

func (sysCalls) Unlinkat(dirfd int, name string, flags int) error {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	var r uintptr
	var errno unix.Errno
	if rawCalls.Load() {
		r, _, errno = unix.RawSyscall6(unix.SYS_UNLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags), 0, 0, 0)
	} else {
		r, _, errno = unix.Syscall6(unix.SYS_UNLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags), 0, 0, 0)
	}
	_, err = result(r, errno)
	return err
}

func (sysCalls) Getdents(fd int, b []byte) (int, error) {
	var r uintptr
	var errno unix.Errno
	if rawCalls.Load() {
		r, _, errno = unix.RawSyscall6(unix.SYS_GETDENTS64, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0, 0, 0)
	} else {
		r, _, errno = unix.Syscall6(unix.SYS_GETDENTS64, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0, 0, 0)
	}
	return result(r, errno)
}
