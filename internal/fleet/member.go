package fleet

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// member is one worker address with its own connection. Every call on the
// connection passes its interceptors: they wait at most deadline for the
// connection to be ready, name the worker in transport failures, and count
// the call so that a retired member closes only after its last call.
type member struct {
	addr     string
	deadline time.Duration
	conn     *grpc.ClientConn

	mu      sync.Mutex
	name    string // learned from DescribeWorker; "" until then
	refs    int    // calls in flight
	retired bool   // no longer resolved: close when refs reaches 0
	closed  bool
}

// label is how errors name the member.
func (m *member) label() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.name == "" {
		return "sandboxd worker at " + m.addr
	}
	return "sandboxd worker " + m.name + " (" + m.addr + ")"
}

func (m *member) acquire() {
	m.mu.Lock()
	m.refs++
	m.mu.Unlock()
}

func (m *member) release() {
	m.mu.Lock()
	m.refs--
	closeNow := m.retired && m.refs == 0 && !m.closed
	if closeNow {
		m.closed = true
	}
	m.mu.Unlock()
	if closeNow {
		m.conn.Close()
	}
}

// retire closes the connection now when idle, else after its last call.
func (m *member) retire() {
	m.mu.Lock()
	m.retired = true
	closeNow := m.refs == 0 && !m.closed
	if closeNow {
		m.closed = true
	}
	m.mu.Unlock()
	if closeNow {
		m.conn.Close()
	}
}

// ready waits until the connection is ready, for at most the member's
// deadline. A connection that fails a fresh attempt fails at once; either
// way the error is UNAVAILABLE and names the worker.
func (m *member) ready(ctx context.Context) error {
	s := m.conn.GetState()
	if s == connectivity.Ready {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, m.deadline)
	defer cancel()
	// A worker that was down may be back: try now, not after the backoff.
	m.conn.ResetConnectBackoff()
	attempted := false
	for {
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			m.conn.Connect()
		case connectivity.Connecting:
			attempted = true
		case connectivity.TransientFailure:
			if attempted {
				return status.Errorf(codes.Unavailable, "%s is unreachable (connection failed)", m.label())
			}
		case connectivity.Shutdown:
			return status.Errorf(codes.Unavailable, "%s is no longer part of the fleet", m.label())
		}
		if !m.conn.WaitForStateChange(dctx, s) {
			if err := ctx.Err(); err != nil {
				return status.FromContextError(err).Err()
			}
			return status.Errorf(codes.Unavailable, "%s is unreachable (no connection within %s)", m.label(), m.deadline)
		}
		s = m.conn.GetState()
	}
}

// wrap names the worker in a transport failure (UNAVAILABLE without
// error details; a worker's own UNAVAILABLE answers carry details).
func (m *member) wrap(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable || len(st.Details()) > 0 {
		return err
	}
	return status.Errorf(codes.Unavailable, "%s is unreachable: %s", m.label(), st.Message())
}

func (m *member) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	m.acquire()
	defer m.release()
	if err := m.ready(ctx); err != nil {
		return err
	}
	return m.wrap(invoker(ctx, method, req, reply, cc, opts...))
}

func (m *member) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	m.acquire()
	if err := m.ready(ctx); err != nil {
		m.release()
		return nil, err
	}
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		m.release()
		return nil, m.wrap(err)
	}
	ws := &stream{ClientStream: s, m: m}
	// A stream ends with an error from RecvMsg or with its context.
	ws.stop = context.AfterFunc(s.Context(), ws.end)
	return ws, nil
}

// stream counts one call until it ends and names the worker in its
// transport failures.
type stream struct {
	grpc.ClientStream
	m    *member
	once sync.Once
	stop func() bool
}

func (s *stream) end() { s.once.Do(s.m.release) }

func (s *stream) RecvMsg(v any) error {
	err := s.ClientStream.RecvMsg(v)
	if err != nil {
		s.stop()
		s.end()
		if errors.Is(err, io.EOF) {
			return err
		}
		return s.m.wrap(err)
	}
	return nil
}

func (s *stream) SendMsg(v any) error {
	err := s.ClientStream.SendMsg(v)
	if err != nil && !errors.Is(err, io.EOF) {
		return s.m.wrap(err)
	}
	return err
}
