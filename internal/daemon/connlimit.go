package daemon

import (
	"net"
	"sync"
)

// Connection limits of the gRPC listener (Options.MaxConns,
// Options.MaxConnsPerPeer). A connection costs the server memory before
// any call on it is authenticated (its HTTP/2 buffers, a TLS handshake),
// so their number is bounded, per peer and in total.
const (
	DefaultMaxConns        = 4096
	DefaultMaxConnsPerPeer = 256
)

// limitListener accepts at most total connections at a time, and at most
// perPeer from one remote IP address. A connection over either limit is
// closed as soon as it is accepted (a client sees the connection reset),
// so that a full server does not leave clients waiting in the backlog. A
// connection's slot is freed when the server closes it.
type limitListener struct {
	net.Listener
	total, perPeer int
	// refused, if set, is told of each connection closed over a limit:
	// "peer" or "total".
	refused func(reason string)

	mu     sync.Mutex
	open   int
	byPeer map[string]int
}

func newLimitListener(l net.Listener, total, perPeer int, refused func(string)) *limitListener {
	return &limitListener{Listener: l, total: total, perPeer: perPeer, refused: refused, byPeer: map[string]int{}}
}

// Accept returns the next connection within the limits.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := peerHost(c.RemoteAddr())
		if reason := l.take(peer); reason != "" {
			if l.refused != nil {
				l.refused(reason)
			}
			c.Close()
			continue
		}
		return &limitedConn{Conn: c, release: func() { l.release(peer) }}, nil
	}
}

// take reserves a slot for peer, or says which limit is full.
func (l *limitListener) take(peer string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.byPeer[peer] >= l.perPeer:
		return "peer"
	case l.open >= l.total:
		return "total"
	}
	l.open++
	l.byPeer[peer]++
	return ""
}

func (l *limitListener) release(peer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byPeer[peer]--; l.byPeer[peer] <= 0 {
		delete(l.byPeer, peer)
	}
}

// peerHost is the IP address of a remote address (its port dropped: one
// host opens many connections from many ports).
func peerHost(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// limitedConn frees its listener slot once, on the first Close.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
