package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
)

// ReapCommand is the agent subcommand that runs one execute's shell under
// a per-command subreaper (see Reap).
const ReapCommand = "reap"

// Signals the agent sends a reaper: ReapTerm asks it to end the command
// (SIGTERM to the shell's group, everything killed after the grace);
// ReapKill makes it kill the whole subtree at once.
const (
	ReapTerm = syscall.SIGTERM
	ReapKill = syscall.SIGUSR1
)

// User is the sandbox user that commands run as and whose identity file
// operations use.
type User struct {
	UID, GID uint32
}

// credential is the identity of a command started as u: no supplementary
// groups (and, execve being done by a non-root uid, no capabilities).
func (u User) credential() *syscall.Credential {
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
}

// Reap runs a command under a per-command subreaper and returns the exit
// status to exit with. args are `[--uid U --gid G] [--grace D] -- PROG
// ARGS...`. The reaper marks itself a child subreaper (so every orphan of
// the command re-parents to it, even one that called setsid), starts PROG
// in its own process group (as U:G when given), and exits with PROG's
// status (128+n when signal n killed it) as soon as PROG exits; descendants
// that are still running then re-parent to PID 1 and live on, as
// background processes of a shell do.
//
// On ReapTerm it sends SIGTERM to PROG's process group and to its own
// children, waits for the subtree to be gone, and kills what is left of it
// after the grace (default backend.KillGrace) even if PROG itself has
// exited; on ReapKill it kills the subtree at once. Killing the
// subtree repeats "SIGKILL every child, reap" until it has no child left,
// so grandchildren that re-parent to it die too. It then exits 128+15.
//
// Run by root with only the SETUID, SETGID and KILL capabilities, the
// reaper is out of the command's reach: uid U can neither signal nor trace
// it. It marks itself non-dumpable as well.
func Reap(args []string, stderr io.Writer) int {
	var (
		user  *User
		grace = backend.KillGrace
		uid   = -1
		gid   = -1
	)
	for len(args) > 0 && args[0] != "--" {
		if len(args) < 2 {
			fmt.Fprintf(stderr, "sandbox-agent reap: flag %s needs a value\n", args[0])
			return 2
		}
		var err error
		switch args[0] {
		case "--uid":
			uid, err = parseID(args[1])
		case "--gid":
			gid, err = parseID(args[1])
		case "--grace":
			grace, err = time.ParseDuration(args[1])
		default:
			err = errors.New("unknown flag")
		}
		if err != nil {
			fmt.Fprintf(stderr, "sandbox-agent reap: %s %q: %v\n", args[0], args[1], err)
			return 2
		}
		args = args[2:]
	}
	if len(args) < 2 {
		fmt.Fprintln(stderr, "sandbox-agent reap: usage: reap [--uid U --gid G] [--grace D] -- PROG ARGS...")
		return 2
	}
	args = args[1:]
	if (uid < 0) != (gid < 0) {
		fmt.Fprintln(stderr, "sandbox-agent reap: give both --uid and --gid, or neither")
		return 2
	}
	if uid >= 0 {
		user = &User{UID: uint32(uid), GID: uint32(gid)}
	}

	// Fewer Ps, fewer OS threads: every thread counts against the box's
	// pids limit.
	runtime.GOMAXPROCS(1)
	_ = setDumpable(false)
	// gVisor (runsc 20221219) has no PR_SET_CHILD_SUBREAPER (EINVAL): the
	// reaper then still kills the shell's group and its own children, but
	// a descendant that left both re-parents to PID 1 and outlives a
	// timeout (docs/security.md, "Not yet covered").
	if err := setChildSubreaper(); err != nil && !errors.Is(err, syscall.EINVAL) {
		fmt.Fprintf(stderr, "sandbox-agent reap: become a subreaper: %v\n", err)
		return 126
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, ReapTerm, ReapKill, syscall.SIGCHLD)
	defer signal.Stop(sigs)

	attr := &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	if user != nil {
		attr.Sys.Credential = user.credential()
	}
	pid, err := syscall.ForkExec(args[0], args, attr)
	if err != nil {
		fmt.Fprintf(stderr, "sandbox-agent reap: start %s: %v\n", args[0], err)
		if errors.Is(err, syscall.ENOENT) {
			return 127
		}
		return 126
	}

	// Exits are collected on SIGCHLD with WNOHANG rather than by a
	// goroutine blocked in wait4, which would cost an OS thread (threads
	// count against the box's pids limit, as do the reaper's few others).
	var (
		escalate  <-chan time.Time // set once the agent asked to end the command
		shellCode int
		shellDone bool
	)
	for {
		code, exited, none := reapChildren(pid)
		if exited {
			shellCode, shellDone = code, true
		}
		switch {
		case shellDone && escalate == nil:
			// A normal end: what the shell left running lives on.
			return shellCode
		case escalate != nil && none:
			return 128 + int(syscall.SIGTERM)
		}
		select {
		case sig := <-sigs:
			switch sig {
			case syscall.SIGCHLD:
			case ReapKill:
				killSubtree(pid)
				return 128 + int(syscall.SIGTERM)
			default:
				_ = syscall.Kill(-pid, syscall.SIGTERM)
				signalChildren(syscall.SIGTERM)
				if escalate == nil {
					escalate = time.After(grace)
				}
			}
		case <-escalate:
			// The grace is over: whatever is left dies, even if the
			// shell has already exited.
			killSubtree(pid)
			return 128 + int(syscall.SIGTERM)
		}
	}
}

// reapChildren collects every exited child without blocking; it reports
// the status of shell if it was among them, and whether no child at all is
// left.
func reapChildren(shell int) (code int, exited, none bool) {
	for {
		var ws syscall.WaitStatus
		p, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.ECHILD):
			return code, exited, true
		case err != nil || p <= 0:
			return code, exited, false
		case p == shell:
			code, exited = statusOf(ws), true
		}
	}
}

// killSubtree kills every descendant of the reaper: SIGKILL to the shell's
// group and to each child, reap one, repeat until no child is left. Since
// the reaper is a subreaper, the children of a killed process become its
// own before the killed one can be reaped, so each round sees them. It
// races the waiting goroutine for exits, which is harmless: either reaps.
func killSubtree(shell int) {
	_ = syscall.Kill(-shell, syscall.SIGKILL)
	for {
		n := signalChildren(syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.ECHILD) {
			return
		}
		if n == 0 && err == nil {
			// Only zombies or processes on their way out: give the
			// kernel a moment rather than spin.
			time.Sleep(time.Millisecond)
		}
	}
}

// signalChildren sends sig to every child of this process and returns how
// many it found. Children are found through /proc/PID/stat (ppid field),
// which needs no CONFIG_PROC_CHILDREN.
func signalChildren(sig syscall.Signal) int {
	self := os.Getpid()
	d, err := os.Open("/proc")
	if err != nil {
		return 0
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	n := 0
	for _, name := range names {
		p, err := strconv.Atoi(name)
		if err != nil || p == self {
			continue
		}
		if ppidOf(p) == self {
			_ = syscall.Kill(p, sig)
			n++
		}
	}
	return n
}

// ppidOf reads the parent pid of p from /proc/p/stat, -1 if unknown.
func ppidOf(p int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
	if err != nil {
		return -1
	}
	// "pid (comm) state ppid ..." — comm may hold spaces and parentheses,
	// so parse after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return -1
	}
	pp, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return pp
}

// statusOf is the exit status to forward: the code, or 128+n for signal n.
func statusOf(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func parseID(s string) (int, error) {
	n, err := strconv.ParseUint(s, 10, 31)
	return int(n), err
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER (the syscall package lacks
// it).
const prSetChildSubreaper = 36

// setChildSubreaper makes this process the reaper of its orphaned
// descendants.
func setChildSubreaper() error {
	_, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	if e != 0 {
		return e
	}
	return nil
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
