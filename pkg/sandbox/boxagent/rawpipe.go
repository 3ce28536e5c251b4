package boxagent

import (
	"io"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawPipe is an end of the channel, a non-blocking pipe, read and written
// with raw system calls: the runtime's poller serves its waits (an empty
// pipe to read, a full one to write), but a read or write that has data to
// move is made without entering the scheduler. A regular read of the
// channel wakes the runtime's monitor thread whenever the agent was idle,
// and that thread then watches every later call of the request and hands
// the agent's processor to another thread during the slow ones: under
// gVisor, rounds of futex and nanosleep calls on other threads, each a
// trip through the sentry (docs/benchmarks.md, B1-runsc). With the file
// engine's raw calls (fileops.UseRawCalls) a request makes no call that
// wakes it. A raw call here never blocks: the pipe is non-blocking.
//
// The embedded file keeps the rest: deadlines (which the poller's waits
// honour), SyscallConn, Close.
type rawPipe struct {
	*os.File
	rc syscall.RawConn
}

// newRawPipe wraps v when it is a non-blocking pipe the poller serves.
func newRawPipe(v any) (*rawPipe, bool) {
	f, ok := v.(*os.File)
	if !ok || f == nil {
		return nil, false
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, false
	}
	pipe := false
	if err := rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		pipe = err == nil && fl&unix.O_NONBLOCK != 0 &&
			unix.Fstat(int(fd), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
	}); err != nil || !pipe {
		return nil, false
	}
	// A deadline is what tells a poller-served file from one that is not
	// (a non-blocking descriptor the runtime does not poll would make the
	// raw read spin): os.NewFile of a non-blocking pipe is polled.
	if f.SetReadDeadline(time.Time{}) != nil {
		return nil, false
	}
	return &rawPipe{File: f, rc: rc}, true
}

func (p *rawPipe) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var errno unix.Errno
	err := p.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
			if e != unix.EINTR {
				n, errno = int(r), e
				return e != unix.EAGAIN
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, &os.PathError{Op: "read", Path: p.Name(), Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (p *rawPipe) Write(b []byte) (int, error) {
	n := 0
	var errno unix.Errno
	err := p.rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			r, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[n])), uintptr(len(b)-n))
			switch e {
			case 0:
				n += int(r)
			case unix.EINTR:
			case unix.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, &os.PathError{Op: "write", Path: p.Name(), Err: errno}
	}
	return n, nil
}
