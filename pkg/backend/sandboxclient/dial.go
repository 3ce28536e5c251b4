package sandboxclient

import (
	"context"
	"io"
	"net"

	"github.com/plumbhq/plumb/pkg/backend"
)

// DialPort connects to 127.0.0.1:port inside the sandbox through its
// worker (a Process stream with a port: no network route to the box is
// needed) and returns the connection as a net.Conn. ctx bounds the
// connect only. The conn is one end of a net.Pipe (deadlines work) that
// two goroutines copy to and from the forward; closing it closes the
// forward, and the box closing its side ends reads with io.EOF.
func (b *Backend) DialPort(ctx context.Context, port int) (net.Conn, error) {
	p, err := b.StartProcess(ctx, backend.ProcessRequest{Port: port})
	if err != nil {
		return nil, err
	}
	ours, theirs := net.Pipe()
	go func() {
		// The box's bytes to the caller; the box closing ends the conn.
		_, _ = io.Copy(theirs, p.Stdout())
		_ = theirs.Close()
	}()
	go func() {
		// The caller's bytes to the box, until the caller closes.
		_, _ = io.Copy(p.Stdin(), theirs)
		_ = theirs.Close()
		_ = p.Close()
	}()
	return ours, nil
}
