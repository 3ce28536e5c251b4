package backend

import (
	"context"
	"slices"
	"sync"
)

// Notices let a backend tell the caller of one operation something the
// result types have no field for, such as "the sandbox behind this path was
// replaced and its workspace is empty" (docs/agent-core.md §1). The tool layer opens
// a collector per tool call with WithNotices and shows what it collected in
// that call's result; without a collector Notify does nothing.

type noticesKey struct{}

type notices struct {
	mu   sync.Mutex
	list []string
}

// WithNotices returns a context that collects the notices backends leave
// during the operations run with it, and a function returning them in the
// order they arrived, each once. A nested WithNotices collects for itself.
func WithNotices(ctx context.Context) (context.Context, func() []string) {
	n := &notices{}
	return context.WithValue(ctx, noticesKey{}, n), func() []string {
		n.mu.Lock()
		defer n.mu.Unlock()
		return slices.Clone(n.list)
	}
}

// Notify leaves notice for the caller of the operation ctx belongs to. It
// reports whether a collector took it (false without WithNotices), so a
// backend can keep a notice nobody has seen for its next caller.
func Notify(ctx context.Context, notice string) bool {
	n, ok := ctx.Value(noticesKey{}).(*notices)
	if !ok || notice == "" {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !slices.Contains(n.list, notice) {
		n.list = append(n.list, notice)
	}
	return true
}
