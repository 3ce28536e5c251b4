package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// procMem is the memory of one process of a sandbox's container, read
// from the host's /proc.
type procMem struct {
	// name is the command's base name, and for the sandbox agent its
	// subcommand too ("sandbox-agent init", "sandbox-agent serve"), so the
	// report names processes by what they are, not by how they started.
	name string
	// rss is VmRSS in bytes: every resident page the process maps,
	// including the binary's text that other boxes share through the
	// page cache.
	rss int64
	// pss is Pss from smaps_rollup in bytes (shared pages divided among
	// the processes that map them: what one more box really adds), or -1
	// when this process may not read it (smaps needs ptrace access; the
	// processes run as root).
	pss int64
	// uss is Private_Clean + Private_Dirty from smaps_rollup in bytes:
	// the pages only this process maps (what would be freed if it
	// exited), or -1 with pss.
	uss int64
}

// boxMemory is what one container's processes hold.
type boxMemory struct {
	procs []procMem
	// cgroup is the container's cgroup memory as `docker stats` shows it
	// (usage minus inactive file cache), and cgroupAll its whole usage
	// (with all its page cache); both -1 when unavailable.
	cgroup, cgroupAll int64
}

// sum adds up one figure of the processes (-1 if any was unreadable).
func (b boxMemory) sum(of func(procMem) int64) int64 {
	var n int64
	for _, p := range b.procs {
		v := of(p)
		if v < 0 {
			return -1
		}
		n += v
	}
	return n
}

// Figures of a procMem, for boxMemory.sum.
func rssOf(p procMem) int64 { return p.rss }
func pssOf(p procMem) int64 { return p.pss }
func ussOf(p procMem) int64 { return p.uss }

// containerMemory finds every process of container cid by its host pid
// (ContainerTop runs ps on the host and keeps the container's pids, so
// under runc these are host pids) and reads each one's memory. It matches
// the processes by the container, whatever started them; a process that
// exits in between is left out. It fails when the container has no
// process left to read, since then nothing was measured.
func containerMemory(ctx context.Context, cli *client.Client, cid string) (boxMemory, error) {
	top, err := cli.ContainerTop(ctx, cid, client.ContainerTopOptions{})
	if err != nil {
		return boxMemory{}, fmt.Errorf("container top %s: %w", cid[:12], err)
	}
	col := -1
	for i, t := range top.Titles {
		if t == "PID" {
			col = i
		}
	}
	if col < 0 {
		return boxMemory{}, fmt.Errorf("container top %s: no PID column in %v", cid[:12], top.Titles)
	}
	var out boxMemory
	for _, p := range top.Processes {
		if col >= len(p) {
			continue
		}
		pid, err := strconv.Atoi(p[col])
		if err != nil {
			return boxMemory{}, fmt.Errorf("container top %s: pid %q: %w", cid[:12], p[col], err)
		}
		pm, err := readProcMem(pid)
		if gone(err) {
			continue
		}
		if err != nil {
			return boxMemory{}, fmt.Errorf("container %s: %w", cid[:12], err)
		}
		out.procs = append(out.procs, pm)
	}
	if len(out.procs) == 0 {
		return boxMemory{}, fmt.Errorf("container %s: no process to measure (ContainerTop listed %d)", cid[:12], len(top.Processes))
	}
	out.cgroup, out.cgroupAll = cgroupMemory(ctx, cli, cid)
	return out, nil
}

// gone is true when the process exited before it could be read.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// readProcMem reads one host process's name, VmRSS, Pss and USS.
func readProcMem(pid int) (procMem, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	cmdline, err := os.ReadFile(dir + "/cmdline")
	if err != nil {
		return procMem{}, err
	}
	// The executable's link names the binary even when it was started
	// through /proc/self/exe; it needs ptrace access, the command line
	// does not.
	exe, _ := os.Readlink(dir + "/exe")
	pm := procMem{name: procName(exe, cmdline)}
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return procMem{}, err
	}
	if pm.rss, err = kBField(status, "VmRSS"); err != nil {
		return procMem{}, fmt.Errorf("pid %d status: %w", pid, err)
	}
	rollup, err := os.ReadFile(dir + "/smaps_rollup")
	switch {
	case errors.Is(err, fs.ErrPermission):
		pm.pss, pm.uss = -1, -1
		return pm, nil
	case err != nil:
		return procMem{}, err
	}
	var clean, dirty int64
	for _, f := range []struct {
		key string
		v   *int64
	}{{"Pss", &pm.pss}, {"Private_Clean", &clean}, {"Private_Dirty", &dirty}} {
		if *f.v, err = kBField(rollup, f.key); err != nil {
			return procMem{}, fmt.Errorf("pid %d smaps_rollup: %w", pid, err)
		}
	}
	pm.uss = clean + dirty
	return pm, nil
}

// procName names a process by the base name of its executable (exe, the
// target of /proc/<pid>/exe, or argv[0] when that is unknown), plus the
// subcommand for the sandbox agent.
func procName(exe string, cmdline []byte) string {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	name := path.Base(strings.TrimSuffix(exe, " (deleted)"))
	if exe == "" {
		name = path.Base(args[0])
	}
	if name == "sandbox-agent" && len(args) > 1 {
		name += " " + args[1]
	}
	if name == "." || name == "/" {
		name = "?"
	}
	return name
}

// kBField returns the value of a "Key:   123 kB" line of a /proc file, in
// bytes.
func kBField(b []byte, key string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%s: unexpected %q", key, v)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", key, err)
		}
		return n << 10, nil
	}
	return 0, fmt.Errorf("no %s line", key)
}

// cgroupMemory is the container's cgroup memory as `docker stats` shows
// it, usage minus the inactive file cache (cgroup v1 or v2), and its whole
// usage; both -1 when the engine does not say.
func cgroupMemory(ctx context.Context, cli *client.Client, cid string) (shown, all int64) {
	res, err := cli.ContainerStats(ctx, cid, client.ContainerStatsOptions{})
	if err != nil {
		return -1, -1
	}
	defer res.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil || st.MemoryStats.Usage == 0 {
		return -1, -1
	}
	cache := st.MemoryStats.Stats["total_inactive_file"]
	if v, ok := st.MemoryStats.Stats["inactive_file"]; ok && cache == 0 {
		cache = v
	}
	if cache > st.MemoryStats.Usage {
		cache = 0
	}
	return int64(st.MemoryStats.Usage - cache), int64(st.MemoryStats.Usage)
}
