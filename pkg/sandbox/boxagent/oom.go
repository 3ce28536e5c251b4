package boxagent

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// oomCounters are the files where a container sees how many times the
// kernel's OOM killer acted in its memory cgroup, with the key of that
// count: cgroup v2 first, then v1 (kernel 4.13 and later).
var oomCounters = []struct{ path, key string }{
	{"/sys/fs/cgroup/memory.events", "oom_kill"},
	{"/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"},
}

// oomKills returns the box's OOM kill count, and false where the box does
// not see it (gVisor, a cgroup namespace without the memory controller).
// A process that dies of SIGKILL while the count rose was (all but
// surely) killed for running out of memory.
func oomKills() (uint64, bool) {
	for _, c := range oomCounters {
		if n, ok := readCounter(c.path, c.key); ok {
			return n, true
		}
	}
	return 0, false
}

// readCounter reads "key value" from a flat-keyed cgroup file.
func readCounter(path, key string) (uint64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// CommandOomScoreAdj is the OOM score adjustment of every command the
// agent starts. The box's container starts lower (sandbox.OomScoreAdj),
// and so does the agent: when the box runs out of memory, the kernel
// kills its commands before the agent that serves the box.
const CommandOomScoreAdj = 1000

// oomRaise starts commands with CommandOomScoreAdj. The agent cannot set a
// child's value (the child's /proc file is the sandbox user's, and the
// agent has no CAP_DAC_OVERRIDE), so it raises its own for the start and
// lowers it again after: a child inherits the value at fork. Lowering
// back to the value the agent started with needs no capability: without
// CAP_SYS_RESOURCE the kernel refuses only values under the process's
// floor, which is 0 in a box (docs/security.md). Starts are serialized,
// so no start lowers the value under another one's fork.
type oomRaise struct {
	mu        sync.Mutex
	fd        int // /proc/self/oom_score_adj, opened while the agent could
	low, high []byte
}

// openOomRaise opens the agent's own oom_score_adj for oomRaise, or
// returns nil where raising is pointless (already at the command's value)
// or impossible (no such file, as under some kernels). It must run before
// the agent drops its file identity: the file is root's.
func openOomRaise() *oomRaise {
	// Plain system calls: an os.File would register the file with the
	// runtime's poller too, three calls more while the box starts (each
	// a costly round trip under gVisor).
	fd, err := syscall.Open("/proc/self/oom_score_adj", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	b := make([]byte, 16)
	n, _ := syscall.Pread(fd, b, 0)
	cur, err := strconv.Atoi(strings.TrimSpace(string(b[:max(n, 0)])))
	if n <= 0 || err != nil || cur >= CommandOomScoreAdj {
		syscall.Close(fd)
		return nil
	}
	return &oomRaise{fd: fd, low: []byte(strconv.Itoa(cur)), high: []byte(strconv.Itoa(CommandOomScoreAdj))}
}

// start runs spawn with the agent's value raised. A refused write only
// leaves the command at the agent's value.
func (o *oomRaise) start(spawn func() error) error {
	if o == nil {
		return spawn()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	raised := o.set(o.high) == nil
	err := spawn()
	if raised {
		_ = o.set(o.low)
	}
	return err
}

func (o *oomRaise) set(v []byte) error {
	_, err := syscall.Pwrite(o.fd, v, 0)
	return err
}

func (o *oomRaise) close() {
	if o != nil {
		syscall.Close(o.fd)
	}
}
