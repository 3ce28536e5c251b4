package kvfs

import (
	"context"
	"sync"
)

// pathLocks is a set of per-path mutexes that waiters can abandon when
// their context ends. Entries exist only while held or awaited.
type pathLocks struct {
	mu sync.Mutex
	m  map[string]*pathLock
}

type pathLock struct {
	ch   chan struct{} // holds a token while the lock is taken
	refs int           // holders and waiters
}

// lock takes the lock of key, waiting until it is free or ctx ends, and
// returns the function that releases it.
func (l *pathLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	l.mu.Lock()
	pl := l.m[key]
	if pl == nil {
		pl = &pathLock{ch: make(chan struct{}, 1)}
		l.m[key] = pl
	}
	pl.refs++
	l.mu.Unlock()

	select {
	case pl.ch <- struct{}{}:
		return func() {
			<-pl.ch
			l.release(key, pl)
		}, nil
	case <-ctx.Done():
		l.release(key, pl)
		return nil, ctx.Err()
	}
}

func (l *pathLocks) release(key string, pl *pathLock) {
	l.mu.Lock()
	pl.refs--
	if pl.refs == 0 {
		delete(l.m, key)
	}
	l.mu.Unlock()
}
