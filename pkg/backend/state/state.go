package state

import (
	"bytes"
	"fmt"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/state/kvfs"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// File is one file of the state: raw content, its encoding (utf-8 when the
// content is valid UTF-8, else base64), and RFC 3339 UTC created_at and
// modified_at. Its JSON form is {content, encoding, created_at,
// modified_at}, with the content as text or base64, and round-trips
// byte-identically.
type File = kvfs.File

// Backend is the State backend: the files of one thread, held in memory,
// with the docs/file-tools.md §4 semantics of every backend. It implements backend.Backend
// (not backend.Executor) and is safe for concurrent use.
//
// Persistence is the owner's job: Files and Load snapshot and restore the
// whole state, TakeChanges yields what changed since the last call.
type Backend struct {
	*kvfs.FS
	kv *memKV
}

var _ backend.Backend = (*Backend)(nil)

type options struct {
	now func() time.Time
	lim kvfs.Limits
}

// Option configures New.
type Option func(*options)

// WithClock sets the clock of created_at and modified_at (default
// time.Now).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithLimits sets the configurable caps (media read, write/edit, upload and
// download item); zero fields keep the defaults.
func WithLimits(l kvfs.Limits) Option { return func(o *options) { o.lim = l } }

// New returns an empty State backend.
func New(opts ...Option) *Backend {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	kv := newMemKV()
	return &Backend{FS: kvfs.New(kv, o.now, o.lim), kv: kv}
}

// Files returns a snapshot of every file, keyed by normalized path. The
// map and the contents are copies the caller owns.
func (b *Backend) Files() map[string]File {
	b.kv.mu.RLock()
	defer b.kv.mu.RUnlock()
	out := make(map[string]File, len(b.kv.files))
	for k, f := range b.kv.files {
		c := f.File
		c.Content = bytes.Clone(c.Content)
		out[k] = c
	}
	return out
}

// Load replaces the whole state with files (a snapshot from Files, or one
// rebuilt with Apply) and clears the change set: the loaded state is taken
// to be the persisted one. Every key must be a normalized path other than
// "/", and no key may lie under another (a key cannot be both a file and
// a directory); otherwise Load returns an error and changes nothing. The
// encoding is recomputed from the content; timestamps are kept. Load
// copies the contents.
func (b *Backend) Load(files map[string]File) error {
	for k := range files {
		if err := checkKey(k); err != nil {
			return err
		}
		for d := vpath.Dir(k); d != "/"; d = vpath.Dir(d) {
			if _, ok := files[d]; ok {
				return fmt.Errorf("state: load: %s is a file and also has %s under it", d, k)
			}
		}
	}
	b.kv.mu.Lock()
	defer b.kv.mu.Unlock()
	b.kv.files, b.kv.keys = make(map[string]*memFile, len(files)), make([]string, 0, len(files))
	for k, f := range files {
		f.Encoding = kvfs.EncodingOf(f.Content)
		b.kv.put(k, f) // copies the content; revisions keep counting up
	}
	b.kv.changed = map[string]struct{}{}
	return nil
}

func checkKey(k string) error {
	n, err := vpath.Normalize(k)
	switch {
	case err != nil:
		return fmt.Errorf("state: load: %w", err)
	case n != k:
		return fmt.Errorf("state: load: key %q is not normalized (want %q)", k, n)
	case k == "/":
		return fmt.Errorf("state: load: the root %q cannot be a file", k)
	}
	return nil
}

// TakeChanges returns every path written, edited, uploaded or deleted since
// the previous TakeChanges (or Load, or New), mapped to its current file,
// or to nil when it no longer exists, and empties the change set. The
// files are copies the caller owns.
//
// It is the persistence hook: after each step the owner applies the result
// to its stored copy (upsert the non-nil entries, delete the nil ones; see
// Apply) in the same transaction as the rest of the checkpoint. A change
// made while the owner persists lands in the next TakeChanges. If
// persisting fails, the taken changes are not restored: persist Files in
// full instead.
func (b *Backend) TakeChanges() map[string]*File {
	b.kv.mu.Lock()
	defer b.kv.mu.Unlock()
	if len(b.kv.changed) == 0 {
		return nil
	}
	out := make(map[string]*File, len(b.kv.changed))
	for k := range b.kv.changed {
		if f, ok := b.kv.files[k]; ok {
			c := f.File
			c.Content = bytes.Clone(c.Content)
			out[k] = &c
		} else {
			out[k] = nil
		}
	}
	b.kv.changed = map[string]struct{}{}
	return out
}

// Apply applies changes from TakeChanges to a snapshot in place: a nil
// file deletes its path, any other replaces it. Applying every change set
// in order to a snapshot yields the state's current Files.
func Apply(files map[string]File, changes map[string]*File) {
	for k, f := range changes {
		if f == nil {
			delete(files, k)
		} else {
			files[k] = *f
		}
	}
}
