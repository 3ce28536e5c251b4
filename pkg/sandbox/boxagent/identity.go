package boxagent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
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

// serviceCredential is the identity of a service process (an MCP server
// that may hold secrets) started as u with tag: the tag is its uid as well
// as its group, so no command and no other service shares its uid (the
// kernel then refuses them its environ, memory, ptrace and signals), and
// its gid is u's, through which it shares the workspace with commands
// (the agent's umask 002 makes what either creates group-writable).
func (u User) serviceCredential(tag uint32) *syscall.Credential {
	return &syscall.Credential{Uid: tag, Gid: u.GID, Groups: []uint32{tag}}
}

// shareWorkspace makes the workspace directory group-writable (it must be
// u's own: the agent acts on it with u's file identity), so that service
// processes, which share only u's group, can create files in it. It is
// called once the agent acts as u; an error changes nothing.
func shareWorkspace(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if mode := st.Mode().Perm(); mode&0o070 != 0o070 {
		return os.Chmod(dir, mode|0o070)
	}
	return nil
}

// environReadable reports whether the agent, acting as the sandbox user,
// can read PID 1's environment (init: root, another uid). Under Linux the
// ptrace access check refuses it, and so does current gVisor; gVisor
// 20221219's procfs (Debian's runsc) serves any process's environ to
// everyone, and there a service's secrets would be readable by commands.
func environReadable() bool {
	f, err := os.Open("/proc/1/environ")
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = f.Read(make([]byte, 1))
	return err == nil || errors.Is(err, io.EOF)
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
// reports no error, so the result is read back. A kernel without the
// calls (gVisor) is found with one call on this thread: the all-threads
// form would stop the world first, about 0.7 ms while a gVisor box starts.
func dropFileIdentity(u User) error {
	invalid := uintptr(^uint32(0))
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETFSGID, invalid, 0, 0); e == syscall.ENOSYS {
		return fmt.Errorf("setfsgid %d: %w", u.GID, e)
	}
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_SETFSGID, uintptr(u.GID), 0, 0); e != 0 {
		return fmt.Errorf("setfsgid %d: %w", u.GID, e)
	}
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_SETFSUID, uintptr(u.UID), 0, 0); e != 0 {
		return fmt.Errorf("setfsuid %d: %w", u.UID, e)
	}
	// An invalid id changes nothing and returns the current one.
	g, _, _ := syscall.RawSyscall(syscall.SYS_SETFSGID, invalid, 0, 0)
	f, _, _ := syscall.RawSyscall(syscall.SYS_SETFSUID, invalid, 0, 0)
	if uint32(f) != u.UID || uint32(g) != u.GID {
		return fmt.Errorf("file identity is %d:%d after setting %d:%d (missing CAP_SETUID/CAP_SETGID?)", f, g, u.UID, u.GID)
	}
	return nil
}

// dropEffectiveIdentity makes u the effective identity of every OS thread
// while the real and saved ids stay root (setresgid/setresuid -1, u, -1),
// for kernels without setfsuid (gVisor). File operations are then checked
// as, and create files owned by, u; processes of u can neither signal the
// agent (the kernel compares against its real and saved uid, 0) nor trace
// it or open its /proc files (non-dumpable, ids differ). The effective
// capabilities are gone while the euid is u; the permitted ones stay, and
// come back on a thread that sets its euid to 0 again (see spawnAsRoot).
func dropEffectiveIdentity(u User) error {
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_SETRESGID, keep, uintptr(u.GID), keep); e != 0 {
		return fmt.Errorf("setresgid -1 %d -1: %w", u.GID, e)
	}
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_SETRESUID, keep, uintptr(u.UID), keep); e != 0 {
		return fmt.Errorf("setresuid -1 %d -1: %w", u.UID, e)
	}
	if os.Geteuid() != int(u.UID) || os.Getegid() != int(u.GID) || os.Getuid() != 0 {
		return fmt.Errorf("identity is uid %d euid %d egid %d after setting euid %d egid %d", os.Getuid(), os.Geteuid(), os.Getegid(), u.UID, u.GID)
	}
	// A change of the effective uid resets the dumpable flag.
	if err := setDumpable(false); err != nil {
		return fmt.Errorf("mark non-dumpable: %w", err)
	}
	return nil
}

// keep is -1 as a setres*id argument: leave that id unchanged.
const keep = ^uintptr(0)

// spawnAsRoot runs start (a process start) on a thread of its own whose
// effective ids are root again, so the child can take its credentials
// (setgroups needs CAP_SETGID), and lowers that thread again afterwards.
// A thread that cannot be lowered is never reused: its goroutine exits
// still locked to it, and the runtime ends the thread.
func spawnAsRoot(u User, start func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, keep, 0, keep); e != 0 {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("raise the spawning thread: setresuid: %w", e)
			return
		}
		_, _, gerr := syscall.RawSyscall(syscall.SYS_SETRESGID, keep, 0, keep)
		var err error
		if gerr != 0 {
			err = fmt.Errorf("raise the spawning thread: setresgid: %w", gerr)
		} else {
			err = start()
		}
		_, _, e1 := syscall.RawSyscall(syscall.SYS_SETRESGID, keep, uintptr(u.GID), keep)
		_, _, e2 := syscall.RawSyscall(syscall.SYS_SETRESUID, keep, uintptr(u.UID), keep)
		if e1 == 0 && e2 == 0 {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}
