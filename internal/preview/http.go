package preview

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend"
	sandboxbackend "github.com/plumbhq/plumb/pkg/backend/sandboxclient"
	"github.com/plumbhq/plumb/pkg/store"
)

// CSP is the Content-Security-Policy every preview response carries: the
// page runs in an opaque origin (no allow-same-origin), so it gets no
// cookies, storage or service workers of the shared preview origin and no
// script access to other previews (docs/security.md, Preview URLs).
const CSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// PathPrefix starts every preview URL's path: /p/TOKEN/…
const PathPrefix = "/p/"

// Response headers a box may not set on the shared preview origin.
var droppedResponseHeaders = []string{"Set-Cookie", "Set-Cookie2", "Clear-Site-Data", "Service-Worker-Allowed"}

// Request headers that never reach the box: the client's credentials.
var droppedRequestHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie"}

// target is where one request goes, for the transport's dial.
type target struct {
	tenant, sandboxID string
	port              int
}

type targetKey struct{}

// Handler serves PathPrefix: verify the token, check the record, and
// reverse-proxy to the box (WebSocket upgrades included).
func (s *Service) Handler() http.Handler {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			t, ok := ctx.Value(targetKey{}).(target)
			if !ok {
				return nil, errors.New("preview: no target")
			}
			return s.cfg.Dial(ctx, t.tenant, t.sandboxID, t.port)
		},
		// An idle connection holds one of the box's forward slots.
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
		ForceAttemptHTTP2:   false,
	}
	rp := &httputil.ReverseProxy{
		Rewrite:        func(*httputil.ProxyRequest) {}, // set per request below
		Transport:      tr,
		ModifyResponse: secureResponse,
		ErrorHandler:   s.proxyError,
	}
	mux := http.NewServeMux()
	mux.HandleFunc(PathPrefix, func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, rp) })
	return mux
}

func (s *Service) serve(w http.ResponseWriter, r *http.Request, rp *httputil.ReverseProxy) {
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Cache-Control", "no-store")
	esc := strings.TrimPrefix(r.URL.EscapedPath(), PathPrefix)
	tok, rest, slash := strings.Cut(esc, "/")
	id, exp, err := s.cfg.Keys.Verify(tok)
	if err != nil {
		http.Error(w, "no such preview", http.StatusNotFound)
		return
	}
	now := s.cfg.Now()
	if !exp.After(now) {
		http.Error(w, "this preview has expired", http.StatusGone)
		return
	}
	if !slash {
		// Relative links need the trailing slash.
		http.Redirect(w, r, "./"+tok+"/", http.StatusFound)
		return
	}
	rec, sandboxID, status, msg := s.check(r.Context(), id)
	if status != 0 {
		http.Error(w, msg, status)
		return
	}
	path, err := url.PathUnescape("/" + rest)
	if err != nil {
		http.Error(w, "bad path", http.StatusBadRequest)
		return
	}
	// The request lives at most until the preview expires, and while its
	// record stays live (an open WebSocket closes on revocation).
	ctx, cancel := context.WithDeadline(r.Context(), rec.Expires)
	defer cancel()
	ctx = context.WithValue(ctx, targetKey{}, target{tenant: rec.Tenant, sandboxID: sandboxID, port: rec.Port})
	go s.watch(ctx, cancel, id)

	p := *rp
	p.Rewrite = func(pr *httputil.ProxyRequest) {
		out := pr.Out
		out.URL.Scheme = "http"
		// The pool key: one preview's connections are never reused for
		// another's.
		out.URL.Host = "p-" + rec.ID + ":" + strconv.Itoa(rec.Port)
		out.URL.Path, out.URL.RawPath = path, "/"+rest
		out.Host = "localhost:" + strconv.Itoa(rec.Port)
		for _, h := range droppedRequestHeaders {
			out.Header.Del(h)
		}
	}
	p.ServeHTTP(w, r.WithContext(ctx))
}

// check reads preview id's record and its thread's sandbox; status is the
// HTTP status of a refusal (0 when the request may go on).
func (s *Service) check(ctx context.Context, id string) (rec store.Preview, sandboxID string, status int, msg string) {
	rec, err := s.cfg.Store.Preview(ctx, id)
	switch {
	case errors.Is(err, store.ErrPreviewNotFound):
		return rec, "", http.StatusNotFound, "no such preview"
	case err != nil:
		s.lg.Warn("preview record unreadable", zap.String("preview-id", id), zap.Error(err))
		return rec, "", http.StatusServiceUnavailable, "the preview could not be checked; retry"
	case rec.Revoked:
		return rec, "", http.StatusNotFound, "no such preview"
	case !rec.Expires.After(s.cfg.Now()):
		return rec, "", http.StatusGone, "this preview has expired"
	}
	t, err := s.cfg.Store.Thread(ctx, rec.ThreadID)
	switch {
	case errors.Is(err, agent.ErrThreadNotFound):
		return rec, "", http.StatusNotFound, "no such preview"
	case err != nil:
		s.lg.Warn("preview thread unreadable", zap.String("preview-id", id), zap.Error(err))
		return rec, "", http.StatusServiceUnavailable, "the preview could not be checked; retry"
	case t.SandboxID == "":
		return rec, "", http.StatusBadGateway, "the preview's sandbox is gone (its thread has no sandbox now)"
	}
	return rec, t.SandboxID, 0, ""
}

// watch cancels a request's context once its preview is revoked or gone,
// reading the record every Recheck while the request lasts.
func (s *Service) watch(ctx context.Context, cancel context.CancelFunc, id string) {
	tick := time.NewTicker(s.cfg.Recheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rec, err := s.cfg.Store.Preview(ctx, id)
		if errors.Is(err, store.ErrPreviewNotFound) || err == nil && !rec.Live(s.cfg.Now()) {
			s.lg.Info("closing a connection of a revoked preview", zap.String("preview-id", id))
			cancel()
			return
		}
	}
}

// secureResponse drops what a box may not set on the shared origin and
// adds the sandboxing CSP (a box's own CSP stays: both apply).
func secureResponse(r *http.Response) error {
	for _, h := range droppedResponseHeaders {
		r.Header.Del(h)
	}
	r.Header.Add("Content-Security-Policy", CSP)
	r.Header.Set("Referrer-Policy", "no-referrer")
	return nil
}

// proxyError answers a request the box could not serve, saying why in a
// sentence (never with the token).
func (s *Service) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	t, _ := r.Context().Value(targetKey{}).(target)
	code, msg := http.StatusBadGateway, "the preview's sandbox could not be reached"
	switch backend.CodeOf(err) {
	case backend.CodeConnectionRefused:
		msg = fmt.Sprintf("nothing listens on port %d in the sandbox", t.port)
	case backend.CodeResourceExhausted:
		code, msg = http.StatusServiceUnavailable, "the sandbox has too many open preview connections; retry"
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		code, msg = http.StatusGone, "this preview has expired or was revoked"
	}
	if errors.Is(err, sandboxbackend.ErrGone) {
		msg = "the preview's sandbox is gone"
	}
	s.lg.Info("preview request failed", zap.String("sandbox-id", t.sandboxID), zap.Int("port", t.port), zap.Int("status", code), zap.Error(err))
	http.Error(w, msg, code)
}
