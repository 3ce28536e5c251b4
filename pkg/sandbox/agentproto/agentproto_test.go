package agentproto

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	payload := []byte{0, 1, '\n', 0xff}
	if err := w.Write(Response{ID: 7, Event: EventOutput, Data: payload}); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(Result(7, backend.WriteResult{Path: "/a", BytesWritten: 4, Created: true})); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(Failure(8, backend.Errorf(backend.CodeFileNotFound, "/x", "read /x: no such file"))); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(buf.Bytes(), []byte(`{"id":7,"event":"output","bin":4}`+"\n\x00\x01\n\xff{")) {
		t.Fatalf("frames %q: want the payload raw after its header", buf.Bytes())
	}
	r := NewReader(&buf, 0)
	var got []Response
	for {
		f, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		resp, err := DecodeResponse(f)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Bin > 0 {
			if resp.Data, err = r.ReadPayload(resp.Bin); err != nil {
				t.Fatal(err)
			}
		}
		got = append(got, resp)
	}
	if len(got) != 3 || !bytes.Equal(got[0].Data, payload) || !got[1].Done || got[2].Error.Code != backend.CodeFileNotFound {
		t.Fatalf("got %+v", got)
	}
}

func TestReaderLimits(t *testing.T) {
	tests := []struct {
		name    string
		input   string
		max     int
		want    []string
		wantErr error
	}{
		{"two frames", "{\"a\":1}\n{}\n", 16, []string{`{"a":1}`, `{}`}, io.EOF},
		{"crlf tolerated", "{}\r\n", 16, []string{`{}`}, io.EOF},
		{"exactly max", strings.Repeat("x", 16) + "\n", 16, []string{strings.Repeat("x", 16)}, io.EOF},
		{"over max", strings.Repeat("x", 17) + "\n", 16, nil, ErrFrameTooLarge},
		{"huge without newline", strings.Repeat("x", 1<<20), 1024, nil, ErrFrameTooLarge},
		{"unterminated", "{}", 16, nil, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tt.input), tt.max)
			var got []string
			var err error
			for {
				var f []byte
				f, err = r.Next()
				if err != nil {
					break
				}
				got = append(got, string(f))
			}
			if !errors.Is(err, tt.wantErr) || strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("frames %q err %v; want %q err %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	bad := []string{
		``, `null`, `[]`, `{"id":1}`, `{"id":0,"done":true}`, `{"id":1,"done":true,"event":"chunk"}`,
		`{"id":1,"done":true,"surprise":1}`, `{"id":1,"done":true}{"id":2}`, `{"id":1,"done":true,"error":{"message":"x"}}`,
		`{"id":1,"event":"chunk","data":"not base64!"}`, `{"id":-1,"done":true}`, `{"id":1,"done":true,"bin":-1}`,
	}
	for _, in := range bad {
		if _, err := DecodeResponse([]byte(in)); err == nil {
			t.Errorf("DecodeResponse(%q) accepted a malformed frame", in)
		}
	}
	for _, in := range []string{`{"id":1}`, `{"op":"ls"}`, `{"id":1,"op":"ls","x":1}`} {
		if _, err := DecodeRequest([]byte(in)); err == nil {
			t.Errorf("DecodeRequest(%q) accepted a malformed frame", in)
		}
	}
}

func TestWriterRefusesOversizedFrames(t *testing.T) {
	var buf bytes.Buffer
	err := NewWriter(&buf).Write(Response{ID: 1, Event: EventOutput, Data: make([]byte, ChunkBytes+1)})
	if !errors.Is(err, ErrFrameTooLarge) || buf.Len() != 0 {
		t.Fatalf("err = %v, wrote %d bytes", err, buf.Len())
	}
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"id":1,"done":true,"result":{"path":"/a"}}`))
	f.Add([]byte(`{"id":2,"event":"output","bin":2}`))
	f.Add([]byte(`{"id":3,"done":true,"error":{"code":"invalid_path","message":"x"}}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		resp, err := DecodeResponse(frame)
		if err != nil {
			return
		}
		if resp.ID == 0 || resp.Done == (resp.Event != "") {
			t.Fatalf("accepted invalid frame %q as %+v", frame, resp)
		}
		// Anything accepted must survive a re-encode.
		var buf bytes.Buffer
		if err := NewWriter(&buf).Write(resp); err != nil {
			t.Fatal(err)
		}
		f, err := NewReader(&buf, 0).Next()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeResponse(f); err != nil {
			t.Fatalf("re-encoded frame rejected: %v", err)
		}
	})
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("{}\n{}\n"), 8)
	f.Add([]byte("xxxxxxxxxxxxxxxxxxxxxx\n"), 4)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max <= 0 || max > 1<<16 {
			max = 64
		}
		r := NewReader(bytes.NewReader(in), max)
		for i := 0; i <= len(in); i++ {
			fr, err := r.Next()
			if err != nil {
				return
			}
			if len(fr) > max || bytes.IndexByte(fr, '\n') >= 0 {
				t.Fatalf("frame of %d bytes (max %d) or with newline", len(fr), max)
			}
		}
	})
}

// TestReaderReleasesLargeBuffers: after a frame larger than RetainBytes
// the reader drops its buffer, and Grow is told about every byte beyond
// RetainBytes.
func TestReaderReleasesLargeBuffers(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	r := NewReader(strings.NewReader(big+"\n"+"small\n"), 0)
	grown := 0
	r.Grow = func(n int) error { grown += n; return nil }
	if f, err := r.Next(); err != nil || len(f) != len(big) {
		t.Fatalf("big frame: %d bytes, %v", len(f), err)
	}
	if want := len(big) + 1 - RetainBytes; grown != want {
		t.Fatalf("grow told %d bytes, want %d", grown, want)
	}
	if f, err := r.Next(); err != nil || string(f) != "small" {
		t.Fatalf("small frame: %q, %v", f, err)
	}
	if cap(r.buf) > RetainBytes {
		t.Fatalf("reader keeps %d bytes after a small frame", cap(r.buf))
	}
}

func TestReaderGrowRefuses(t *testing.T) {
	refused := errors.New("no")
	r := NewReader(strings.NewReader(strings.Repeat("x", 200<<10)+"\n"), 0)
	r.Grow = func(int) error { return refused }
	if _, err := r.Next(); !errors.Is(err, refused) {
		t.Fatalf("Next = %v, want the Grow error", err)
	}
}

// TestWriterDeadline: a write to a conn nobody reads ends at the default
// deadline; waiting for another writer ends with the context.
func TestWriterDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	w := NewWriter(a)
	if err := w.WriteContext(context.Background(), Request{ID: 1, Op: OpHello}, 50*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a stuck reader: %v", err)
	}
	w.sem <- struct{}{} // another writer holds the stream
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.WriteContext(ctx, Request{ID: 2, Op: OpHello}, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("write while another writes: %v", err)
	}
}

// deadlines records the write deadlines set on it.
type deadlines struct {
	bytes.Buffer
	set []time.Time
}

func (d *deadlines) SetWriteDeadline(t time.Time) error {
	d.set = append(d.set, t)
	return nil
}

// TestWriterStandingDeadline: writes bounded by a default leave one
// deadline in place until less than half of it is left, rather than set
// and clear one around each write; a context's deadline bounds its own
// write, and a write without a bound clears what is left.
func TestWriterStandingDeadline(t *testing.T) {
	d := &deadlines{}
	w := NewWriter(d)
	write := func(ctx context.Context, def time.Duration) {
		t.Helper()
		if err := w.WriteContext(ctx, Request{ID: 1, Op: OpHello}, def); err != nil {
			t.Fatal(err)
		}
	}
	const def = time.Hour
	before := time.Now()
	for range 100 {
		write(context.Background(), def)
	}
	if len(d.set) != 1 || d.set[0].Before(before.Add(def)) || d.set[0].After(time.Now().Add(def)) {
		t.Fatalf("100 writes set %v, want one deadline an hour away", d.set)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dl, _ := ctx.Deadline()
	write(ctx, def)
	write(context.Background(), def) // the context's is not def's: set anew
	write(context.Background(), 0)   // no bound: cleared
	write(context.Background(), 0)
	if got := d.set[1:]; len(got) != 3 || !got[0].Equal(dl) || got[1].Sub(dl) < 50*time.Minute || !got[2].IsZero() {
		t.Fatalf("deadlines %v, want the context's, one an hour away, none", got)
	}
	d.set = nil
	write(context.Background(), 20*time.Millisecond)
	time.Sleep(15 * time.Millisecond) // less than half is left (or none)
	write(context.Background(), 20*time.Millisecond)
	if len(d.set) != 2 || !d.set[1].After(d.set[0]) {
		t.Fatalf("deadlines %v, want the second moved later", d.set)
	}
}

func TestLimitsTable(t *testing.T) {
	for _, op := range []Op{OpHello, OpLs, OpRead, OpWrite, OpEdit, OpDelete, OpGrep, OpGlob, OpExecute, OpUploadOpen, OpUploadChunk, OpUploadClose, OpDownloadOpen, OpDownloadRead, OpDownloadClose, OpCancel} {
		l, ok := LimitsOf(op)
		if !ok || l.FinalBytes < SmallFrameBytes || l.FinalBytes > MaxFrameBytes || l.EventBytes > MaxFrameBytes || (len(l.Events) > 0) != (l.EventBytes > 0) {
			t.Errorf("%s: %+v, %v", op, l, ok)
		}
	}
	if l := ExecuteLimits(ExecuteArgs{}); l.Allows(EventOutput) || l.FinalBytes < backend.ExecuteInlineOutput {
		t.Errorf("non-streaming execute: %+v", l)
	}
	if l := ExecuteLimits(ExecuteArgs{Stream: true, ExecuteRequest: backend.ExecuteRequest{MaxOutputBytes: MaxInlineOutput}}); !l.Allows(EventOutput) || l.FinalBytes < MaxInlineOutput*6 {
		t.Errorf("streaming execute: %+v", l)
	}
}
