package agentproto

import (
	"errors"
	"io"
	"syscall"

	"golang.org/x/sys/unix"
)

// writeBuffers writes every byte of bufs to w: in writev calls when w
// has a file descriptor (syscall.Conn: the agent's stdout, a socket),
// else one Write per buffer. It is what net.Buffers.WriteTo does, without
// linking package net into the in-box agent (docs/benchmarks-history.md,
// "A lean in-box agent"); it also writev's to an *os.File, which
// net.Buffers does not. Deadlines set on w apply: the wait for a full
// socket or pipe to drain goes through w's poller.
func writeBuffers(w io.Writer, bufs [][]byte) error {
	sc, ok := w.(syscall.Conn)
	if !ok {
		return writeEach(w, bufs)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return writeEach(w, bufs)
	}
	bufs = nonEmpty(bufs)
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		for len(bufs) > 0 {
			n, err := unix.Writev(int(fd), bufs)
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case errors.Is(err, unix.EAGAIN):
				return false // wait until fd is writable (or the deadline)
			case err != nil:
				werr = err
				return true
			case n == 0:
				werr = io.ErrShortWrite
				return true
			}
			bufs = consume(bufs, n)
		}
		return true
	})
	if err != nil {
		return err
	}
	return werr
}
