package boxagent

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// dialTimeout bounds connecting to a port in the box.
const dialTimeout = 10 * time.Second

// halfCloser is a forwarded connection as a proc's input: closing it
// half-closes the connection (the box's server reads EOF and may still
// answer), as closing a process's stdin does.
type halfCloser struct{ *net.TCPConn }

// Close implements procInput.
func (h halfCloser) Close() error { return h.CloseWrite() }

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

	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Port)))
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
	conn := c.(*net.TCPConn)
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
