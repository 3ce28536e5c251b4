package boxagent

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// dialTimeout bounds connecting to a port in the box.
const dialTimeout = 10 * time.Second

// halfCloser is a forwarded connection as a proc's input: closing it
// half-closes the connection (the box's server reads EOF and may still
// answer), as closing a process's stdin does.
type halfCloser struct{ *os.File }

// Close implements procInput: shutdown(SHUT_WR).
func (h halfCloser) Close() error {
	rc, err := h.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Shutdown(int(fd), unix.SHUT_WR) }); err != nil {
		return err
	}
	return os.NewSyscallError("shutdown", serr)
}

// errConnectTimeout is dialLoopback's error when the connection is not
// made within its timeout.
var errConnectTimeout = errors.New("connect timed out")

// dialLoopback connects to 127.0.0.1:port within timeout, or until ctx
// ends. The connection is a non-blocking TCP socket in an *os.File, which
// the runtime's poller serves as it does a net.Conn (blocking reads and
// writes park the goroutine; deadlines work). It is not package net: the
// in-box agent links no net, which costs every box 0.3 MiB RSS
// (docs/benchmarks-history.md, "A lean in-box agent"). A loopback address
// and a port need none of net's resolving.
func dialLoopback(ctx context.Context, port int, timeout time.Duration) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	err = unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
	if err != nil && !errors.Is(err, unix.EINPROGRESS) && !errors.Is(err, unix.EINTR) {
		_ = unix.Close(fd)
		return nil, os.NewSyscallError("connect", err)
	}
	f := os.NewFile(uintptr(fd), "tcp 127.0.0.1:"+strconv.Itoa(port)) // non-blocking: pollable
	if err == nil {
		return f, nil
	}
	// In progress: writable once connected or refused (SO_ERROR tells).
	_ = f.SetWriteDeadline(time.Now().Add(timeout))
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = f.SetWriteDeadline(time.Unix(1, 0))
		close(cancelled)
	})
	rc, err := f.SyscallConn()
	var connErr error
	if err == nil {
		err = rc.Write(func(fd uintptr) bool {
			soErr, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
			switch {
			case err != nil:
				connErr = os.NewSyscallError("getsockopt", err)
			case soErr != 0:
				connErr = os.NewSyscallError("connect", syscall.Errno(soErr))
			default:
				if _, err := unix.Getpeername(int(fd)); errors.Is(err, unix.ENOTCONN) {
					return false // not yet: wait until writable
				}
			}
			return true
		})
	}
	if !stop() {
		<-cancelled // its deadline is set: the connection is not used
	}
	switch {
	case ctx.Err() != nil:
		err = ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = errConnectTimeout
	case err == nil:
		err = connErr
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	_ = f.SetWriteDeadline(time.Time{})
	return f, nil
}

// dial runs one port forward for the life of its request (a proc_start
// with a port): it connects to 127.0.0.1:port in the box — a port, never
// an address, so a forward reaches nothing but the box's own loopback —
// and then behaves as a process whose stdout is what the connection
// sends and whose stdin is what it receives, within the same output
// window. It answers with exit 0 once the box's side has closed; a
// cancelled request closes the connection.
func (s *server) dial(ctx context.Context, req agentproto.Request, a backend.ProcessRequest) agentproto.Response {
	if err := backend.CheckPortForward(a); err != nil {
		return agentproto.Failure(req.ID, backend.FromOS("port forward", "", err))
	}
	p := &proc{credit: agentproto.ProcWindow, conn: true}
	p.cond = sync.NewCond(&p.mu)
	s.mu.Lock()
	full := s.conns >= agentproto.MaxConns
	if !full {
		s.procs[req.ID] = p
		s.conns++
	}
	s.mu.Unlock()
	if full {
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeResourceExhausted, "", "%d connections are already forwarded into this sandbox; close one first", agentproto.MaxConns).
			WithDetail("limit", strconv.Itoa(agentproto.MaxConns)))
	}
	defer func() {
		s.mu.Lock()
		delete(s.procs, req.ID)
		s.conns--
		s.mu.Unlock()
	}()

	conn, err := dialLoopback(ctx, a.Port, dialTimeout)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return agentproto.Failure(req.ID, backend.Errorf(backend.CodeConnectionRefused, "", "nothing listens on port %d in the sandbox (connection refused)", a.Port).
				WithDetail("port", strconv.Itoa(a.Port)))
		case ctx.Err() != nil:
			return agentproto.Failure(req.ID, backend.Errorf(backend.CodeCancelled, "", "the port forward was closed while connecting"))
		}
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeUnavailable, "", "connect to port %d in the sandbox: %v", a.Port, err).
			WithDetail("port", strconv.Itoa(a.Port)))
	}
	defer conn.Close()
	p.mu.Lock()
	p.stdin = halfCloser{conn}
	p.mu.Unlock()
	s.send(agentproto.Response{ID: req.ID, Event: agentproto.EventStarted})

	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		s.pumpOutput(req.ID, p, conn, agentproto.EventStdout)
	}()
	select {
	case <-pumped:
	case <-ctx.Done():
		_ = conn.Close()
		p.finish()
		<-pumped
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeCancelled, "", "the port forward was closed"))
	}
	p.finish()
	return agentproto.Result(req.ID, backend.ProcessExit{})
}
