package agentd

import (
	"context"
	"errors"
	"time"

	"github.com/plumbhq/plumb/internal/httpapi"
	"github.com/plumbhq/plumb/pkg/store"
)

// HTTPSessions is the thread store as the HTTP API's browser session
// store, so that a session cookie works on every replica sharing the
// store (docs/http.md); nil when the store keeps no sessions.
func (a *Agentd) HTTPSessions() httpapi.SessionStore {
	ss, ok := a.Store.(store.Sessions)
	if !ok {
		return nil
	}
	return httpSessions{ss}
}

// httpSessions adapts store.Sessions to httpapi.SessionStore (httpapi does
// not link pkg/store: sandboxd serves it too).
type httpSessions struct{ st store.Sessions }

func (h httpSessions) AddSession(ctx context.Context, idHash string, sealed []byte, created, expires, now time.Time) error {
	return h.st.AddSession(ctx, store.Session{IDHash: idHash, Sealed: sealed, Created: created, Expires: expires}, now)
}

func (h httpSessions) SessionSealed(ctx context.Context, idHash string, now time.Time) ([]byte, bool, error) {
	se, err := h.st.Session(ctx, idHash, now)
	if errors.Is(err, store.ErrSessionNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return se.Sealed, true, nil
}

func (h httpSessions) DeleteSession(ctx context.Context, idHash string) error {
	return h.st.DeleteSession(ctx, idHash)
}
