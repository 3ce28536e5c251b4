package state

import (
	"bytes"
	"context"
	"slices"
	"sort"
	"sync"

	"github.com/plumbhq/plumb/pkg/backend/state/kvfs"
)

// memKV is the in-memory kvfs.KV of a State backend: a map for values, a
// sorted key slice for range scans, and the change set that TakeChanges
// drains. One RWMutex guards everything; Update holds it for writing, so
// transactions are serialized.
type memKV struct {
	mu      sync.RWMutex
	files   map[string]*memFile
	keys    []string // sorted bytewise
	rev     int64
	changed map[string]struct{}
}

type memFile struct {
	kvfs.File
	rev int64
}

func newMemKV() *memKV {
	return &memKV{files: map[string]*memFile{}, changed: map[string]struct{}{}}
}

func (m *memKV) entry(key string, f *memFile) kvfs.Entry {
	return kvfs.Entry{Key: key, Size: int64(len(f.Content)), CreatedAt: f.CreatedAt, ModifiedAt: f.ModifiedAt, Rev: f.rev}
}

// The read methods are shared by memKV (which locks) and memTx (which runs
// under Update's lock).

func (m *memKV) stat(key string) (kvfs.Entry, bool) {
	f, ok := m.files[key]
	if !ok {
		return kvfs.Entry{}, false
	}
	return m.entry(key, f), true
}

func (m *memKV) get(key string) (kvfs.File, kvfs.Entry, bool) {
	f, ok := m.files[key]
	if !ok {
		return kvfs.File{}, kvfs.Entry{}, false
	}
	return f.File, m.entry(key, f), true
}

func (m *memKV) scan(from, to string, limit int) []kvfs.Entry {
	var out []kvfs.Entry
	for i := sort.SearchStrings(m.keys, from); i < len(m.keys) && len(out) < limit; i++ {
		k := m.keys[i]
		if k >= to {
			break
		}
		out = append(out, m.entry(k, m.files[k]))
	}
	return out
}

func (m *memKV) Stat(_ context.Context, key string) (kvfs.Entry, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.stat(key)
	return e, ok, nil
}

func (m *memKV) Get(_ context.Context, key string) (kvfs.File, kvfs.Entry, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	f, e, ok := m.get(key)
	return f, e, ok, nil
}

func (m *memKV) Scan(_ context.Context, from, to string, limit int) ([]kvfs.Entry, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.scan(from, to, limit), nil
}

// Update runs fn with the write lock held. memKV has no rollback: kvfs
// mutates only after its checks pass, and a Put or DeleteTree here cannot
// fail.
func (m *memKV) Update(ctx context.Context, fn func(kvfs.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return fn(memTx{m})
}

// memTx is the Tx of memKV.Update; the lock is already held.
type memTx struct{ m *memKV }

func (t memTx) Stat(_ context.Context, key string) (kvfs.Entry, bool, error) {
	e, ok := t.m.stat(key)
	return e, ok, nil
}

func (t memTx) Get(_ context.Context, key string) (kvfs.File, kvfs.Entry, bool, error) {
	f, e, ok := t.m.get(key)
	return f, e, ok, nil
}

func (t memTx) Scan(_ context.Context, from, to string, limit int) ([]kvfs.Entry, error) {
	return t.m.scan(from, to, limit), nil
}

// Put stores a private copy of f's content: callers may reuse their
// buffers, and stored content is never modified in place.
func (t memTx) Put(_ context.Context, key string, f kvfs.File) error {
	t.m.put(key, f)
	return nil
}

func (t memTx) DeleteTree(_ context.Context, key string) (int, error) {
	return t.m.deleteTree(key), nil
}

func (m *memKV) put(key string, f kvfs.File) {
	f.Content = bytes.Clone(f.Content)
	if f.Content == nil {
		f.Content = []byte{}
	}
	if _, ok := m.files[key]; !ok {
		i, _ := slices.BinarySearch(m.keys, key)
		m.keys = slices.Insert(m.keys, i, key)
	}
	m.rev++
	m.files[key] = &memFile{File: f, rev: m.rev}
	m.touch(key)
}

func (m *memKV) deleteTree(key string) int {
	// The exact key, then the contiguous range [key+"/", key+"0"); keys
	// such as key+"-x" sort between the two and stay.
	lo, hi := sort.SearchStrings(m.keys, key+"/"), sort.SearchStrings(m.keys, key+"0")
	doomed := slices.Clone(m.keys[lo:hi])
	m.keys = slices.Delete(m.keys, lo, hi)
	if i, ok := slices.BinarySearch(m.keys, key); ok {
		m.keys = slices.Delete(m.keys, i, i+1)
		doomed = append(doomed, key)
	}
	for _, k := range doomed {
		delete(m.files, k)
		m.touch(k)
	}
	return len(doomed)
}

// touch records a change of key for TakeChanges.
func (m *memKV) touch(key string) {
	m.changed[key] = struct{}{}
}
