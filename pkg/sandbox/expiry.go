package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// expiryFile is the name of the expiry record in Config.StateDir.
const expiryFile = "sandbox-expiry.json"

// maxExpiryFile bounds the record a worker reads back.
const maxExpiryFile = 16 << 20

// expiryRecord is the on-disk form of the expiry record.
type expiryRecord struct {
	Version int                  `json:"version"`
	Expires map[string]time.Time `json:"expires"`
}

// expiryStore keeps, in a small file of the worker's state dir, when each
// sandbox expires. Container labels cannot carry it (they are immutable
// and keep-alives move the expiry), and a worker that re-adopts its
// sandboxes with a fresh TTL after every restart would keep them alive
// forever while it crash-loops.
type expiryStore struct {
	path string

	mu   sync.Mutex // serializes writes
	last map[string]time.Time
}

// openExpiry reads the record in dir (none yet is an empty record).
func openExpiry(dir string) (*expiryStore, map[string]time.Time, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("sandbox state dir: %w", err)
	}
	s := &expiryStore{path: filepath.Join(dir, expiryFile)}
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, map[string]time.Time{}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox expiry record: %w", err)
	}
	rec, err := parseExpiry(data)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox expiry record %s: %w", s.path, err)
	}
	s.last = maps.Clone(rec)
	return s, rec, nil
}

// parseExpiry decodes an expiry record.
func parseExpiry(data []byte) (map[string]time.Time, error) {
	if len(data) > maxExpiryFile {
		return nil, fmt.Errorf("%d bytes is over the %d-byte limit", len(data), maxExpiryFile)
	}
	var rec expiryRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, err
	}
	if rec.Version != 1 {
		return nil, fmt.Errorf("version %d, want 1", rec.Version)
	}
	if rec.Expires == nil {
		rec.Expires = map[string]time.Time{}
	}
	return rec.Expires, nil
}

// save writes the record when it changed, atomically (temp file and
// rename).
func (s *expiryStore) save(exp map[string]time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if maps.EqualFunc(s.last, exp, time.Time.Equal) {
		return nil
	}
	data, err := json.Marshal(expiryRecord{Version: 1, Expires: exp})
	if err != nil {
		return err
	}
	if err := writeAtomic(s.path, data, true); err != nil {
		return err
	}
	s.last = exp
	return nil
}

// writeAtomic replaces the file at path with data through a temp file in
// its directory and a rename, so readers see the old or the new record,
// never a partial one; sync makes the data durable before the rename.
func writeAtomic(path string, data []byte, sync bool) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if sync {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
