package main

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// Releasing the binary's pages (docs/benchmarks.md, B9). The kernel maps an
// executable's text and read-only data ahead of use: a fault reads a
// window around the page it needs and maps the cached pages near it, so
// by the time the agent serves, nearly the whole binary is resident in
// its RSS although it runs a fraction of it. Under fuse-overlayfs each
// box has its own page cache of the binary, so those pages are each box's
// own. A while after start, the agent pages its binary's read-only
// mappings out (MADV_PAGEOUT) and has them read back one page at a time
// (MADV_RANDOM: no read-around); what comes back is what it runs. Pages
// another process maps too (a binary shared through the page cache) stay
// where they are. A kernel without the advice (MADV_PAGEOUT is Linux 5.4)
// refuses it and nothing changes; under gVisor (no setfsuid) nothing is
// asked. Only mappings nobody writes are touched, so no state is lost: a
// released page reads back the same bytes from the file.

// releaseAfter is how long after start the agent releases its binary's
// pages: past the start-up (its first requests reuse the start's pages)
// and short enough that an idle box holds only what it uses.
const releaseAfter = 2 * time.Second

// madvise(2) advice: MADV_RANDOM, and MADV_PAGEOUT (Linux 5.4).
const (
	madvRandom  = 1
	madvPageout = 21
)

// span is one address range of a mapping.
type span struct{ start, end uintptr }

// binarySpans lists the read-only mappings of the running executable from
// /proc/self/maps: its text and read-only data. It must run before the
// agent drops its file identity and becomes non-dumpable, which close
// its /proc files to it.
func binarySpans() ([]span, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &st); err != nil {
		return nil, err
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	return parseSpans(maps, st.Ino), nil
}

// parseSpans returns the mappings in maps (/proc/PID/maps) of inode ino
// without write permission. A static binary maps no other file.
func parseSpans(maps []byte, ino uint64) []span {
	var out []span
	for line := range bytes.Lines(maps) {
		// start-end perms offset dev inode path
		f := bytes.Fields(line)
		if len(f) < 6 || len(f[1]) < 2 || f[1][1] == 'w' {
			continue
		}
		if n, err := strconv.ParseUint(string(f[4]), 10, 64); err != nil || n != ino {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		if !ok || err1 != nil || err2 != nil || end <= start {
			continue
		}
		out = append(out, span{uintptr(start), uintptr(end)})
	}
	return out
}

// releasePages makes the kernel read each span's pages one at a time from
// now on (MADV_RANDOM: no read-around, which would map the pages near each
// fault again) and pages them out (MADV_PAGEOUT). The kernel pages a
// file's cache out only for a caller that owns the file or may write it,
// and the binary is root's while the agent's threads act on files as the
// sandbox user (boxagent drops their fsuid): so the calls run on a locked
// thread whose fsuid is root's for them, which does nothing else, and
// which goes back to the scheduler only with its fsuid as it was (a locked
// thread whose goroutine ends is destroyed).
func releasePages(spans []span) {
	runtime.LockOSThread()
	prev, ok := setfsuid(0)
	if !ok { // no setfsuid (gVisor): nothing changed
		runtime.UnlockOSThread()
		return
	}
	if cur, _ := setfsuid(invalidID); cur == 0 {
		for _, s := range spans {
			_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, s.start, s.end-s.start, madvRandom)
			_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, s.start, s.end-s.start, madvPageout)
		}
	}
	setfsuid(prev)
	if cur, _ := setfsuid(invalidID); cur == prev {
		runtime.UnlockOSThread()
	}
}

// invalidID is an id setfsuid(2) refuses: the call then changes nothing
// and returns the current fsuid.
const invalidID = ^uint32(0)

// setfsuid sets this thread's fsuid and returns the previous one; ok is
// false when the kernel has no such call.
func setfsuid(id uint32) (prev uint32, ok bool) {
	r, _, e := syscall.RawSyscall(syscall.SYS_SETFSUID, uintptr(id), 0, 0)
	return uint32(r), e == 0
}

// releaseLater releases the binary's pages releaseAfter from now, having
// found them now (see binarySpans). A kernel without setfsuid (gVisor)
// would have releasePages do nothing, so the mappings are not even read.
func releaseLater() {
	if _, ok := setfsuid(invalidID); !ok {
		return
	}
	spans, err := binarySpans()
	if err != nil || len(spans) == 0 {
		return
	}
	time.AfterFunc(releaseAfter, func() { releasePages(spans) })
}
