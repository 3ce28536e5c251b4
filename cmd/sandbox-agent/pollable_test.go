package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPollable: a blocking pipe (as the engine hands over a container's
// stdin) becomes a file the runtime's poller serves, which is what makes
// read deadlines work on it; a regular file and a non-file stay as they
// are.
func TestPollable(t *testing.T) {
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil { // blocking, unlike os.Pipe
		t.Fatal(err)
	}
	r, w := os.NewFile(uintptr(p[0]), "r"), os.NewFile(uintptr(p[1]), "w")
	defer w.Close()
	if err := r.SetReadDeadline(time.Now()); err == nil {
		t.Fatal("a blocking pipe already takes deadlines: the test proves nothing")
	}
	got := pollable(io.Reader(r)).(*os.File)
	defer got.Close()
	if err := got.SetReadDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("the pipe is not served by the poller: %v", err)
	}
	if _, err := w.Write([]byte("frame\n")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 16)
	if n, err := got.Read(b); err != nil || string(b[:n]) != "frame\n" {
		t.Fatalf("read %q, %v", b[:n], err)
	}

	reg, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	if pollable(io.Reader(reg)) != io.Reader(reg) {
		t.Fatal("a regular file was replaced")
	}
	if s := io.Reader(strings.NewReader("x")); pollable(s) != s {
		t.Fatal("a reader that is not a file was replaced")
	}
}
