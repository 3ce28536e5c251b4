package store

import (
	"context"
	"errors"
	"time"
)

// Session is a browser's sign-in to a daemon's HTTP API (docs/http.md,
// Authentication), kept in the shared store so that its cookie works on
// every agentd replica. The store never holds the session id or the
// bearer token: IDHash names the session (a hash of its id), and Sealed is
// the token sealed with a key derived from the id, which only the cookie
// carries.
type Session struct {
	IDHash  string
	Sealed  []byte
	Created time.Time
	Expires time.Time
}

// ErrSessionNotFound: no session has that id hash, or it expired.
var ErrSessionNotFound = errors.New("session not found")

// Sessions keeps browser sessions. Every implementation must pass
// storetest.RunSessions.
type Sessions interface {
	// AddSession stores s; sessions expired by now are dropped on the way.
	AddSession(ctx context.Context, s Session, now time.Time) error
	// Session returns the session of idHash unless it expired by now
	// (ErrSessionNotFound).
	Session(ctx context.Context, idHash string, now time.Time) (Session, error)
	// DeleteSession removes idHash's session; a missing one is no error.
	DeleteSession(ctx context.Context, idHash string) error
	// DeleteExpiredSessions removes up to limit sessions expired by now
	// and returns how many (the retention sweeper's pass, so that expired
	// rows go even when nobody signs in).
	DeleteExpiredSessions(ctx context.Context, now time.Time, limit int) (int, error)
}
