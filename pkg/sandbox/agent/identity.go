package agent

import (
	"fmt"
	"syscall"
)

// User is the sandbox user that commands run as and whose identity file
// operations use.
type User struct {
	UID, GID uint32
}

// credential is the identity of a command started as u: no supplementary
// group but its tag, if any (see tagBase), and, execve being done by a
// non-root uid, no capabilities.
func (u User) credential(tag uint32) *syscall.Credential {
	groups := []uint32{}
	if tag != 0 {
		groups = append(groups, tag)
	}
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: groups}
}

// setDumpable sets PR_SET_DUMPABLE: a non-dumpable process's /proc files
// belong to root and it cannot be ptrace-attached by its own uid.
func setDumpable(on bool) error {
	v := uintptr(0)
	if on {
		v = 1
	}
	_, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, v, 0)
	if e != 0 {
		return e
	}
	return nil
}

// dropFileIdentity sets fsuid/fsgid to u on every OS thread, so the file
// operations of the agent (root, with only SETUID, SETGID and KILL) are
// checked as, and create files owned by, the sandbox user. setfsuid
// reports no error, so the result is read back.
func dropFileIdentity(u User) error {
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_SETFSGID, uintptr(u.GID), 0, 0); e != 0 {
		return fmt.Errorf("setfsgid %d: %w", u.GID, e)
	}
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_SETFSUID, uintptr(u.UID), 0, 0); e != 0 {
		return fmt.Errorf("setfsuid %d: %w", u.UID, e)
	}
	// An invalid id changes nothing and returns the current one.
	invalid := uintptr(^uint32(0))
	g, _, _ := syscall.RawSyscall(syscall.SYS_SETFSGID, invalid, 0, 0)
	f, _, _ := syscall.RawSyscall(syscall.SYS_SETFSUID, invalid, 0, 0)
	if uint32(f) != u.UID || uint32(g) != u.GID {
		return fmt.Errorf("file identity is %d:%d after setting %d:%d (missing CAP_SETUID/CAP_SETGID?)", f, g, u.UID, u.GID)
	}
	return nil
}

// becomeUser drops the whole process (every thread) to u, with no
// supplementary groups, and marks it non-dumpable again (a uid change
// resets that).
func becomeUser(u User) error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(int(u.GID)); err != nil {
		return fmt.Errorf("setgid %d: %w", u.GID, err)
	}
	if err := syscall.Setuid(int(u.UID)); err != nil {
		return fmt.Errorf("setuid %d: %w", u.UID, err)
	}
	if err := setDumpable(false); err != nil {
		return fmt.Errorf("mark non-dumpable: %w", err)
	}
	return nil
}
