package boxagent

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestRawPipe: a non-blocking pipe the poller serves is read and written
// with raw calls, whole through a full pipe, with deadlines and EOF as an
// os.File has them; a blocking pipe and a regular file are left alone.
func TestRawPipe(t *testing.T) {
	r, w, err := os.Pipe() // non-blocking, polled
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rp, ok := newRawPipe(r)
	if !ok {
		t.Fatal("a polled pipe's read end is not taken")
	}
	wp, ok := newRawPipe(w)
	if !ok {
		t.Fatal("a polled pipe's write end is not taken")
	}

	if err := rp.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := rp.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read of an empty pipe past its deadline: %v", err)
	}
	if err := rp.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}

	// 4 MiB is many times a pipe's capacity: the writer waits in the
	// poller and goes on where the raw write stopped.
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<18)
	done := make(chan error, 1)
	go func() {
		n, err := wp.Write(want)
		if err == nil && n != len(want) {
			err = io.ErrShortWrite
		}
		if cerr := wp.Close(); err == nil {
			err = cerr
		}
		done <- err
	}()
	got, err := io.ReadAll(rp)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want the %d written", len(got), len(want))
	}
	if n, err := rp.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("read after the writer closed: %d, %v", n, err)
	}

	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil { // blocking
		t.Fatal(err)
	}
	br, bw := os.NewFile(uintptr(p[0]), "r"), os.NewFile(uintptr(p[1]), "w")
	defer br.Close()
	defer bw.Close()
	if _, ok := newRawPipe(br); ok {
		t.Fatal("a blocking pipe is taken: its raw read would hold the thread")
	}
	reg, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	if _, ok := newRawPipe(reg); ok {
		t.Fatal("a regular file is taken")
	}
	if _, ok := newRawPipe(bytes.NewReader(nil)); ok {
		t.Fatal("a reader that is not a file is taken")
	}
}
