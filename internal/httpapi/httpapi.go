package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Service is what a daemon serves over HTTP: its gRPC services, the
// generated gateway registration and the OpenAPI document.
type Service struct {
	// Services are the descriptors of the services (plumbv1.File_…).
	Services []protoreflect.ServiceDescriptor
	// Register registers the generated gateway handlers of the services
	// (gen/gateway's Register…Handler) on mux, calling them through conn.
	Register func(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error
	// OpenAPI is the document served at GET /openapi.json.
	OpenAPI []byte
	// Sessions, if set, keeps browser sessions where every replica
	// sharing it finds them (agentd's thread store); nil keeps them in
	// this process's memory.
	Sessions SessionStore
}

// Config configures New.
type Config struct {
	Service
	// Conn reaches the daemon's own gRPC server, with its interceptors.
	Conn *grpc.ClientConn
	// Check is the daemon's credential check of a bearer token ("" when
	// the request has none); nil means accepted. It must return a status
	// error (UNAUTHENTICATED) when it refuses.
	Check func(token string) error
	// Refuse, if set, refuses every API call with UNAUTHENTICATED and
	// this message (the daemon cannot authenticate HTTP callers).
	Refuse string
	// BodyLimit is the largest request body of a full method name
	// ("/plumb.v1.AgentService/Run"); nil or 0 = 1 MiB.
	BodyLimit func(fullMethod string) int64
	// KeepAlive is how often a quiet SSE stream gets a comment (0 =
	// DefaultKeepAlive).
	KeepAlive time.Duration
	// SessionTTL is how long a browser session lasts (0 =
	// DefaultSessionTTL).
	SessionTTL time.Duration
	// LoopbackHosts, set when the daemon trusts every caller (no
	// credentials) on a loopback HTTP address, refuses a request without
	// a token whose Host is not a loopback name or address: a page that
	// rebinds its DNS name to 127.0.0.1 reaches the port as same-origin.
	LoopbackHosts bool
	// Logger receives the layer's own logs (nil = none); never a token.
	Logger *zap.Logger
}

// SessionCookie is the name of the browser session cookie.
const SessionCookie = "plumb_session"

// DefaultSessionTTL is how long a browser session lasts.
const DefaultSessionTTL = 12 * time.Hour

// Handler serves the HTTP API.
type Handler struct {
	cfg      Config
	gw       *runtime.ServeMux
	mux      *http.ServeMux
	methods  map[string]protoreflect.MethodDescriptor
	attach   string // the full method of Attach ("" = none)
	sessions sessionKeeper
	lg       *zap.Logger
	// unmarshal reads request messages (unknown fields are errors).
	unmarshal protojson.UnmarshalOptions
}

// New builds the handler: the gateway over cfg.Conn, the session routes,
// GET /openapi.json and, when a service has Attach, GET
// /v1/threads/{thread_id}/events.
func New(ctx context.Context, cfg Config) (*Handler, error) {
	if cfg.Conn == nil || cfg.Register == nil || cfg.Check == nil {
		return nil, errors.New("httpapi: Conn, Register and Check are required")
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	h := &Handler{cfg: cfg, methods: map[string]protoreflect.MethodDescriptor{}, lg: cfg.Logger}
	if h.lg == nil {
		h.lg = zap.NewNop()
	}
	h.sessions = newSessions(cfg.SessionTTL, maxSessions)
	if cfg.Sessions != nil {
		h.sessions = &storedSessions{st: cfg.Sessions, ttl: cfg.SessionTTL, now: time.Now}
	}
	for _, sd := range cfg.Services {
		ms := sd.Methods()
		for i := range ms.Len() {
			m := ms.Get(i)
			full := "/" + string(sd.FullName()) + "/" + string(m.Name())
			h.methods[full] = m
			if m.Name() == "Attach" && m.IsStreamingServer() && resumeField(m) != nil {
				h.attach = full
			}
		}
	}
	h.unmarshal = protojson.UnmarshalOptions{DiscardUnknown: false}
	js := jsonMarshaler{&runtime.JSONPb{
		// grpc-gateway's defaults (lowerCamelCase, enums by name, every
		// field), except that an unknown request field is an error.
		MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true},
		UnmarshalOptions: h.unmarshal,
	}}
	none := func(string) (string, bool) { return "", false }
	h.gw = runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, js),
		runtime.WithMarshalerOption(mimeSSE, sseMarshaler{js}),
		// The bearer token is the one header forwarded (as authorization,
		// which the gateway always passes); nothing else, either way.
		runtime.WithIncomingHeaderMatcher(none),
		runtime.WithOutgoingHeaderMatcher(none),
		runtime.WithOutgoingTrailerMatcher(none),
		runtime.WithErrorHandler(func(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
			h.fail(w, r, err)
		}),
		// A stream that fails because of its request body (a bad frame)
		// says so, not that it was cancelled.
		runtime.WithStreamErrorHandler(func(ctx context.Context, err error) *status.Status {
			if st, _, ok := bodyFailure(ctx); ok {
				return st
			}
			return status.Convert(err)
		}),
	)
	if err := cfg.Register(ctx, h.gw, cfg.Conn); err != nil {
		return nil, fmt.Errorf("httpapi: register the gateway: %w", err)
	}
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("GET /openapi.json", h.openAPI)
	h.mux.HandleFunc("POST /v1/session", h.createSession)
	h.mux.HandleFunc("DELETE /v1/session", h.deleteSession)
	if h.attach != "" {
		h.mux.HandleFunc("GET /v1/threads/{thread_id}/events", h.events)
	}
	h.mux.HandleFunc("/", h.api)
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) openAPI(w http.ResponseWriter, _ *http.Request) {
	if len(h.cfg.OpenAPI) == 0 {
		writeError(w, status.New(codes.NotFound, "no OpenAPI document"), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(h.cfg.OpenAPI)
}

// fail answers err, the gateway's or the layer's own.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	if st, code, ok := bodyFailure(r.Context()); ok {
		writeError(w, st, code)
		return
	}
	st, code := statusOf(err)
	writeError(w, st, code)
}

// caller is who a request authenticated as.
type caller struct {
	token  string
	cookie bool // by the session cookie, not a header
}

// authenticate checks the request's bearer token or session cookie, and
// the CSRF rule for a cookie; it answers the refusal itself.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) (caller, bool) {
	if h.cfg.Refuse != "" {
		writeError(w, apiError(codes.Unauthenticated, ReasonHTTPAPIRefuse, h.cfg.Refuse), http.StatusUnauthorized)
		return caller{}, false
	}
	var c caller
	if v := r.Header.Values("Authorization"); len(v) > 0 {
		tok, ok := strings.CutPrefix(v[0], "Bearer ")
		if !ok || len(v) > 1 {
			writeError(w, apiError(codes.Unauthenticated, ReasonUnauthorized, `send one "Authorization: Bearer <token>" header`), http.StatusUnauthorized)
			return caller{}, false
		}
		c.token = tok
	} else if ck, err := r.Cookie(SessionCookie); err == nil {
		tok, ok, err := h.sessions.get(r.Context(), ck.Value)
		if err != nil {
			h.lg.Error("browser session not read", zap.Error(err))
			writeError(w, apiError(codes.Unavailable, ReasonSessionStore, "the session could not be read: try again"), http.StatusServiceUnavailable)
			return caller{}, false
		}
		if !ok {
			writeError(w, apiError(codes.Unauthenticated, ReasonSession, "the session is unknown or expired: sign in again (POST /v1/session)"), http.StatusUnauthorized)
			return caller{}, false
		}
		c = caller{token: tok, cookie: true}
	}
	if err := h.cfg.Check(c.token); err != nil {
		st, code := statusOf(err)
		writeError(w, st, code)
		return caller{}, false
	}
	// Anything a browser sends by itself (a cookie, or nothing where no
	// credentials are needed) must prove it is no cross-site form.
	ambient := c.cookie || c.token == ""
	if ambient && r.Method != http.MethodGet && r.Method != http.MethodHead && !isJSON(r) && !isNDJSON(r) {
		writeError(w, apiError(codes.PermissionDenied, ReasonCSRF, "a request without an Authorization header must have Content-Type: application/json (or application/x-ndjson)"), http.StatusForbidden)
		return caller{}, false
	}
	if c.token == "" && h.cfg.LoopbackHosts && !loopbackHost(r.Host) {
		writeError(w, apiError(codes.PermissionDenied, ReasonHost, "without credentials the HTTP API answers only requests for a loopback host (localhost, 127.0.0.1, [::1])"), http.StatusForbidden)
		return caller{}, false
	}
	return c, true
}

// loopbackHost reports whether a Host header names loopback.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func isJSON(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// isNDJSON reports a newline-delimited JSON body (a client stream's). No
// more than application/json can a cross-site form send it without a
// CORS preflight.
func isNDJSON(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/x-ndjson"
}

// api serves an RPC through the gateway.
func (h *Handler) api(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	h.call(w, r, c)
}

// call forwards an authenticated request to the gateway.
func (h *Handler) call(w http.ResponseWriter, r *http.Request, c caller) {
	full := r.URL.Path
	m, known := h.methods[full]
	limit := int64(1 << 20)
	if h.cfg.BodyLimit != nil {
		if n := h.cfg.BodyLimit(full); n > 0 {
			limit = n
		}
	}
	clientStream := known && m.IsStreamingClient()
	bidi := clientStream && m.IsStreamingServer()
	numbered := false // a bidirectional stream's messages get ids of their place
	if clientStream {
		// Newline-delimited frames, each bounded, the body not (as a
		// gRPC stream); a bad frame cancels the call (clientstream.go).
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		fb := newFrameBody(r.Body, limit, m.Input(), h.unmarshal, cancel)
		r = r.WithContext(context.WithValue(ctx, bodyKey{}, fb))
		r.Body = fb
		if bidi {
			fb.held = make(chan struct{})
			defer close(fb.held)
			// Frames are read while events are written: an HTTP/1.1
			// handler must say so, or the server drains the body when
			// the response starts (HTTP/2 is full duplex anyway).
			if err := http.NewResponseController(w).EnableFullDuplex(); err != nil && !errors.Is(err, http.ErrNotSupported) {
				h.fail(w, r, status.Error(codes.Internal, "internal error"))
				return
			}
		}
		// The first frame is checked before the call starts, so that a
		// bad one is an ordinary error response.
		if _, err := fb.first(); err != nil {
			h.fail(w, r, err)
			return
		}
		if bidi {
			start := resumeStart(fb.head)
			if lei := strings.TrimSpace(r.Header.Get("Last-Event-ID")); lei != "" && !h.resumeFrame(w, fb, full, start, lei) {
				return
			}
			numbered = !resumable(start)
		}
	} else {
		if r.ContentLength > limit {
			writeError(w, apiError(codes.ResourceExhausted, ReasonBodyTooLarge, fmt.Sprintf("request body over %d bytes", limit)), http.StatusRequestEntityTooLarge)
			return
		}
		body := &limitedBody{r: r.Body, limit: limit}
		r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, body))
		r.Body = body
	}

	// Only what the gateway needs reaches it: no cookie, no metadata.
	hdr := http.Header{}
	for _, k := range []string{"Content-Type", "Grpc-Timeout"} {
		if v, ok := r.Header[k]; ok {
			hdr[k] = v
		}
	}
	if c.token != "" {
		hdr.Set("Authorization", "Bearer "+c.token)
	}
	sse := false
	if known && m.IsStreamingServer() {
		sse = acceptsSSE(r.Header)
		if sse {
			hdr.Set("Accept", mimeSSE)
		}
		if lei := strings.TrimSpace(r.Header.Get("Last-Event-ID")); lei != "" && resumeField(m) != nil {
			if !h.resume(w, r, m, lei) {
				return
			}
		}
	}
	r.Header = hdr
	if sse {
		sw := newSSEWriter(w, h.cfg.KeepAlive)
		defer sw.close()
		// A bidirectional stream that is not resumable has messages with
		// no sequence of their own: id numbers them, so that a client's
		// reconnect says it is one (and is refused: resumeFrame). A
		// resumable one's messages carry their sequence, the id.
		sw.number = numbered
		w = sw
	}
	h.gw.ServeHTTP(w, r)
}

// acceptsSSE reports whether the Accept header asks for an event stream.
func acceptsSSE(h http.Header) bool {
	for _, v := range h.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err == nil && mt == mimeSSE {
				return true
			}
		}
	}
	return false
}

// resumeField is the after_sequence field of a resumable stream's request.
func resumeField(m protoreflect.MethodDescriptor) protoreflect.FieldDescriptor {
	fd := m.Input().Fields().ByName("after_sequence")
	if fd == nil || fd.Kind() != protoreflect.Uint64Kind {
		return nil
	}
	return fd
}

// resume sets the request's after_sequence from Last-Event-ID when the body
// has none. A body that does not parse is left to the gateway to refuse.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request, m protoreflect.MethodDescriptor, lei string) bool {
	seq, err := strconv.ParseUint(lei, 10, 64)
	if err != nil {
		writeError(w, apiError(codes.InvalidArgument, ReasonBadLastEvent, "Last-Event-ID: want the sequence of the last event received, a decimal number"), http.StatusBadRequest)
		return false
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		h.fail(w, r, status.Error(codes.InvalidArgument, "reading the request body: "+err.Error()))
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(data))
	req := dynamicpb.NewMessage(m.Input())
	if len(bytes.TrimSpace(data)) > 0 {
		if err := protojson.Unmarshal(data, req); err != nil {
			return true
		}
	}
	fd := resumeField(m)
	if req.Has(fd) {
		return true // the body says where to start
	}
	req.Set(fd, protoreflect.ValueOfUint64(seq))
	out, err := protojson.Marshal(req)
	if err != nil {
		h.fail(w, r, status.Error(codes.Internal, "internal error"))
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(out))
	r.ContentLength = int64(len(out))
	r.Header.Del("Content-Length")
	return true
}

// resumeFrame re-attaches a bidirectional stream from Last-Event-ID: the
// first frame's start must name the execution_id to re-attach to, and
// its after_sequence, unless set, becomes lei. A stream that cannot
// resume (a start that names no execution) is refused.
func (h *Handler) resumeFrame(w http.ResponseWriter, fb *frameBody, full string, start protoreflect.Message, lei string) bool {
	if start == nil || start.Get(start.Descriptor().Fields().ByName("execution_id")).String() == "" {
		writeError(w, apiError(codes.FailedPrecondition, ReasonNotResumable,
			fmt.Sprintf("%s cannot resume from Last-Event-ID without an execution to re-attach to: a stream started without start.resumable ended with its connection; a resumable one re-attaches with start.executionId (from its started message)", full)), http.StatusBadRequest)
		return false
	}
	seq, err := strconv.ParseUint(lei, 10, 64)
	if err != nil {
		writeError(w, apiError(codes.InvalidArgument, ReasonBadLastEvent, "Last-Event-ID: want the sequence of the last event received, a decimal number"), http.StatusBadRequest)
		return false
	}
	after := start.Descriptor().Fields().ByName("after_sequence")
	if start.Has(after) {
		return true // the frame says where to start
	}
	start.Set(after, protoreflect.ValueOfUint64(seq))
	if err := fb.replaceFirst(fb.head); err != nil {
		writeError(w, status.New(codes.Internal, "internal error"), http.StatusInternalServerError)
		return false
	}
	return true
}

// events is GET /v1/threads/{thread_id}/events: Attach as SSE, for a
// browser's EventSource.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	c, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	m := h.methods[h.attach]
	req := dynamicpb.NewMessage(m.Input())
	if fd := m.Input().Fields().ByName("thread_id"); fd != nil {
		req.Set(fd, protoreflect.ValueOfString(r.PathValue("thread_id")))
	}
	if q := r.URL.Query().Get("after_sequence"); q != "" {
		seq, err := strconv.ParseUint(q, 10, 64)
		if err != nil {
			writeError(w, status.Convert(invalidField("after_sequence", "want a decimal number")), http.StatusBadRequest)
			return
		}
		req.Set(resumeField(m), protoreflect.ValueOfUint64(seq))
	}
	body, err := protojson.Marshal(req)
	if err != nil {
		h.fail(w, r, status.Error(codes.Internal, "internal error"))
		return
	}
	r2 := r.Clone(r.Context())
	r2.Method = http.MethodPost
	r2.URL.Path, r2.URL.RawPath, r2.URL.RawQuery = h.attach, "", ""
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	r2.Header.Set("Content-Type", "application/json")
	r2.Header.Set("Accept", mimeSSE)
	r2.Header.Del("Content-Length")
	h.call(w, r2, c)
}

// limitedBody is a request body of at most limit bytes; over records that
// a read went past it, so that the error is answered as 413.
type limitedBody struct {
	r     io.ReadCloser
	limit int64
	n     int64
	over  bool
}

type bodyKey struct{}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.n > b.limit {
		b.over = true
		return 0, errors.New("request body too large")
	}
	if int64(len(p)) > b.limit-b.n+1 {
		p = p[:b.limit-b.n+1]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.n > b.limit {
		b.over = true
		return n, errors.New("request body too large")
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.r.Close() }

func (b *limitedBody) failure() (*status.Status, int, bool) {
	if !b.over {
		return nil, 0, false
	}
	return apiError(codes.ResourceExhausted, ReasonBodyTooLarge, fmt.Sprintf("request body over %d bytes", b.limit)), http.StatusRequestEntityTooLarge, true
}
