package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// The box's CPU bandwidth limit as the box sees its own cgroup: cgroup v2's
// cpu.max ("QUOTA PERIOD"), else cgroup v1's quota and period files.
const (
	cpuMaxFile    = "/sys/fs/cgroup/cpu.max"
	cfsQuotaFile  = "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"
	cfsPeriodFile = "/sys/fs/cgroup/cpu/cpu.cfs_period_us"
)

// fitProcs sets GOMAXPROCS to the box's CPU limit rounded up when that is
// below the CPUs the runtime sees, and GOMAXPROCS is not set in the
// environment (the worker sets it there where it can, see dropOwnEnv: the
// runtime then starts with it). It replaces Go 1.25's container-aware
// default (turned off in main.go), which rounds a limit up to at least 2,
// so a default box of one CPU ran the agent with two Ps: each P holds its
// own allocation caches and a GC worker, about 0.2 MiB RSS per box for
// parallelism the box's quota does not give (docs/benchmarks.md, B9).
//
// `sandbox-agent serve` calls it first, before it starts a goroutine:
// each one started while a second P is idle wakes or makes a thread for
// it, a costly round trip under gVisor (docs/benchmarks.md, B3-runsc).
func fitProcs() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	limit, err := readSmall(cpuMaxFile)
	if err != nil {
		quota, qerr := readSmall(cfsQuotaFile)
		period, perr := readSmall(cfsPeriodFile)
		if qerr != nil || perr != nil {
			return
		}
		limit = strings.TrimSpace(quota) + " " + strings.TrimSpace(period)
	}
	if n, ok := cpuLimit(limit); ok && n < runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(n)
	}
}

// dropOwnEnv removes from the environment, which commands inherit, the
// variables the worker set for the agent alone (agentproto.OwnEnv names
// them: GOMAXPROCS, read by the runtime as it started), and OwnEnv itself.
func dropOwnEnv() {
	names, ok := os.LookupEnv(agentproto.OwnEnv)
	if !ok {
		return
	}
	for _, k := range strings.Split(names, ",") {
		os.Unsetenv(k)
	}
	os.Unsetenv(agentproto.OwnEnv)
}

// readSmall reads the start of a small file (a cgroup setting) with one
// open, read and close: os.ReadFile would also stat it and try to hand it
// to the runtime's poller, five calls more per file.
func readSmall(path string) (string, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer syscall.Close(fd)
	var b [128]byte
	n, err := syscall.Read(fd, b[:])
	if err != nil {
		return "", err
	}
	return string(b[:n]), nil
}

// cpuLimit parses "QUOTA PERIOD" (cpu.max; "max" or v1's -1 for no limit)
// into whole CPUs, rounded up; ok is false without a limit.
func cpuLimit(s string) (int, bool) {
	quota, period, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok || quota == "max" {
		return 0, false
	}
	q, err1 := strconv.ParseInt(quota, 10, 64)
	p, err2 := strconv.ParseInt(period, 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, false
	}
	return int(max(1, (q+p-1)/p)), true
}
