package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// resident counts the pages of path that are in the page cache.
func resident(t *testing.T, path string) (in, all int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	vec := make([]byte, (len(b)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal("mincore:", errno)
	}
	for _, v := range vec {
		in += int(v & 1)
	}
	return in, len(vec)
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestWarmSpawn: warmSpawn leaves a regular shell in the page cache, and
// returns at once, touching nothing, for a FIFO (it must not wait for a
// writer), a directory, a file over warmShellMax and a missing path,
// without leaking a descriptor.
func TestWarmSpawn(t *testing.T) {
	dir := t.TempDir()
	shell := filepath.Join(dir, "sh")
	if err := os.WriteFile(shell, make([]byte, 1<<20), 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, warmShellMax+1); err != nil {
		t.Fatal(err)
	}

	// Evict the shell's pages, where the file system lets them go.
	f, err := os.Open(shell)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Sync()
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	f.Close()
	before, all := resident(t, shell)

	fds := openFDs(t)
	for _, path := range []string{fifo, dir, big, filepath.Join(dir, "missing"), shell} {
		warmSpawn(path)
	}
	if n := openFDs(t); n != fds {
		t.Errorf("%d descriptors open after warmSpawn, %d before", n, fds)
	}
	after, _ := resident(t, shell)
	if after != all {
		t.Errorf("%d of the shell's %d pages in the page cache after warmSpawn (%d before)", after, all, before)
	}
	if before == all {
		t.Logf("this file system kept the shell's pages cached before warmSpawn: the residency check shows nothing here")
	}
}
