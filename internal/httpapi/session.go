package httpapi

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxSessions bounds the sessions one process keeps in memory; signing
// in past it ends the oldest.
const maxSessions = 10000

// SessionStore keeps browser sessions where every replica of a daemon
// finds them: agentd's thread store (store.Sessions, SQLite or the
// PostgreSQL its replicas share, adapted by internal/agentd; this package
// does not link the store, which sandboxd must not). A session is a row
// named by idHash holding sealed, until expires.
type SessionStore interface {
	// AddSession stores a session; those expired by now may be dropped.
	AddSession(ctx context.Context, idHash string, sealed []byte, created, expires, now time.Time) error
	// SessionSealed is the sealed token of idHash's session, found false
	// when there is none or it expired by now.
	SessionSealed(ctx context.Context, idHash string, now time.Time) (sealed []byte, found bool, err error)
	// DeleteSession removes idHash's session; a missing one is no error.
	DeleteSession(ctx context.Context, idHash string) error
}

// sessionKeeper maps opaque session ids to the token they stand for.
type sessionKeeper interface {
	create(ctx context.Context, token string) (id string, expires time.Time, err error)
	// get is the token of id; ok false for an unknown or expired session.
	get(ctx context.Context, id string) (token string, ok bool, err error)
	delete(ctx context.Context, id string) error
}

// newSessionID is 32 random bytes, as the cookie carries them.
func newSessionID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sessions keeps sessions in this process's memory only (sandboxd, and
// agentd when no store is given).
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

func (s *sessions) create(_ context.Context, token string) (string, time.Time, error) {
	id := newSessionID()
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
	return id, exp, nil
}

func (s *sessions) get(_ context.Context, id string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[id]
	if !ok {
		return "", false, nil
	}
	if time.Now().After(v.expires) {
		delete(s.m, id)
		return "", false, nil
	}
	return v.token, true, nil
}

func (s *sessions) delete(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
	return nil
}

// storedSessions keeps sessions in a SessionStore, so that a cookie made
// on one replica works on every replica sharing the store. The store
// never sees the session id or the token: a row is named by a hash of the
// id, and holds the token sealed (AES-256-GCM) with a key derived from the
// id, which only the browser's cookie carries. Reading the store (a
// backup, a stolen dump) yields neither a token nor a cookie.
type storedSessions struct {
	st  SessionStore
	ttl time.Duration
	now func() time.Time
}

// sessionKeys derives a session id's row name and sealing key; false for
// an id that is not one newSessionID makes.
func sessionKeys(id string) (idHash string, key []byte, ok bool) {
	raw, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil || len(raw) != 32 {
		return "", nil, false
	}
	h, err := hkdf.Key(sha256.New, raw, nil, "plumb http session id", 32)
	if err != nil {
		return "", nil, false
	}
	key, err = hkdf.Key(sha256.New, raw, nil, "plumb http session token key", 32)
	if err != nil {
		return "", nil, false
	}
	return hex.EncodeToString(h), key, true
}

func sessionAEAD(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

func (s *storedSessions) create(ctx context.Context, token string) (string, time.Time, error) {
	id := newSessionID()
	idHash, key, _ := sessionKeys(id)
	aead, err := sessionAEAD(key)
	if err != nil {
		return "", time.Time{}, err
	}
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	sealed := aead.Seal(nonce, nonce, []byte(token), []byte(idHash))
	now := s.now()
	exp := now.Add(s.ttl)
	if err := s.st.AddSession(ctx, idHash, sealed, now, exp, now); err != nil {
		return "", time.Time{}, fmt.Errorf("store the session: %w", err)
	}
	return id, exp, nil
}

func (s *storedSessions) get(ctx context.Context, id string) (string, bool, error) {
	idHash, key, ok := sessionKeys(id)
	if !ok {
		return "", false, nil
	}
	sealed, found, err := s.st.SessionSealed(ctx, idHash, s.now())
	if err != nil {
		return "", false, fmt.Errorf("read the session: %w", err)
	}
	if !found {
		return "", false, nil
	}
	aead, err := sessionAEAD(key)
	if err != nil {
		return "", false, err
	}
	if len(sealed) < aead.NonceSize() {
		return "", false, nil
	}
	tok, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], []byte(idHash))
	if err != nil {
		return "", false, nil // not sealed by this id: no session
	}
	return string(tok), true, nil
}

func (s *storedSessions) delete(ctx context.Context, id string) error {
	idHash, _, ok := sessionKeys(id)
	if !ok {
		return nil
	}
	return s.st.DeleteSession(ctx, idHash)
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
	id, exp, err := h.sessions.create(r.Context(), req.Token)
	if err != nil {
		h.lg.Error("browser session not created", zap.Error(err))
		writeError(w, apiError(codes.Unavailable, ReasonSessionStore, "the session could not be stored: try again"), http.StatusServiceUnavailable)
		return
	}
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
		if err := h.sessions.delete(r.Context(), ck.Value); err != nil {
			h.lg.Error("browser session not deleted", zap.Error(err))
			writeError(w, apiError(codes.Unavailable, ReasonSessionStore, "the session could not be ended: try again"), http.StatusServiceUnavailable)
			return
		}
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteStrictMode,
	})
	w.WriteHeader(http.StatusNoContent)
}
