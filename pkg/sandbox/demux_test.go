package sandbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/moby/moby/api/pkg/stdcopy"
)

// muxed returns the multiplexed stream Docker sends for the given
// writes, each a (stream, bytes) pair: one frame per write.
func muxed(t *testing.T, writes ...any) []byte {
	t.Helper()
	var b []byte
	for i := 0; i < len(writes); i += 2 {
		p := writes[i+1].(string)
		b = append(b, byte(writes[i].(int)), 0, 0, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

// TestDemuxReaderMatchesStdCopy reads the same stream with stdcopy (what
// dial used before) and the demuxer.
func TestDemuxReaderMatchesStdCopy(t *testing.T) {
	stream := muxed(t, muxStdout, "one", muxStderr, "err1", muxStdout, strings.Repeat("x", 70000), muxStderr, "err2", muxStdout, "end")
	var out1, err1 bytes.Buffer
	if _, err := stdcopy.StdCopy(&out1, &err1, bytes.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	var err2 bytes.Buffer
	out2, err := io.ReadAll(newDemuxReader(bytes.NewReader(stream), &err2))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out1.Bytes(), out2) || err1.String() != err2.String() {
		t.Errorf("demuxer: stdout %d bytes, stderr %q; stdcopy: %d bytes, %q", len(out2), err2.String(), out1.Len(), err1.String())
	}
}

func TestDemuxReader(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 5000)
	tests := []struct {
		name           string
		stream         []byte
		stdout, stderr string
		err            error
	}{
		{name: "empty", stream: nil, err: io.EOF},
		{name: "stdout", stream: muxed(t, muxStdout, "hello\n", muxStdout, "world\n"), stdout: "hello\nworld\n", err: io.EOF},
		{name: "interleaved", stream: muxed(t, muxStdout, "a", muxStderr, "oops", muxStdout, big, muxStderr, "again"), stdout: "a" + big, stderr: "oopsagain", err: io.EOF},
		{name: "empty frame", stream: append([]byte{muxStdout, 0, 0, 0, 0, 0, 0, 0}, muxed(t, muxStdout, "x")...), stdout: "x", err: io.EOF},
		{name: "stdin frame counts as stdout", stream: []byte{muxStdin, 0, 0, 0, 0, 0, 0, 2, 'h', 'i'}, stdout: "hi", err: io.EOF},
		{name: "cut header", stream: append(muxed(t, muxStdout, "ok"), muxStdout, 0, 0), stdout: "ok", err: io.ErrUnexpectedEOF},
		{name: "cut payload", stream: muxed(t, muxStdout, "hello")[:10], stdout: "he", err: io.ErrUnexpectedEOF},
		{name: "cut stderr", stream: muxed(t, muxStderr, "hello")[:10], stderr: "he", err: io.ErrUnexpectedEOF},
		{name: "unknown stream", stream: []byte{9, 0, 0, 0, 0, 0, 0, 1, 'x'}, err: errors.New("docker attach stream: unknown stream id 9")},
		{name: "system error", stream: append(muxed(t, muxStdout, "ok"), muxSystemErr, 0, 0, 0, 0, 0, 0, 4, 'b', 'o', 'o', 'm'), stdout: "ok", err: errors.New("docker attach stream: boom")},
	}
	for _, tc := range tests {
		for _, wrap := range []struct {
			name string
			f    func(io.Reader) io.Reader
		}{{"whole", func(r io.Reader) io.Reader { return r }}, {"one byte", iotest.OneByteReader}, {"data+eof", iotest.DataErrReader}} {
			t.Run(tc.name+"/"+wrap.name, func(t *testing.T) {
				var stderr bytes.Buffer
				d := newDemuxReader(wrap.f(bytes.NewReader(tc.stream)), &stderr)
				var stdout bytes.Buffer
				buf := make([]byte, 7)
				var err error
				for {
					var n int
					n, err = d.Read(buf)
					stdout.Write(buf[:n])
					if err != nil {
						break
					}
				}
				if got := stdout.String(); got != tc.stdout {
					t.Errorf("stdout %q…, want %q…", trunc(got), trunc(tc.stdout))
				}
				if got := stderr.String(); got != tc.stderr {
					t.Errorf("stderr %q, want %q", got, tc.stderr)
				}
				if err == nil || err.Error() != tc.err.Error() {
					t.Errorf("error %v, want %v", err, tc.err)
				}
				// The error is sticky.
				if n, err2 := d.Read(buf); n != 0 || err2 == nil || err2.Error() != err.Error() {
					t.Errorf("read after the end: %d, %v; want 0, %v", n, err2, err)
				}
			})
		}
	}
}

// TestDemuxReaderInPlace checks that a stdout payload reaches the caller's
// buffer in one read of the underlying reader when the buffer is large
// enough, never more than the frame holds.
func TestDemuxReaderInPlace(t *testing.T) {
	payload := strings.Repeat("z", 1<<16)
	stream := muxed(t, muxStdout, payload, muxStdout, "tail")
	d := newDemuxReader(bytes.NewReader(stream), io.Discard)
	buf := make([]byte, 1<<20)
	n, err := d.Read(buf)
	if err != nil || n != len(payload) {
		t.Fatalf("first read: %d, %v; want %d, nil", n, err, len(payload))
	}
	n, err = d.Read(buf)
	if err != nil || string(buf[:n]) != "tail" {
		t.Fatalf("second read: %q, %v; want \"tail\", nil", buf[:n], err)
	}
}

func trunc(s string) string { return s[:min(len(s), 40)] }
