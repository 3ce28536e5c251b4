package mcptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/backend"
)

// ErrNoProcesses is returned for a stdio server on a thread whose backend
// cannot run processes (no sandbox).
var ErrNoProcesses = errors.New("this thread's backend cannot run processes, so a stdio MCP server cannot start (configure a sandbox backend, or use an HTTP server)")

// codeRejected is the SDK's "rejected by transport": an HTTP request that
// failed (a status, a refused connection), wrapped around its cause. It
// is not the server's answer, so the cause must be kept.
const codeRejected = -32005

// stderrTail is how much of a stdio server's stderr is kept; errors show
// at most its last stderrLines lines.
const (
	stderrTail  = 2048
	stderrLines = 10
)

// closeWait bounds how long closing waits for a process's output to end.
const closeWait = 10 * time.Second

// exitGrace bounds how long a server that closed its end of the
// handshake may go on writing stderr before it is killed.
const exitGrace = 2 * time.Second

// implementation is how plumb introduces itself to servers.
var implementation = &sdk.Implementation{Name: "plumb", Version: "1"}

// session is one run's connection to one server. It connects on first
// need, reconnects when the connection died, and lists the tools once.
type session struct {
	srv *Server
	b   backend.Backend // for stdio servers
	lg  *zap.Logger

	lock chan struct{} // held while connecting or listing; honours contexts

	mu     sync.Mutex
	live   *link
	tools  []*sdk.Tool // nil until listed
	closed bool
}

func newSession(srv *Server, b backend.Backend, lg *zap.Logger) *session {
	return &session{srv: srv, b: b, lg: lg, lock: make(chan struct{}, 1)}
}

// link is one established connection: a client session and what must be
// closed with it.
type link struct {
	cs      *sdk.ClientSession
	dead    chan struct{} // closed when the connection ended
	deadErr error         // why, once dead is closed
	stderr  *tail         // stdio only
	kill    func()        // stdio: kills the process (before the session closes)
	drop    func()        // HTTP: closes idle connections (after it closed)
	waited  chan struct{} // closed when the watcher and stderr drain ended
	// oversize counts HTTP responses cut at the message limit.
	oversize atomic.Int64
	// httpFailure is the last failed HTTP answer ("HTTP 502 Bad Gateway:
	// <the start of its body>"), whose body the SDK does not report.
	httpFailure atomic.Pointer[string]
}

func (l *link) isDead() bool {
	select {
	case <-l.dead:
		return true
	default:
		return false
	}
}

// close ends the link: the process is killed first, so that a server that
// hangs cannot hold the client session's graceful close.
func (l *link) close() {
	l.kill()
	_ = l.cs.Close()
	l.drop()
	select {
	case <-l.waited:
	case <-time.After(closeWait):
	}
}

func (s *session) acquire(ctx context.Context) error {
	select {
	case s.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *session) unlock() { <-s.lock }

// connected returns a live link, connecting when there is none.
func (s *session) connected(ctx context.Context) (*link, error) {
	s.mu.Lock()
	l, closed := s.live, s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("MCP server %s: the run ended", s.srv.Name)
	}
	if l != nil && !l.isDead() {
		return l, nil
	}
	if s.srv.Unavailable != "" {
		return nil, fmt.Errorf("MCP server %s is not usable: %s", s.srv.Name, s.srv.Unavailable)
	}
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.unlock()
	s.mu.Lock()
	l = s.live
	s.mu.Unlock()
	if l != nil && !l.isDead() {
		return l, nil
	}
	if l != nil {
		s.lg.Info("reconnecting to the MCP server", zap.NamedError("cause", l.deadErr))
		l.close()
	}
	cctx, cancel := context.WithTimeout(ctx, s.srv.startupTimeout())
	defer cancel()
	l, err := s.connect(cctx)
	if err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("MCP server %s did not complete the MCP handshake within %s%s", s.srv.Name, s.srv.startupTimeout(), l.stderrNote())
		}
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.close()
		return nil, fmt.Errorf("MCP server %s: the run ended", s.srv.Name)
	}
	s.live = l
	s.mu.Unlock()
	return l, nil
}

// connect opens a link. On failure it returns a link (possibly nil) only
// to describe the failure; everything is already closed.
func (s *session) connect(ctx context.Context) (*link, error) {
	client := sdk.NewClient(implementation, &sdk.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	l := &link{dead: make(chan struct{}), waited: make(chan struct{}), kill: func() {}, drop: func() {}}
	var t sdk.Transport
	var drained chan struct{}
	var out *procOut // stdio only
	if s.srv.URL != "" {
		tr := &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout: 10 * time.Second,
			MaxIdleConnsPerHost: 4,
		}
		l.drop = tr.CloseIdleConnections
		t = &sdk.StreamableClientTransport{
			Endpoint:             s.srv.URL,
			HTTPClient:           &http.Client{Transport: headerTransport{base: tr, headers: s.srv.Headers, max: int64(s.srv.maxMessageBytes()), over: &l.oversize, failed: &l.httpFailure}},
			MaxRetries:           -1,
			DisableStandaloneSSE: true,
			MaxEventSize:         s.srv.maxMessageBytes(),
		}
	} else {
		ps := backend.ProcessStarterOf(s.b)
		if ps == nil {
			return nil, ErrNoProcesses
		}
		proc, err := ps.StartProcess(ctx, backend.ProcessRequest{Command: s.srv.shellCommand(), Cwd: s.srv.Cwd, Env: s.srv.Env, Service: true})
		if err != nil {
			return nil, fmt.Errorf("MCP server %s could not be started: %w", s.srv.Name, err)
		}
		l.kill = func() { _ = proc.Close() }
		l.stderr = &tail{}
		drained = make(chan struct{})
		go func() {
			defer close(drained)
			_, _ = io.Copy(l.stderr, proc.Stderr())
		}()
		out = &procOut{p: proc}
		t = &sdk.IOTransport{Reader: out, Writer: proc.Stdin(), MaxLineLength: s.srv.maxMessageBytes()}
	}
	cs, err := client.Connect(ctx, t, nil)
	if out != nil {
		out.connected.Store(true)
	}
	if err != nil {
		if drained != nil && ctx.Err() == nil {
			// The server closed its end: it is exiting, so let it finish
			// writing the stderr that says why before it is killed.
			select {
			case <-drained:
			case <-time.After(exitGrace):
			}
		}
		l.kill()
		l.drop()
		if drained != nil {
			select {
			case <-drained:
			case <-time.After(closeWait):
			}
		}
		if ctx.Err() != nil {
			return l, ctx.Err()
		}
		return l, fmt.Errorf("MCP server %s failed the MCP handshake: %v%s", s.srv.Name, err, l.stderrNote())
	}
	l.cs = cs
	go func() {
		err := cs.Wait()
		if drained != nil {
			select {
			case <-drained:
			case <-time.After(closeWait):
			}
		}
		l.deadErr = err
		close(l.dead)
		close(l.waited)
	}()
	return l, nil
}

// stderrNote ends an error with the tail of the server's stderr.
func (l *link) stderrNote() string {
	if l == nil || l.stderr == nil {
		return ""
	}
	if s := l.stderr.lastLines(); s != "" {
		return "; its stderr ends with: " + s
	}
	return ""
}

// list returns the server's tools (listed once per session).
func (s *session) list(ctx context.Context) ([]*sdk.Tool, error) {
	s.mu.Lock()
	tools := s.tools
	s.mu.Unlock()
	if tools != nil {
		return tools, nil
	}
	l, err := s.connected(ctx)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, s.srv.startupTimeout())
	defer cancel()
	tools = []*sdk.Tool{}
	for t, err := range l.cs.Tools(lctx, nil) {
		if err != nil {
			if lctx.Err() != nil && ctx.Err() == nil {
				return nil, fmt.Errorf("MCP server %s did not list its tools within %s", s.srv.Name, s.srv.startupTimeout())
			}
			return nil, s.failure(lctx, l, "tools/list", err)
		}
		if len(s.srv.Tools) > 0 && !contains(s.srv.Tools, t.Name) {
			continue
		}
		if len(tools) == MaxToolsPerServer {
			s.lg.Warn("the MCP server lists more tools than are offered", zap.Int("max-tools", MaxToolsPerServer))
			break
		}
		tools = append(tools, t)
	}
	s.mu.Lock()
	s.tools = tools
	s.mu.Unlock()
	return tools, nil
}

// call runs one tools/call.
func (s *session) call(ctx context.Context, name, args string) (*sdk.CallToolResult, error) {
	l, err := s.connected(ctx)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	over := l.oversize.Load()
	res, err := l.cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
	if err != nil {
		if ctx.Err() == nil && l.oversize.Load() > over {
			return nil, fmt.Errorf("MCP server %s answered with more than %d bytes (its message limit); the answer was dropped", s.srv.Name, s.srv.maxMessageBytes())
		}
		return nil, s.failure(ctx, l, "tools/call", err)
	}
	return res, nil
}

// failure describes a failed request: the context's error as it is (the
// executor reports timeouts), a broken connection with its cause, a
// protocol error from the server as the server put it.
func (s *session) failure(ctx context.Context, l *link, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var wire *jsonrpc.Error
	if errors.As(err, &wire) && wire.Code != codeRejected {
		// The server answered with an error; the connection is fine.
		return fmt.Errorf("MCP server %s: %s: %s", s.srv.Name, what, wire.Message)
	}
	// Anything else is the connection's trouble (garbage, a message over
	// the limit, a dead process): its read loop ends a moment after the
	// call failed and records why.
	select {
	case <-l.dead:
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
	if !l.isDead() {
		return fmt.Errorf("MCP server %s: %s: %v%s", s.srv.Name, what, err, l.httpNote())
	}
	cause := err
	if l.deadErr != nil {
		cause = l.deadErr
	}
	limit := ""
	if strings.Contains(cause.Error(), "maximum line length") || strings.Contains(cause.Error(), "exceeded") {
		limit = fmt.Sprintf(" (a message from the server may be at most %d bytes)", s.srv.maxMessageBytes())
	}
	return fmt.Errorf("MCP server %s broke the connection during %s: %v%s%s; the next call reconnects%s", s.srv.Name, what, cause, limit, l.httpNote(), l.stderrNote())
}

// httpNote ends an error with the last failed HTTP answer, once.
func (l *link) httpNote() string {
	if f := l.httpFailure.Swap(nil); f != nil {
		return " (" + *f + ")"
	}
	return ""
}

// close ends the session for good.
func (s *session) close() {
	s.mu.Lock()
	l := s.live
	s.live, s.closed = nil, true
	s.mu.Unlock()
	if l != nil {
		l.close()
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// headerTransport adds the configured headers to every request and
// bounds every response body (the SDK reads a JSON answer whole).
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
	max     int64
	over    *atomic.Int64 // counts cut responses
	// failed receives the status and the start of the body of an answer
	// that is an HTTP error but no JSON-RPC message, with the header
	// values (secrets) redacted.
	failed *atomic.Pointer[string]
}

// httpFailureChars bounds the body kept from a failed HTTP answer.
const httpFailureChars = 300

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.headers) > 0 {
		r = r.Clone(r.Context())
		for k, v := range h.headers {
			r.Header.Set(k, v)
		}
	}
	resp, err := h.base.RoundTrip(r)
	if err == nil && resp.StatusCode >= 400 && h.failed != nil && !strings.Contains(resp.Header.Get("Content-Type"), "json") {
		head := make([]byte, httpFailureChars)
		n, _ := io.ReadFull(resp.Body, head)
		head = head[:n]
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
		note := "HTTP " + resp.Status
		if text := strings.Join(strings.Fields(strings.ToValidUTF8(string(head), "?")), " "); text != "" {
			note += ": " + h.redact(text)
		}
		h.failed.Store(&note)
	}
	if err == nil && h.max > 0 {
		resp.Body = &limitedBody{rc: resp.Body, left: h.max, max: h.max, over: h.over}
	}
	return resp, err
}

// redact hides the configured header values (and each of their words,
// such as the token after "Bearer") in text a server sent back.
func (h headerTransport) redact(text string) string {
	for _, v := range h.headers {
		words := strings.Fields(v)
		if len(words) > 1 {
			words = words[1:] // "Bearer <token>": the scheme is no secret
		}
		for _, secret := range append([]string{v}, words...) {
			if secret != "" {
				text = strings.ReplaceAll(text, secret, "[redacted]")
			}
		}
	}
	return text
}

type readCloser struct {
	io.Reader
	io.Closer
}

// limitedBody fails a read past max bytes.
type limitedBody struct {
	rc        io.ReadCloser
	left, max int64
	over      *atomic.Int64
	tripped   bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		if !b.tripped && b.over != nil {
			b.tripped = true
			b.over.Add(1)
		}
		return 0, fmt.Errorf("the response exceeded the limit of %d bytes", b.max)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// procOut is a process's stdout whose Close kills the process: the SDK
// closes its reader when the connection ends, garbage included.
// procOut is a stdio server's stdout as the SDK's transport reads it.
// Closing it kills the server once connected; during the handshake it
// only closes the server's stdin: the SDK closes the transport as soon as
// a failed handshake ends, and killing then would cut the stderr that says
// why before connect has drained it (connect kills the server itself).
type procOut struct {
	p         backend.Process
	connected atomic.Bool
}

func (o *procOut) Read(b []byte) (int, error) { return o.p.Stdout().Read(b) }

func (o *procOut) Close() error {
	if !o.connected.Load() {
		return o.p.Stdin().Close()
	}
	return o.p.Close()
}

// tail keeps the last stderrTail bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - stderrTail; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// lastLines returns the last stderrLines whole lines kept, as valid
// UTF-8 (a line cut by the byte bound is left out).
func (t *tail) lastLines() string {
	t.mu.Lock()
	b := slices.Clone(t.buf)
	t.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(b) >= stderrTail && len(lines) > 1 {
		lines = lines[1:]
	}
	if len(lines) > stderrLines {
		lines = lines[len(lines)-stderrLines:]
	}
	return strings.ToValidUTF8(strings.TrimSpace(strings.Join(lines, "\n")), "?")
}
