//go:build linux && !(amd64 || arm64)

package fileops

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// UseRawCalls does nothing on this architecture: the fast path's calls stay
// regular ones (see sys_linux.go).
func UseRawCalls() {}

// sys holds the fast path's system calls: unix's own here.
var sys sysCalls

type sysCalls struct{}

func (sysCalls) Openat(dirfd int, name string, flags int, mode uint32) (int, error) {
	return unix.Openat(dirfd, name, flags, mode)
}
func (sysCalls) Openat2(dirfd int, name string, how *unix.OpenHow) (int, error) {
	return unix.Openat2(dirfd, name, how)
}
func (sysCalls) Close(fd int) error                     { return unix.Close(fd) }
func (sysCalls) Fstat(fd int, st *unix.Stat_t) error    { return unix.Fstat(fd, st) }
func (sysCalls) Read(fd int, b []byte) (int, error)     { return unix.Read(fd, b) }
func (sysCalls) Write(fd int, b []byte) (int, error)    { return unix.Write(fd, b) }
func (sysCalls) Fchmod(fd int, mode uint32) error       { return unix.Fchmod(fd, mode) }
func (sysCalls) Getdents(fd int, b []byte) (int, error) { return unix.Getdents(fd, b) }
func (sysCalls) Unlinkat(dirfd int, name string, flags int) error {
	return unix.Unlinkat(dirfd, name, flags)
}
func (sysCalls) Fstatat(dirfd int, name string, st *unix.Stat_t, flags int) error {
	return unix.Fstatat(dirfd, name, st, flags)
}
func (sysCalls) Renameat(olddirfd int, oldname string, newdirfd int, newname string) error {
	return unix.Renameat(olddirfd, oldname, newdirfd, newname)
}

// Faccessat2 is faccessat2 itself, never emulated (see writeAccess).
func (sysCalls) Faccessat2(dirfd int, name string, mode uint32, flags int) error {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	_, _, errno := unix.Syscall6(unix.SYS_FACCESSAT2, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(mode), uintptr(flags), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
