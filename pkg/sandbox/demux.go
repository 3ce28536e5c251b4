package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/moby/moby/client"
)

// Docker's multiplexed attach stream (a container or exec without a TTY):
// every write of the process becomes a frame of an 8-byte header — the
// stream (0 stdin, 1 stdout, 2 stderr, 3 a daemon error), three zero bytes,
// the payload's length as a big-endian uint32 — followed by the payload.
const (
	muxHeaderBytes = 8
	muxStdin       = 0
	muxStdout      = 1
	muxStderr      = 2
	muxSystemErr   = 3
	// muxErrorBytes bounds the daemon error message kept from a
	// system-error frame; the rest of the frame is skipped.
	muxErrorBytes = 4 << 10
)

// attachSendBuffer is the socket send buffer asked for on an agent's
// attach connection (the kernel caps it at net.core.wmem_max): upload
// chunks then queue at dockerd in larger runs while it copies them on.
const attachSendBuffer = 4 << 20

// attachStream is the agent channel over a hijacked attach connection
// of a process without a TTY: frames are written to the connection and
// read from its demultiplexed stdout; stderr goes to errw.
func attachStream(att client.HijackedResponse, errw io.Writer) stream {
	if c, ok := att.Conn.(interface{ SetWriteBuffer(int) error }); ok {
		_ = c.SetWriteBuffer(attachSendBuffer) // best effort: only speed
	}
	return stream{
		r: newDemuxReader(att.Reader, errw),
		w: att.Conn,
		c: closerFunc(func() error { att.Close(); return nil }),
	}
}

// demuxReader is the stdout of a multiplexed attach stream, read in place:
// the payload of each stdout frame is read from the underlying reader
// straight into the caller's buffer, and only the 8-byte headers are
// consumed on the way. stdcopy.StdCopy into an io.Pipe did the same with
// one more copy of every byte and a goroutine hop per frame; the agent
// channel's bulk payloads (1 MiB chunks) now reach their buffer with
// the socket read as their only copy. Stderr frames go to errw (the
// agent's diagnostics). It is not safe for concurrent use: the channel's
// read loop is its only reader.
type demuxReader struct {
	r    io.Reader
	errw io.Writer
	left int // stdout payload bytes left in the current frame
	hdr  [muxHeaderBytes]byte
	err  error // sticky: the stream is unusable after it
}

// newDemuxReader reads the stdout of the multiplexed stream r; stderr
// frames are copied to errw.
func newDemuxReader(r io.Reader, errw io.Writer) *demuxReader {
	return &demuxReader{r: r, errw: errw}
}

// Read reads stdout payload bytes, never more than the current frame
// holds, so a large p is filled by the underlying reader directly.
func (d *demuxReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for d.left == 0 {
		if d.err != nil {
			return 0, d.err
		}
		if err := d.nextFrame(); err != nil {
			d.err = err
			return 0, err
		}
	}
	n, err := d.r.Read(p[:min(len(p), d.left)])
	d.left -= n
	switch {
	case err == nil:
	case errors.Is(err, io.EOF) && d.left == 0:
		// The frame is complete; the next header read reports the end.
		err = nil
	case errors.Is(err, io.EOF):
		err = io.ErrUnexpectedEOF
		d.err = err
	default:
		d.err = err
	}
	return n, err
}

// nextFrame reads one header and handles every frame that is not stdout,
// leaving d.left at the length of a stdout frame (which may be 0).
func (d *demuxReader) nextFrame() error {
	if _, err := io.ReadFull(d.r, d.hdr[:]); err != nil {
		return err // io.EOF at a frame boundary: the stream ended cleanly
	}
	n := int64(binary.BigEndian.Uint32(d.hdr[4:]))
	switch d.hdr[0] {
	case muxStdout, muxStdin:
		// stdcopy writes stdin frames to stdout too.
		d.left = int(n)
		return nil
	case muxStderr:
		if _, err := io.CopyN(d.errw, d.r, n); err != nil {
			return eofUnexpected(err)
		}
		return nil
	case muxSystemErr:
		msg := make([]byte, min(n, muxErrorBytes))
		if _, err := io.ReadFull(d.r, msg); err != nil {
			return eofUnexpected(err)
		}
		if _, err := io.CopyN(io.Discard, d.r, n-int64(len(msg))); err != nil {
			return eofUnexpected(err)
		}
		return fmt.Errorf("docker attach stream: %s", msg)
	default:
		return fmt.Errorf("docker attach stream: unknown stream id %d", d.hdr[0])
	}
}

// eofUnexpected turns an EOF inside a frame into io.ErrUnexpectedEOF.
func eofUnexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
