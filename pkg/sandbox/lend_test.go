package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// TestBorrow borrows from this test's own process (a pidfd of itself)
// what an agent could name: only a regular file with the device and inode
// it reports is taken.
func TestBorrow(t *testing.T) {
	pidfd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		t.Fatalf("pidfd_open: %v (plumb's workers need Linux 5.6 or later for lent transfers)", err)
	}
	l := &lender{pidfd: os.NewFile(uintptr(pidfd), "pidfd")}
	defer l.close()

	file, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	other, err := os.Create(filepath.Join(t.TempDir(), "g"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	ident := func(f *os.File) agentproto.Lent {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		return agentproto.Lent{FD: int(f.Fd()), Dev: uint64(st.Dev), Ino: st.Ino}
	}
	good := ident(file)
	pipe := ident(r)
	wrongIno := good
	wrongIno.Ino = ident(other).Ino
	wrongFD := ident(other)
	wrongFD.FD = good.FD
	closed := good
	closed.FD = 1 << 20

	for _, c := range []struct {
		name string
		lent *agentproto.Lent
		ok   bool
	}{
		{"the file the agent named", &good, true},
		{"no descriptor named", nil, false},
		{"a pipe, which could block the worker", &pipe, false},
		{"another inode than the descriptor's", &wrongIno, false},
		{"a descriptor of another file than named", &wrongFD, false},
		{"a descriptor the agent does not have", &closed, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := l.borrow(c.lent)
			if (err == nil) != c.ok {
				t.Fatalf("borrow: %v, want ok=%v", err, c.ok)
			}
			if got == nil {
				return
			}
			defer got.Close()
			if _, err := got.WriteAt([]byte("lent"), 0); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 4)
			if _, err := file.ReadAt(b, 0); err != nil || string(b) != "lent" {
				t.Fatalf("the borrowed descriptor wrote elsewhere: %q %v", b, err)
			}
		})
	}
	// An execute's output pipe: only the FIFO named, non-blocking.
	for _, c := range []struct {
		name string
		lent *agentproto.Lent
		ok   bool
	}{
		{"the pipe the agent named", &pipe, true},
		{"a regular file", &good, false},
		{"another inode than the pipe's", &agentproto.Lent{FD: pipe.FD, Dev: pipe.Dev, Ino: good.Ino}, false},
	} {
		t.Run("pipe/"+c.name, func(t *testing.T) {
			got, err := l.borrowPipe(c.lent)
			if (err == nil) != c.ok {
				t.Fatalf("borrowPipe: %v, want ok=%v", err, c.ok)
			}
			if got == nil {
				return
			}
			defer got.Close()
			if _, err := w.Write([]byte("out")); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 8)
			if n, err := got.Read(b); err != nil || string(b[:n]) != "out" {
				t.Fatalf("read the borrowed pipe: %q %v", b[:n], err)
			}
			// Non-blocking, so a deadline ends a read of an empty pipe.
			if err := got.SetReadDeadline(time.Now()); err != nil {
				t.Fatalf("the borrowed pipe takes no deadline: %v", err)
			}
			if _, err := got.Read(b); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read of an empty pipe past its deadline: %v", err)
			}
		})
	}
	if l.off.Load() {
		t.Fatal("a refused borrow turned lending off")
	}
	l.close()
	if _, err := l.borrow(&good); err == nil || errors.Is(err, errNotLent) {
		t.Fatalf("borrow after close: %v, want the closed pidfd's error", err)
	}
}
