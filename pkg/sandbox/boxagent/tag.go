package boxagent

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Every command the agent starts as the sandbox user carries a
// supplementary group of its own, its tag. Descendants inherit it across
// fork, exec, setsid, double forks and re-parenting to PID 1, and a
// process without CAP_SETGID cannot drop it (setgroups needs that
// capability; new user namespaces are refused by the seccomp profile).
// Ending a command is therefore "signal every process that carries its
// tag", found through /proc/<pid>/status, with no reaper process per
// command and no subreaper, which gVisor lacks.
//
// Tags are never group owners of anything the box needs (the range is far
// above every account's gid), so carrying one grants nothing. Files keep
// the user's own gid: new files take the effective gid.
const tagBase = 1 << 30

// newTag returns a tag no other command of this agent carries. A box can
// have several agents over its life (the first on the container's stdio,
// then one per later channel), and background processes of one agent's
// commands outlive it with their tags; each agent therefore starts at a
// random point of the 2^30 tags (firstTag), so the next agent's tags do
// not meet the old ones but by a 1-in-2^30 chance per live tag.
func (s *server) newTag() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastTag++
	return tagBase + s.lastTag%tagBase
}

// firstTag returns a random starting point for an agent's tags.
func firstTag() uint32 {
	return rand.Uint32N(tagBase) // math/rand/v2: no secret, just a spread
}

// signalCommand sends sig to a command's process group pgid and, when it
// has a tag, to the processes carrying the tag that have left the group
// (setsid, double forks): each of them gets sig once. It returns the
// group's kill error.
func signalCommand(pgid int, tag uint32, sig syscall.Signal) error {
	err := syscall.Kill(-pgid, sig)
	if tag != 0 {
		signalTagged(tag, sig, pgid)
	}
	return err
}

// signalTagged sends sig to every live process that carries tag and
// returns how many it signalled. Each process is opened as a pidfd and its
// tag checked again through it before the signal, so a pid reused in
// between is never signalled; without pidfds (old kernels) it signals by
// pid. A process still in process group skip (> 0) is passed over: the
// caller has just signalled that group, and a second SIGINT or SIGTERM
// arriving after the first was taken would run a shell's trap twice.
func signalTagged(tag uint32, sig syscall.Signal, skip int) int {
	d, err := os.Open("/proc")
	if err != nil {
		return 0
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	n := 0
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == os.Getpid() || !carries(pid, tag) {
			continue
		}
		if skip > 0 {
			if pg, err := unix.Getpgid(pid); err != nil || pg == skip {
				continue
			}
		}
		fd, err := unix.PidfdOpen(pid, 0)
		switch {
		case err == nil:
			if carries(pid, tag) && unix.PidfdSendSignal(fd, sig, nil, 0) == nil {
				n++
			}
			unix.Close(fd)
		case errors.Is(err, unix.ENOSYS):
			if syscall.Kill(pid, sig) == nil {
				n++
			}
		}
	}
	return n
}

// carries reports whether process pid is alive (not a zombie) and has tag
// among its supplementary groups.
func carries(pid int, tag uint32) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	want := []byte(strconv.FormatUint(uint64(tag), 10))
	found := false
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		switch {
		case bytes.HasPrefix(line, []byte("State:")):
			if f := bytes.Fields(line[len("State:"):]); len(f) > 0 && (f[0][0] == 'Z' || f[0][0] == 'X') {
				return false
			}
		case bytes.HasPrefix(line, []byte("Groups:")):
			for _, g := range bytes.Fields(line[len("Groups:"):]) {
				if bytes.Equal(g, want) {
					found = true
				}
			}
		}
	}
	return found
}

// killTagged SIGKILLs every process that carries tag, round after round,
// until none is left: a process forking during a round is caught in the
// next, and the box's pids limit bounds how many there can be. It gives up
// after killRounds (a process stuck in the kernel cannot die yet) and
// reports whether none was left.
func killTagged(tag uint32) bool {
	deadline := time.Now().Add(killRounds)
	for signalTagged(tag, syscall.SIGKILL, 0) > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond) // let the kernel finish the kills
	}
	return true
}

// killRounds bounds how long killTagged keeps finding processes.
const killRounds = 10 * time.Second
