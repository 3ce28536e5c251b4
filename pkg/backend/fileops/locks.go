package fileops

import "sync"

// pathLocks hands out one mutex per resolved file name, created on demand
// and dropped when its last holder leaves, so the map holds only the
// names being written right now.
type pathLocks struct {
	mu sync.Mutex
	m  map[string]*pathLock
}

type pathLock struct {
	mu   sync.Mutex
	refs int
}

// lock locks name and returns its unlock function.
func (l *pathLocks) lock(name string) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*pathLock)
	}
	pl := l.m[name]
	if pl == nil {
		pl = &pathLock{}
		l.m[name] = pl
	}
	pl.refs++
	l.mu.Unlock()

	pl.mu.Lock()
	return func() {
		pl.mu.Unlock()
		l.mu.Lock()
		if pl.refs--; pl.refs == 0 {
			delete(l.m, name)
		}
		l.mu.Unlock()
	}
}
