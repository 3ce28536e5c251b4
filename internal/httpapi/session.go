package httpapi

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxSessions bounds the sessions one process keeps; signing in past it
// ends the oldest.
const maxSessions = 10000

// sessions maps opaque session ids to the token they stand for, in this
// process's memory only.
type sessions struct {
	ttl time.Duration
	max int

	mu sync.Mutex
	m  map[string]session
}

type session struct {
	token   string
	expires time.Time
}

func newSessions(ttl time.Duration, max int) *sessions {
	return &sessions{ttl: ttl, max: max, m: map[string]session{}}
}

func (s *sessions) create(token string) (string, time.Time) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	id := base64.RawURLEncoding.EncodeToString(b)
	now := time.Now()
	exp := now.Add(s.ttl)
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.m {
		if now.After(v.expires) {
			delete(s.m, k)
		}
	}
	for len(s.m) >= s.max {
		oldest, at := "", time.Time{}
		for k, v := range s.m {
			if oldest == "" || v.expires.Before(at) {
				oldest, at = k, v.expires
			}
		}
		delete(s.m, oldest)
	}
	s.m[id] = session{token: token, expires: exp}
	return id, exp
}

func (s *sessions) get(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[id]
	if !ok {
		return "", false
	}
	if time.Now().After(v.expires) {
		delete(s.m, id)
		return "", false
	}
	return v.token, true
}

func (s *sessions) delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// secure reports whether a cookie set in answer to r gets Secure: the
// request came over TLS, or through a proxy that says it did.
func secure(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

// createSession is POST /v1/session {"token": ...}: the token is checked
// like a bearer token, and the cookie holds a new session id for it.
func (h *Handler) createSession(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Refuse != "" {
		writeError(w, apiError(codes.Unauthenticated, ReasonHTTPAPIRefuse, h.cfg.Refuse), http.StatusUnauthorized)
		return
	}
	if !isJSON(r) {
		writeError(w, apiError(codes.InvalidArgument, ReasonNotJSON, "send the token as JSON with Content-Type: application/json"), http.StatusUnsupportedMediaType)
		return
	}
	var req struct {
		Token string `json:"token"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, status.Convert(invalidField("token", `want {"token": "<bearer token>"}`)), http.StatusBadRequest)
		return
	}
	if err := h.cfg.Check(req.Token); err != nil {
		st, code := statusOf(err)
		writeError(w, st, code)
		return
	}
	id, exp := h.sessions.create(req.Token)
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: id, Path: "/", Expires: exp, MaxAge: int(h.cfg.SessionTTL / time.Second),
		HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteStrictMode,
	})
	w.WriteHeader(http.StatusNoContent)
}

// deleteSession is DELETE /v1/session: the session ends and the cookie is
// cleared.
func (h *Handler) deleteSession(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(SessionCookie); err == nil {
		h.sessions.delete(ck.Value)
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteStrictMode,
	})
	w.WriteHeader(http.StatusNoContent)
}
