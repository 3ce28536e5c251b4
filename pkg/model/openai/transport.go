package openai

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"time"
)

// Headers that carry model.Metadata to the endpoint.
const (
	HeaderRunID            = "X-Plumb-Run-Id"
	HeaderAgentPath        = "X-Plumb-Agent-Path"
	HeaderParentToolCallID = "X-Plumb-Parent-Tool-Call-Id"
)

// HTTPDoer sends HTTP requests; *http.Client satisfies it. It is the same
// shape go-openai accepts.
type HTTPDoer interface {
	Do(req *http.Request) (*http.Response, error)
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 1 << 20

// attemptState is what the transport learns about one HTTP attempt. It
// travels in the request context, is written by recordingDoer and the
// response body it wraps, and is read by the attempt that created it. All of
// that happens on the goroutine calling Generate (go-openai calls Do and
// reads the body synchronously), so it needs no locking.
type attemptState struct {
	headers map[string]string // X-Plumb-* headers to send

	// onFirstByte is called once, when the first response byte arrives.
	onFirstByte func()
	gotByte     bool

	sent    bool        // the request reached the transport
	status  int         // HTTP status, 0 if no response
	header  http.Header // response headers
	sawDone bool        // a "data: [DONE]" line went by
}

func (st *attemptState) firstByte() {
	if st.gotByte {
		return
	}
	st.gotByte = true
	if st.onFirstByte != nil {
		st.onFirstByte()
	}
}

type attemptStateKey struct{}

func withAttemptState(ctx context.Context, st *attemptState) context.Context {
	return context.WithValue(ctx, attemptStateKey{}, st)
}

// recordingDoer adds plumb's headers to each request and records each
// response's status and headers, because go-openai's APIError and
// RequestError do not carry headers (Retry-After in particular).
type recordingDoer struct {
	next  HTTPDoer
	extra map[string]string
}

func (d *recordingDoer) Do(req *http.Request) (*http.Response, error) {
	for k, v := range d.extra {
		req.Header.Set(k, v)
	}
	st, _ := req.Context().Value(attemptStateKey{}).(*attemptState)
	if st == nil {
		return d.next.Do(req)
	}
	for k, v := range st.headers {
		req.Header.Set(k, v)
	}
	st.sent = true
	resp, err := d.next.Do(req)
	if err != nil {
		return nil, err
	}
	st.status, st.header = resp.StatusCode, resp.Header
	if resp.StatusCode >= http.StatusOK && resp.StatusCode < http.StatusBadRequest {
		resp.Body = &watchedBody{ReadCloser: resp.Body, st: st}
		return resp, nil
	}
	// go-openai does not close the body of a failed stream request; read it
	// here and close the connection's body so nothing leaks. A read error
	// leaves a partial body, which go-openai then reports with the status.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	st.firstByte()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// watchedBody reports the first byte of a successful response and notices
// the "data: [DONE]" terminator, which go-openai reports as the same io.EOF
// as a connection closed mid-stream.
type watchedBody struct {
	io.ReadCloser
	st   *attemptState
	line doneMatcher
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.st.firstByte()
		for _, c := range p[:n] {
			if c != '\n' {
				b.line.feed(c)
			} else if b.line.end() {
				b.st.sawDone = true
			}
		}
	}
	return n, err
}

// doneMatcher recognizes, byte by byte, a line that go-openai's stream
// reader takes for the terminator: optional space, "data:", optional space,
// "[DONE]", optional space. Only '\n' ends a line, as in go-openai.
type doneMatcher struct {
	state int
	pos   int // bytes of the current literal matched
}

const (
	dmLead   = iota // before "data:", skipping space
	dmData          // inside "data:"
	dmGap           // between "data:" and "[DONE]", skipping space
	dmDone          // inside "[DONE]"
	dmTrail         // after "[DONE]", only space allowed
	dmFailed        // not the terminator
)

func (m *doneMatcher) feed(c byte) {
	switch m.state {
	case dmLead:
		if isSpace(c) {
			return
		}
		m.state, m.pos = dmData, 0
		fallthrough
	case dmData:
		m.match(c, "data:", dmGap)
	case dmGap:
		if isSpace(c) {
			return
		}
		m.state, m.pos = dmDone, 0
		fallthrough
	case dmDone:
		m.match(c, "[DONE]", dmTrail)
	case dmTrail:
		if !isSpace(c) {
			m.state = dmFailed
		}
	}
}

func (m *doneMatcher) match(c byte, lit string, next int) {
	if c != lit[m.pos] {
		m.state = dmFailed
		return
	}
	if m.pos++; m.pos == len(lit) {
		m.state = next
	}
}

// end reports whether the line just ended was the terminator and resets.
func (m *doneMatcher) end() bool {
	done := m.state == dmTrail
	*m = doneMatcher{}
	return done
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'
}

// Clock is the source of time for backoff. Tests replace it to observe the
// computed delays without waiting for them.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or returns ctx.Err() as soon as ctx is done.
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
