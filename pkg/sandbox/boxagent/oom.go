package boxagent

import (
	"bufio"
	"os"
	"strconv"
	"strings"
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
