package agent

import (
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/model"
)

// Live streaming of tool calls: the arguments the model is writing
// (tool_call_delta) and the output of a running tool (tool_output). Both
// are coalesced, so that a chatty provider or command costs clients a few
// events a second rather than one per chunk, and capped per call, so that
// a huge write or a command printing gigabytes cannot flood the streams
// and replay logs: past the cap, the last event says Truncated and nothing
// more is streamed for that call. Nothing is lost: the AssistantMessage
// and the tool_result carry what the model sent and sees.
const (
	// StreamArgsCap caps the argument text streamed per tool call.
	StreamArgsCap = 256 << 10
	// StreamOutputCap caps the output streamed per tool call.
	StreamOutputCap = 1 << 20

	// argsChunk: a call's fragments are held until this much text is
	// pending (or the model call ends). By size only, not time: a model
	// writes a few hundred characters a second, so a client still sees
	// progress about every second, and the events of a run do not depend
	// on the machine's speed.
	argsChunk = 256
	// outputChunk and outputWait: output is held until this much is
	// pending or this long has passed since the first pending byte.
	outputChunk = 8 << 10
	outputWait  = 200 * time.Millisecond
)

// argStream coalesces the tool-call fragments of one model call into
// ToolCallDelta events. It is used from the model call's goroutine only.
type argStream struct {
	rc      *RunContext
	step    int
	attempt int
	calls   map[int]*argCall
}

// argCall is the streaming state of one call.
type argCall struct {
	id, name         string
	idSent, nameSent bool
	pending          strings.Builder
	sent             int
	done             bool
}

func newArgStream(rc *RunContext, step int) *argStream {
	return &argStream{rc: rc, step: step, calls: map[int]*argCall{}}
}

// add takes the fragments of one delta.
func (s *argStream) add(attempt int, ds []model.ToolCallDelta) {
	if attempt != s.attempt {
		// A retry restarts the output: what was pending belongs to the
		// abandoned attempt.
		s.calls, s.attempt = map[int]*argCall{}, attempt
	}
	for _, d := range ds {
		c := s.calls[d.Index]
		if c == nil {
			c = &argCall{}
			s.calls[d.Index] = c
		}
		if c.done {
			continue
		}
		if d.ID != "" {
			c.id = d.ID
		}
		if d.Name != "" {
			c.name = d.Name
		}
		c.pending.WriteString(d.Args)
		newMeta := (c.id != "" && !c.idSent) || (c.name != "" && !c.nameSent)
		if newMeta || c.pending.Len() >= argsChunk {
			s.flush(d.Index, c)
		}
	}
}

// flush emits what is pending for every call, in call order.
func (s *argStream) flushAll() {
	for i := 0; len(s.calls) > 0 && i <= maxKey(s.calls); i++ {
		if c := s.calls[i]; c != nil && !c.done {
			s.flush(i, c)
		}
	}
}

func maxKey(m map[int]*argCall) int {
	n := 0
	for k := range m {
		n = max(n, k)
	}
	return n
}

func (s *argStream) flush(i int, c *argCall) {
	ev := ToolCallDelta{Index: i, Step: s.step, Attempt: s.attempt, Args: c.pending.String()}
	if !c.idSent && c.id != "" {
		ev.ID, c.idSent = c.id, true
	}
	if !c.nameSent && c.name != "" {
		ev.Name, c.nameSent = c.name, true
	}
	if ev.Args == "" && ev.ID == "" && ev.Name == "" {
		return
	}
	if c.sent+len(ev.Args) > StreamArgsCap {
		ev.Args, ev.Truncated, c.done = cutUTF8(ev.Args, StreamArgsCap-c.sent), true, true
	}
	c.pending.Reset()
	c.sent += len(ev.Args)
	s.rc.Emit(ev)
}

// cutUTF8 returns the longest prefix of s of at most n bytes that ends on
// a character boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// OutputStream turns the output of a running tool call into ToolOutput
// events: coalesced, cut at character boundaries, capped at
// StreamOutputCap. Write may be called from any goroutine; Close flushes
// the rest and must be called before the tool returns, so that every
// tool_output precedes the call's tool_result.
type OutputStream struct {
	rc       *RunContext
	id, name string

	mu      sync.Mutex
	pending []byte
	sent    int
	timer   *time.Timer
	closed  bool
	done    bool
}

// newOutputStream returns the output stream of call in rc (tools get it
// from ToolRequest.OutputStream, which honours HoldOutput).
func newOutputStream(rc *RunContext, call model.ToolCall) *OutputStream {
	return &OutputStream{rc: rc, id: call.ID, name: call.Name}
}

// Write queues p for streaming. It never fails: streaming is best effort
// and must not stop the tool.
func (o *OutputStream) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || o.done {
		return len(p), nil
	}
	o.pending = append(o.pending, p...)
	switch {
	case len(o.pending) >= outputChunk:
		o.flushLocked(false)
	case o.timer == nil:
		o.timer = time.AfterFunc(outputWait, o.tick)
	}
	return len(p), nil
}

// tick flushes what a quiet command left pending.
func (o *OutputStream) tick() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.timer = nil
	if !o.closed {
		o.flushLocked(false)
	}
}

// Close flushes the rest (an incomplete character at the very end is
// replaced) and stops streaming.
func (o *OutputStream) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	if o.timer != nil {
		o.timer.Stop()
		o.timer = nil
	}
	o.flushLocked(true)
	o.closed = true
}

// flushLocked emits the pending output up to its last complete character
// (all of it when final). Called with o.mu held.
func (o *OutputStream) flushLocked(final bool) {
	if o.done {
		return
	}
	n := len(o.pending)
	if !final {
		n = completeUTF8(o.pending)
	}
	if n == 0 {
		return
	}
	text := strings.ToValidUTF8(string(o.pending[:n]), "\uFFFD")
	o.pending = append(o.pending[:0], o.pending[n:]...)
	ev := ToolOutput{ID: o.id, Name: o.name, Text: text}
	if o.sent+len(text) > StreamOutputCap {
		ev.Text, ev.Truncated, o.done = cutUTF8(text, StreamOutputCap-o.sent), true, true
		o.pending = nil
	}
	o.sent += len(ev.Text)
	o.rc.Emit(ev)
}

// completeUTF8 is the length of the longest prefix of b that does not end
// inside a UTF-8 sequence which later bytes could complete.
func completeUTF8(b []byte) int {
	// A sequence is at most 4 bytes: look back at most 3 for its start.
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		if !utf8.RuneStart(b[i]) {
			continue
		}
		if !utf8.FullRune(b[i:]) {
			return i
		}
		break
	}
	return len(b)
}
