package backend

import (
	"context"
	"sync"
)

// WorkerLost says that an operation failed because the sandbox worker
// holding its sandbox could not be reached (or is not part of the fleet).
// The tool layer turns it into a run event naming the worker, next to the
// failed call's result.
type WorkerLost struct {
	// Worker is the worker's name.
	Worker string
	// SandboxID is the sandbox the operation needed.
	SandboxID string
	// Message is the error the operation failed with.
	Message string
}

type lostKey struct{}

type lostList struct {
	mu   sync.Mutex
	list []WorkerLost
}

// WithLostWorkers returns a context that collects the WorkerLost reports of
// the operations run with it, and a function returning them in the order
// they arrived, one per worker and sandbox.
func WithLostWorkers(ctx context.Context) (context.Context, func() []WorkerLost) {
	l := &lostList{}
	return context.WithValue(ctx, lostKey{}, l), func() []WorkerLost {
		l.mu.Lock()
		defer l.mu.Unlock()
		return append([]WorkerLost(nil), l.list...)
	}
}

// ReportLost leaves a WorkerLost report for the caller of the operation
// ctx belongs to; it reports whether a collector took it.
func ReportLost(ctx context.Context, w WorkerLost) bool {
	l, ok := ctx.Value(lostKey{}).(*lostList)
	if !ok || w.Worker == "" {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, o := range l.list {
		if o.Worker == w.Worker && o.SandboxID == w.SandboxID {
			return true
		}
	}
	l.list = append(l.list, w)
	return true
}
