package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// mimeSSE is the media type of Server-Sent Events.
const mimeSSE = "text/event-stream"

// DefaultKeepAlive is how often a quiet SSE stream gets a comment line.
const DefaultKeepAlive = 15 * time.Second

// jsonMarshaler is grpc-gateway's protojson marshaler, except that the
// error line of a newline-delimited stream carries plumb's error body.
type jsonMarshaler struct {
	*runtime.JSONPb
}

func (m jsonMarshaler) Marshal(v any) ([]byte, error) {
	if st, ok := errorChunk(v); ok {
		return json.Marshal(map[string]ErrorBody{"error": bodyOf(st)})
	}
	return m.JSONPb.Marshal(v)
}

// errorChunk recognizes the error grpc-gateway sends at the end of a
// stream: {"error": <google.rpc.Status>}.
func errorChunk(v any) (*status.Status, bool) {
	m, ok := v.(map[string]proto.Message)
	if !ok || len(m) != 1 {
		return nil, false
	}
	p, ok := m["error"].(*spb.Status)
	if !ok {
		return nil, false
	}
	return status.FromProto(p), true
}

// sseMarshaler writes each message of a server stream as one SSE event:
// "id: <sequence>" when the message carries an event, then "data:" with
// its protojson. The whole event is one Marshal, with no delimiter, so
// that a keep-alive never lands inside one.
type sseMarshaler struct {
	jsonMarshaler
}

func (sseMarshaler) ContentType(any) string { return mimeSSE }

func (sseMarshaler) Delimiter() []byte { return nil }

func (m sseMarshaler) Marshal(v any) ([]byte, error) {
	if st, ok := errorChunk(v); ok {
		return errorEvent(st), nil
	}
	msg := v
	if r, ok := v.(map[string]any); ok && len(r) == 1 {
		if res, ok := r["result"]; ok {
			msg = res
		}
	}
	data, err := m.jsonMarshaler.Marshal(msg)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if p, ok := msg.(proto.Message); ok {
		if seq, ok := eventSequence(p); ok {
			b.WriteString("id: " + strconv.FormatUint(seq, 10) + "\n")
		}
	}
	writeData(&b, data)
	return b.Bytes(), nil
}

// eventSequence is the sequence of the plumb.v1.Event a stream message
// carries in its "event" field (Run, Resume and Attach responses), or the
// message's own non-zero "sequence" (a resumable ExecuteStream's).
func eventSequence(m proto.Message) (uint64, bool) {
	r := m.ProtoReflect()
	if sd := r.Descriptor().Fields().ByName("sequence"); sd != nil && sd.Kind() == protoreflect.Uint64Kind {
		seq := r.Get(sd).Uint()
		return seq, seq > 0
	}
	fd := r.Descriptor().Fields().ByName("event")
	if fd == nil || fd.Kind() != protoreflect.MessageKind || !r.Has(fd) {
		return 0, false
	}
	ev := r.Get(fd).Message()
	sd := ev.Descriptor().Fields().ByName("sequence")
	if sd == nil || sd.Kind() != protoreflect.Uint64Kind {
		return 0, false
	}
	return ev.Get(sd).Uint(), true
}

// writeData writes data as the data lines of one event, and its end.
func writeData(b *bytes.Buffer, data []byte) {
	for line := range bytes.Lines(bytes.TrimRight(data, "\n")) {
		b.WriteString("data: ")
		b.Write(bytes.TrimRight(line, "\r\n"))
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// eventData is the data of one SSE event, its lines joined.
func eventData(ev []byte) []byte {
	var out [][]byte
	for line := range bytes.Lines(ev) {
		if d, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data: ")); ok {
			out = append(out, d)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// errorEvent is the SSE "error" event of st.
func errorEvent(st *status.Status) []byte {
	data, _ := json.Marshal(bodyOf(st))
	var b bytes.Buffer
	b.WriteString("event: error\n")
	writeData(&b, data)
	return b.Bytes()
}

// sseWriter is the response writer of one SSE stream. The gateway writes
// whole events through it; a goroutine of its own writes a keep-alive
// comment while the stream is quiet. The gateway's header changes go to a
// header map of their own (shadow) that is copied when the gateway
// commits the response, so that a keep-alive committing it first never
// races with them.
type sseWriter struct {
	rw     http.ResponseWriter
	rc     *http.ResponseController
	shadow http.Header

	mu        sync.Mutex
	committed bool
	last      time.Time
	// failed is the HTTP status the gateway set for a stream that failed
	// before its first message (0 = none): its error event is then
	// answered as an ordinary error response.
	failed int
	// ended is set once the stream's error was written: nothing follows
	// it, not even a keep-alive.
	ended bool
	// number, if set, gives each message an id: its place in the stream
	// (1, 2, ...), for messages without a sequence of their own.
	number bool
	seq    uint64

	stop chan struct{}
	done chan struct{}
}

// newSSEWriter sets the stream's headers on w and starts the keep-alive;
// the caller must call close when the handler is done.
func newSSEWriter(w http.ResponseWriter, keepAlive time.Duration) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", mimeSSE)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	h.Set("X-Content-Type-Options", "nosniff")
	s := &sseWriter{rw: w, rc: http.NewResponseController(w), shadow: http.Header{}, last: time.Now(),
		stop: make(chan struct{}), done: make(chan struct{})}
	go s.keepAlive(keepAlive)
	return s
}

func (s *sseWriter) keepAlive(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		if !s.ended && time.Since(s.last) >= every/2 {
			if !s.committed {
				// The stream's own headers, set before the goroutine
				// started; the shadow is the gateway's.
				s.committed = true
				s.rw.WriteHeader(http.StatusOK)
			}
			_, err := s.rw.Write([]byte(": keep-alive\n\n"))
			if err == nil {
				err = s.rc.Flush()
			}
			s.last = time.Now()
			if err != nil {
				s.mu.Unlock()
				return
			}
		}
		s.mu.Unlock()
	}
}

func (s *sseWriter) close() {
	close(s.stop)
	<-s.done
}

func (s *sseWriter) Header() http.Header { return s.shadow }

func (s *sseWriter) commitLocked(code int) {
	if s.committed {
		return
	}
	s.committed = true
	h := s.rw.Header()
	for k, v := range s.shadow {
		if k == "Content-Type" && code == http.StatusOK {
			continue // an SSE stream stays one
		}
		h[k] = v
	}
	s.rw.WriteHeader(code)
}

func (s *sseWriter) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.committed && code != http.StatusOK {
		s.failed = code // the error event comes next
		return
	}
	s.commitLocked(code)
}

func (s *sseWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.committed && s.failed != 0 {
		// The stream failed before it started: its error event becomes
		// the JSON error body, with the status the gateway chose.
		s.committed = true
		h := s.rw.Header()
		h.Set("Content-Type", "application/json")
		h.Del("Cache-Control")
		h.Set("Cache-Control", "no-store")
		h.Del("X-Accel-Buffering")
		s.rw.WriteHeader(s.failed)
		_, err := s.rw.Write(append(eventData(p), '\n'))
		return len(p), err
	}
	s.commitLocked(http.StatusOK)
	if len(p) > 0 {
		s.last = time.Now()
	}
	if s.number && bytes.HasPrefix(p, []byte("data: ")) {
		s.seq++
		id := "id: " + strconv.FormatUint(s.seq, 10) + "\n"
		if _, err := s.rw.Write(append([]byte(id), p...)); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return s.rw.Write(p)
}

// FlushError is what http.ResponseController calls.
func (s *sseWriter) FlushError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commitLocked(http.StatusOK)
	return s.rc.Flush()
}

// Flush is http.Flusher's.
func (s *sseWriter) Flush() { _ = s.FlushError() }

// writeError answers with an ordinary error response while nothing was
// sent, and with an "error" event once the stream has started.
func (s *sseWriter) writeError(st *status.Status, httpStatus int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	if s.committed {
		_, _ = s.rw.Write(errorEvent(st))
		_ = s.rc.Flush()
		return
	}
	s.committed = true
	writeErrorHeaders(s.rw.Header(), st)
	s.rw.WriteHeader(httpStatus)
	_ = json.NewEncoder(s.rw).Encode(bodyOf(st))
}
