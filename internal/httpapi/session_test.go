package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
)

// seenStore is a SessionStore over a real thread store (as agentd's
// adapter) that keeps every row it was given.
type seenStore struct {
	st   store.Sessions
	mu   sync.Mutex
	rows []store.Session
}

func (s *seenStore) AddSession(ctx context.Context, idHash string, sealed []byte, created, expires, now time.Time) error {
	se := store.Session{IDHash: idHash, Sealed: sealed, Created: created, Expires: expires}
	s.mu.Lock()
	s.rows = append(s.rows, se)
	s.mu.Unlock()
	return s.st.AddSession(ctx, se, now)
}

func (s *seenStore) SessionSealed(ctx context.Context, idHash string, now time.Time) ([]byte, bool, error) {
	se, err := s.st.Session(ctx, idHash, now)
	if errors.Is(err, store.ErrSessionNotFound) {
		return nil, false, nil
	}
	return se.Sealed, err == nil, err
}

func (s *seenStore) DeleteSession(ctx context.Context, idHash string) error {
	return s.st.DeleteSession(ctx, idHash)
}

// TestStoredSessions: two handlers (two replicas) over one thread store. A
// cookie made on one works on the other, signing out on either ends it on
// both, and the store holds neither the session id nor the token.
func TestStoredSessions(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agentd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	seen := &seenStore{st: st}
	var replicas []string
	for range 2 {
		replicas = append(replicas, newTestAPI(t, nil, func(c *Config) { c.Sessions = seen }))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	do := func(method, url, cookie, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if cookie != "" {
			req.AddCookie(&http.Cookie{Name: SessionCookie, Value: cookie})
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	signIn := func(base string) string {
		t.Helper()
		resp, body := do(http.MethodPost, base+"/v1/session", "", `{"token":"`+testToken+`"}`)
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("sign in: HTTP %d %s", resp.StatusCode, body)
		}
		for _, c := range resp.Cookies() {
			if c.Name == SessionCookie {
				return c.Value
			}
		}
		t.Fatal("no session cookie")
		return ""
	}
	// authenticated reports whether the cookie authenticates on base: the
	// token check passes and the call goes on (here to a gRPC server
	// without services: UNIMPLEMENTED, not UNAUTHENTICATED).
	authenticated := func(base, cookie string) bool {
		t.Helper()
		resp, body := do(http.MethodPost, base+"/plumb.v1.AgentService/ListAgents", cookie, `{}`)
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			if !strings.Contains(body, ReasonSession) {
				t.Fatalf("refused, but not for the session: %s", body)
			}
			return false
		case http.StatusNotImplemented:
			return true
		}
		t.Fatalf("HTTP %d %s", resp.StatusCode, body)
		return false
	}

	ck := signIn(replicas[0])
	if !authenticated(replicas[0], ck) || !authenticated(replicas[1], ck) {
		t.Fatal("a session made on one replica does not work on both")
	}
	seen.mu.Lock()
	rows := append([]store.Session(nil), seen.rows...)
	seen.mu.Unlock()
	if len(rows) != 1 {
		t.Fatalf("%d rows stored", len(rows))
	}
	for _, secret := range []string{testToken, ck} {
		if strings.Contains(rows[0].IDHash, secret) || bytes.Contains(rows[0].Sealed, []byte(secret)) {
			t.Fatalf("the store holds %q: %+v", secret, rows[0])
		}
	}
	// A cookie of the right shape that no sign-in made, and one that is
	// not a session id at all.
	other := newSessionID()
	if authenticated(replicas[1], other) || authenticated(replicas[1], "not-a-session") {
		t.Fatal("an unknown cookie authenticated")
	}
	// Signing out on the other replica ends it on both.
	ck2 := signIn(replicas[1])
	if resp, body := do(http.MethodDelete, replicas[1]+"/v1/session", ck, ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("sign out: HTTP %d %s", resp.StatusCode, body)
	}
	if authenticated(replicas[0], ck) || authenticated(replicas[1], ck) {
		t.Fatal("a signed-out session still works")
	}
	if !authenticated(replicas[0], ck2) {
		t.Fatal("signing out one session ended another")
	}
}

// TestStoredSessionExpiry: a stored session ends at its expiry, on every
// replica, whatever the cookie's own Max-Age.
func TestStoredSessionExpiry(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agentd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	ss := &storedSessions{st: &seenStore{st: st}, ttl: time.Hour, now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	ctx := context.Background()
	id, exp, err := ss.create(ctx, "tok")
	if err != nil || !exp.Equal(now.Add(time.Hour)) {
		t.Fatalf("create: %v %v", exp, err)
	}
	if tok, ok, err := ss.get(ctx, id); err != nil || !ok || tok != "tok" {
		t.Fatalf("get = %q %v %v", tok, ok, err)
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	if _, ok, err := ss.get(ctx, id); err != nil || ok {
		t.Fatalf("get after the expiry: %v %v", ok, err)
	}
}
