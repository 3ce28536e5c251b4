package store

import (
	"context"
	"errors"
	"time"
)

// Preview is the record of a preview URL (docs/security.md, Preview
// URLs): a port of a thread's sandbox made reachable until Expires unless
// Revoked. The URL's token names the record by ID; every agentd replica
// checks the record on every request, so a revocation holds on all.
type Preview struct {
	ID       string
	ThreadID string
	Tenant   string
	Port     int
	Created  time.Time
	Expires  time.Time
	Revoked  bool
}

// Live reports whether p still opens its port at now.
func (p Preview) Live(now time.Time) bool { return !p.Revoked && p.Expires.After(now) }

// Errors of the preview records.
var (
	// ErrPreviewNotFound: no preview has that id (it never existed, or
	// its thread was deleted).
	ErrPreviewNotFound = errors.New("preview not found")
	// ErrPreviewLimit: the thread already has the most live previews
	// allowed.
	ErrPreviewLimit = errors.New("too many live previews")
)

// Previews keeps preview records with the threads (deleting a thread
// deletes its previews). Every implementation must pass
// storetest.RunPreviews.
type Previews interface {
	// AddPreview stores p unless p's thread already has limit live
	// previews at now (ErrPreviewLimit); a missing thread is
	// agent.ErrThreadNotFound. Records of the thread that expired by now
	// are dropped on the way.
	AddPreview(ctx context.Context, p Preview, limit int, now time.Time) error
	// Preview returns the record of id, or ErrPreviewNotFound.
	Preview(ctx context.Context, id string) (Preview, error)
	// ListPreviews returns threadID's previews that have not expired by
	// now (revoked ones included), newest first.
	ListPreviews(ctx context.Context, threadID string, now time.Time) ([]Preview, error)
	// RevokePreview marks id revoked (again is fine), or returns
	// ErrPreviewNotFound.
	RevokePreview(ctx context.Context, id string) error
}
