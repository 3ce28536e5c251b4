package boxagent

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
)

// renderOf feeds stream to an output in writes of chunk bytes.
func renderOf(stream []byte, max, chunk int) (string, bool) {
	o := newOutput(max, nil)
	for len(stream) > 0 {
		n := min(chunk, len(stream))
		o.write(stream[:n])
		stream = stream[n:]
	}
	return o.render()
}

// splitRendered parses a truncated rendering into head, omitted count and
// tail; the head loses the newline added before the marker, if any.
func splitRendered(t *testing.T, out string, stream []byte) (head string, omitted int, tail string) {
	t.Helper()
	loc := markerRE.FindStringSubmatchIndex(out)
	if loc == nil {
		t.Fatalf("no marker in %q", out)
	}
	head, tail = out[:loc[0]], out[loc[1]:]
	omitted, _ = strconv.Atoi(out[loc[2]:loc[3]])
	if !strings.HasPrefix(string(sanitize(nil, stream)), head) {
		head = strings.TrimSuffix(head, "\n")
	}
	return head, omitted, tail
}

func TestOutputRender(t *testing.T) {
	ascii := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a' + byte(i%26)
		}
		return b
	}
	tests := []struct {
		name      string
		stream    []byte
		max       int
		chunk     int
		want      string // exact output when not truncated
		truncated bool
	}{
		{name: "empty", stream: nil, max: 100, chunk: 1, want: ""},
		{name: "under the limit", stream: []byte("hello\n"), max: 100, chunk: 2, want: "hello\n"},
		{name: "exactly the limit", stream: ascii(100), max: 100, chunk: 7, want: string(ascii(100))},
		{name: "one over", stream: ascii(1001), max: 1000, chunk: 1001, truncated: true},
		{name: "long stream, small writes", stream: ascii(50000), max: 1000, chunk: 3, truncated: true},
		{name: "long stream, huge write", stream: ascii(50000), max: 1000, chunk: 50000, truncated: true},
		{name: "multibyte chars cut at boundaries", stream: bytes.Repeat([]byte("é€😀"), 1000), max: 1001, chunk: 13, truncated: true},
		{name: "invalid bytes become U+FFFD", stream: []byte("a\xffb"), max: 100, chunk: 1, want: "a\uFFFDb"},
		{name: "a char split across writes", stream: []byte("x€y"), max: 100, chunk: 1, want: "x€y"},
		{name: "sanitizing pushes it over the limit", stream: bytes.Repeat([]byte{0xff}, 600), max: 1000, chunk: 64, truncated: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, truncated := renderOf(tt.stream, tt.max, tt.chunk)
			if truncated != tt.truncated {
				t.Fatalf("truncated %v, want %v", truncated, tt.truncated)
			}
			if !utf8.ValidString(out) {
				t.Fatalf("output is not valid UTF-8: %q", out)
			}
			if !truncated {
				if out != tt.want {
					t.Fatalf("output %q, want %q", out, tt.want)
				}
				return
			}
			if len(out) > tt.max {
				t.Fatalf("output is %d bytes, over %d", len(out), tt.max)
			}
			head, omitted, tail := splitRendered(t, out, tt.stream)
			clean := string(sanitize(nil, tt.stream))
			if !strings.HasPrefix(clean, head) || !strings.HasSuffix(clean, tail) {
				t.Fatalf("head %q or tail %q is not from the stream", head, tail)
			}
			if utf8.Valid(tt.stream) && len(head)+omitted+len(tail) != len(tt.stream) {
				t.Fatalf("head %d + omitted %d + tail %d != %d", len(head), omitted, len(tail), len(tt.stream))
			}
			if len(head) < tt.max/4 || len(tail) < tt.max/4 {
				t.Fatalf("head %d and tail %d bytes should each be near half of %d", len(head), len(tail), tt.max)
			}
		})
	}
}

func TestOutputCapture(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "off"))
	if err != nil {
		t.Fatal(err)
	}
	o := newOutput(10, f)
	o.write(bytes.Repeat([]byte("z"), backend.ExecuteCaptureMax-1))
	o.write([]byte("ab"))
	o.write([]byte("cd"))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(f.Name())
	if err != nil || fi.Size() != backend.ExecuteCaptureMax || !o.captureTruncated || o.total != backend.ExecuteCaptureMax+3 {
		t.Fatalf("file %d bytes (err %v), capture_truncated %v, total %d", fi.Size(), err, o.captureTruncated, o.total)
	}
}

// FuzzOutputRender checks the rendering invariants for any stream, limit
// and write size.
func FuzzOutputRender(f *testing.F) {
	f.Add([]byte("hello world"), uint16(5), uint8(3))
	f.Add(bytes.Repeat([]byte("é€😀\xff"), 300), uint16(200), uint8(7))
	f.Add(bytes.Repeat([]byte{0xf0, 0x9f}, 500), uint16(120), uint8(1))
	f.Fuzz(func(t *testing.T, stream []byte, max16 uint16, chunk8 uint8) {
		reserve := len(markerLine(1<<63-1)) + 1
		max := reserve + int(max16)%2000
		chunk := int(chunk8) + 1
		out, truncated := renderOf(stream, max, chunk)
		clean := string(sanitize(nil, stream))
		if !utf8.ValidString(out) {
			t.Fatalf("invalid UTF-8 output %q", out)
		}
		if !truncated {
			if out != clean {
				t.Fatalf("untruncated output %q, want %q", out, clean)
			}
			return
		}
		if len(clean) <= max {
			t.Fatalf("truncated although the sanitized stream (%d bytes) fits in %d", len(clean), max)
		}
		if len(out) > max {
			t.Fatalf("output %d bytes over %d", len(out), max)
		}
		head, omitted, tail := splitRendered(t, out, stream)
		if !strings.HasPrefix(clean, head) {
			t.Fatalf("head %q is not a prefix", head)
		}
		if omitted <= 0 || omitted > len(stream) {
			t.Fatalf("omitted %d of %d bytes", omitted, len(stream))
		}
		if utf8.Valid(stream) {
			if !strings.HasSuffix(clean, tail) || len(head)+omitted+len(tail) != len(stream) {
				t.Fatalf("head %d + omitted %d + tail %d != %d, or tail not a suffix", len(head), omitted, len(tail), len(stream))
			}
		}
	})
}
