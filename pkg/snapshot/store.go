package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Store is where snapshots live: content-addressed chunks and manifests,
// by key. Keys are made by Repo (lower-case hex and '/', never "..");
// a Store only has to keep bytes. Get of a missing key returns an error
// wrapping ErrNotExist. Puts of one key with the same bytes may race: the
// last one wins, and both wrote the same bytes.
type Store interface {
	PutChunk(ctx context.Context, key string, data []byte) error
	GetChunk(ctx context.Context, key string) ([]byte, error)
	HasChunk(ctx context.Context, key string) (bool, error)
	DeleteChunk(ctx context.Context, key string) error
	PutManifest(ctx context.Context, key string, data []byte) error
	GetManifest(ctx context.Context, key string) ([]byte, error)
	// ListManifests returns the keys of the manifests under prefix
	// (which ends with '/'), sorted.
	ListManifests(ctx context.Context, prefix string) ([]string, error)
	DeleteManifest(ctx context.Context, key string) error
}

// Dir is a Store in a local directory (the default of a single worker):
// chunks/<key> and manifests/<key>, each written to a temporary file and
// renamed into place, so a reader never sees part of an object.
type Dir struct{ root string }

var _ Store = (*Dir)(nil)

// NewDir opens (creating it, 0700) a local store in dir.
func NewDir(dir string) (*Dir, error) {
	for _, sub := range []string{"chunks", "manifests", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("snapshot store: %w", err)
		}
	}
	return &Dir{root: dir}, nil
}

func (d *Dir) path(kind, key string) (string, error) {
	if !validKey(key) {
		return "", fmt.Errorf("snapshot store: bad key %q", key)
	}
	return filepath.Join(d.root, kind, filepath.FromSlash(key)), nil
}

// validKey: lower-case letters, digits, '-', '_' and '/' between non-empty
// parts.
func validKey(key string) bool {
	if key == "" || len(key) > 512 {
		return false
	}
	for _, part := range strings.Split(key, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
		for _, r := range part {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

func (d *Dir) put(kind, key string, data []byte) error {
	p, err := d.path(kind, key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Join(d.root, "tmp"), "put-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

func (d *Dir) get(kind, key string) ([]byte, error) {
	p, err := d.path(kind, key)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s %s: %w", kind, key, ErrNotExist)
	}
	return b, err
}

func (d *Dir) del(kind, key string) error {
	p, err := d.path(kind, key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// PutChunk stores a chunk.
func (d *Dir) PutChunk(_ context.Context, key string, data []byte) error {
	return d.put("chunks", key, data)
}

// GetChunk reads a chunk.
func (d *Dir) GetChunk(_ context.Context, key string) ([]byte, error) { return d.get("chunks", key) }

// HasChunk reports whether a chunk is stored.
func (d *Dir) HasChunk(_ context.Context, key string) (bool, error) {
	p, err := d.path("chunks", key)
	if err != nil {
		return false, err
	}
	_, err = os.Stat(p)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

// DeleteChunk removes a chunk (a missing one is no error).
func (d *Dir) DeleteChunk(_ context.Context, key string) error { return d.del("chunks", key) }

// PutManifest stores a manifest.
func (d *Dir) PutManifest(_ context.Context, key string, data []byte) error {
	return d.put("manifests", key, data)
}

// GetManifest reads a manifest.
func (d *Dir) GetManifest(_ context.Context, key string) ([]byte, error) {
	return d.get("manifests", key)
}

// DeleteManifest removes a manifest (a missing one is no error).
func (d *Dir) DeleteManifest(_ context.Context, key string) error { return d.del("manifests", key) }

// ListManifests lists the manifest keys under prefix.
func (d *Dir) ListManifests(_ context.Context, prefix string) ([]string, error) {
	base := filepath.Join(d.root, "manifests")
	var keys []string
	err := filepath.WalkDir(base, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() {
			rel, _ := filepath.Rel(base, p)
			if k := filepath.ToSlash(rel); strings.HasPrefix(k, prefix) {
				keys = append(keys, k)
			}
		}
		return nil
	})
	sort.Strings(keys)
	return keys, err
}
