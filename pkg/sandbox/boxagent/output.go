package boxagent

import (
	"os"
	"strconv"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// chunkBytes bounds one output event.
const chunkBytes = agentproto.ChunkBytes

// output captures a command's output stream in bounded memory: the first
// max bytes and a ring of the last max bytes, never the whole stream. That
// is enough to render either all of it (when it fits) or its head and tail.
// It also copies the stream to the offload file, up to
// backend.ExecuteCaptureMax bytes.
//
// Only the reading goroutine writes; render runs after it has finished.
type output struct {
	max   int
	head  []byte
	ring  []byte // allocated when the head is full
	rpos  int    // next write position in ring
	rlen  int    // bytes held in ring
	total int64

	off              *os.File
	offWritten       int64
	captureTruncated bool
}

func newOutput(max int, off *os.File) *output {
	return &output{max: max, head: make([]byte, 0, min(max, readBufBytes)), off: off}
}

func (o *output) write(p []byte) {
	o.total += int64(len(p))
	o.capture(p)
	if room := o.max - len(o.head); room > 0 {
		n := min(room, len(p))
		o.head = append(o.head, p[:n]...)
		p = p[n:]
	}
	if len(p) == 0 {
		return
	}
	if o.ring == nil {
		o.ring = make([]byte, o.max)
	}
	if len(p) >= len(o.ring) {
		copy(o.ring, p[len(p)-len(o.ring):])
		o.rpos, o.rlen = 0, len(o.ring)
		return
	}
	n := copy(o.ring[o.rpos:], p)
	copy(o.ring, p[n:])
	o.rpos = (o.rpos + len(p)) % len(o.ring)
	o.rlen = min(o.rlen+len(p), len(o.ring))
}

// capture appends p to the offload file. A write error ends the capture,
// which is then reported like a capture cut at the size limit.
func (o *output) capture(p []byte) {
	if o.off == nil || o.captureTruncated {
		return
	}
	n := min(int64(len(p)), backend.ExecuteCaptureMax-o.offWritten)
	if n > 0 {
		if _, err := o.off.Write(p[:n]); err != nil {
			o.captureTruncated = true
			return
		}
		o.offWritten += n
	}
	if n < int64(len(p)) {
		o.captureTruncated = true
	}
}

// tail returns the ring's bytes in stream order.
func (o *output) tail() []byte {
	if o.rlen < len(o.ring) {
		return o.ring[:o.rlen]
	}
	t := make([]byte, 0, len(o.ring))
	t = append(t, o.ring[o.rpos:]...)
	return append(t, o.ring[:o.rpos]...)
}

// render returns the output for the result: all of it, UTF-8-sanitized,
// when that fits in max bytes; otherwise as much of the head and the tail
// as fits, cut at character boundaries, around a marker line that counts
// the omitted bytes, and truncated=true. The result never exceeds max
// bytes unless max is too small for the marker itself.
func (o *output) render() (string, bool) {
	var whole []byte // the complete stream, when memory still holds it
	if o.total == int64(len(o.head)+o.rlen) {
		whole = append(o.head[:len(o.head):len(o.head)], o.tail()...)
		if sanitizedLen(whole) <= o.max {
			return string(sanitize(nil, whole)), false
		}
	}
	reserve := len(markerLine(1<<63-1)) + 1
	avail := max(o.max-reserve, 0)
	hb, tb := avail/2, avail-avail/2

	hn := prefixFit(o.head, hb)
	src := o.tail()
	if whole != nil {
		src = whole[hn:]
	}
	ts := suffixFit(src, tb)
	omitted := o.total - int64(hn) - int64(len(src)-ts)

	b := make([]byte, 0, o.max)
	b = sanitize(b, o.head[:hn])
	if len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n')
	}
	b = append(b, markerLine(omitted)...)
	b = sanitize(b, src[ts:])
	return string(b), true
}

// markerLine is the line that stands in for the omitted middle.
func markerLine(omitted int64) string {
	return "[... " + strconv.FormatInt(omitted, 10) + " bytes of output omitted ...]\n"
}

// runeCost decodes the first character of b and returns its byte length in
// b and in the sanitized output (an invalid byte becomes U+FFFD, 3 bytes).
func runeCost(b []byte) (n, cost int) {
	if b[0] < utf8.RuneSelf {
		return 1, 1
	}
	r, n := utf8.DecodeRune(b)
	if r == utf8.RuneError && n == 1 {
		return 1, len(string(utf8.RuneError))
	}
	return n, n
}

// sanitize appends src to dst with each byte of an invalid UTF-8 sequence
// replaced by U+FFFD (the decoding of a Go range loop).
func sanitize(dst, src []byte) []byte {
	if utf8.Valid(src) {
		return append(dst, src...)
	}
	for len(src) > 0 {
		n, cost := runeCost(src)
		if cost != n {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, src[:n]...)
		}
		src = src[n:]
	}
	return dst
}

// sanitizedLen is len(sanitize(nil, b)).
func sanitizedLen(b []byte) int {
	if utf8.Valid(b) {
		return len(b)
	}
	total := 0
	for len(b) > 0 {
		n, cost := runeCost(b)
		total += cost
		b = b[n:]
	}
	return total
}

// prefixFit returns the length of the longest prefix of b that ends at a
// character boundary and sanitizes to at most budget bytes.
func prefixFit(b []byte, budget int) int {
	i, used := 0, 0
	for i < len(b) {
		n, cost := runeCost(b[i:])
		if used+cost > budget {
			break
		}
		i, used = i+n, used+cost
	}
	return i
}

// suffixFit returns the start of the longest suffix of b that begins at a
// character boundary and sanitizes to at most budget bytes. Dropping the
// first decoded character of a suffix leaves the decoding of the rest
// unchanged, so the cost can be updated as the start advances.
func suffixFit(b []byte, budget int) int {
	start := max(len(b)-budget, 0) // sanitizing never shrinks
	for i := 0; i < utf8.UTFMax-1 && start < len(b) && !utf8.RuneStart(b[start]); i++ {
		start++ // do not begin inside a character
	}
	cost := sanitizedLen(b[start:])
	for cost > budget && start < len(b) {
		n, c := runeCost(b[start:])
		start, cost = start+n, cost-c
	}
	return start
}
