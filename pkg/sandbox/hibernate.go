package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
)

// A hibernated box has no container, so no labels a restarted worker could
// adopt it from: its record lives in the state dir instead, one small
// file per box (hibernationDir/<id>.json), written when it hibernates and
// removed when it wakes or is deleted. One file per box keeps a
// hibernation's cost independent of how many boxes are hibernated (a
// worker holds thousands). Without a state dir, hibernated boxes do not
// survive a restart (their snapshots stay in the store).

// hibernationDir is the directory of hibernation records in the state dir.
const hibernationDir = "hibernated"

// maxHibernationRecord bounds a record a worker reads back.
const maxHibernationRecord = 64 << 10

// hibernationRecord is the on-disk form of a hibernated box.
type hibernationRecord struct {
	Version  int    `json:"version"`
	ID       string `json:"id"`
	Template string `json:"template,omitempty"`
	Tenant   string `json:"tenant"`
	Snapshot string `json:"snapshot"`
	Last     string `json:"last,omitempty"` // the parent of its next snapshot
	// Memory is its memory image, recorded only so that a restarted
	// worker deletes it: the sum a restore needs is never written down.
	Memory     string            `json:"memory,omitempty"`
	Settings   Template          `json:"settings"`
	Labels     map[string]string `json:"labels,omitempty"`
	Volumes    []VolumeMount     `json:"volumes,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
	LastUsedAt time.Time         `json:"last_used_at"`
	ExpiresAt  time.Time         `json:"expires_at"`
}

// hibernationPath is the record of sandbox id ("" without a state dir).
func (m *Manager) hibernationPath(id string) string {
	if m.cfg.StateDir == "" {
		return ""
	}
	return filepath.Join(m.cfg.StateDir, hibernationDir, id+".json")
}

// saveHibernation records a box that has just hibernated, durably (it
// outlives its container, which is removed next).
func (m *Manager) saveHibernation(sb *sandbox) error {
	sb.mu.Lock()
	info, last, mem := sb.info, sb.last, ""
	if sb.memory != nil {
		mem = sb.memory.id
	}
	sb.mu.Unlock()
	p := m.hibernationPath(info.ID)
	if p == "" {
		return nil
	}
	data, err := json.Marshal(hibernationRecord{
		Version: 1, ID: info.ID, Template: info.Template, Tenant: info.Tenant, Snapshot: info.Snapshot, Last: last, Memory: mem,
		Settings: info.Settings, Labels: info.Labels, Volumes: info.Volumes,
		CreatedAt: info.CreatedAt, LastUsedAt: info.LastUsedAt, ExpiresAt: info.ExpiresAt,
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	return writeAtomic(p, data, true)
}

// forgetHibernation removes sandbox id's record (it woke, or is deleted).
func (m *Manager) forgetHibernation(id string) {
	p := m.hibernationPath(id)
	if p == "" {
		return
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.lg.Warn("remove a hibernation record", zap.String("sandbox-id", id), zap.Error(err))
	}
}

// loadHibernations reads the worker's hibernation records. A record that
// does not parse, or names another worker's box or another file, is
// logged and left where it is (an operator may look at it); it adopts
// nothing.
func (m *Manager) loadHibernations() (map[string]hibernationRecord, error) {
	out := map[string]hibernationRecord{}
	if m.cfg.StateDir == "" {
		return out, nil
	}
	dir := filepath.Join(m.cfg.StateDir, hibernationDir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hibernation records: %w", err)
	}
	for _, de := range ents {
		name := de.Name()
		id, ok := strings.CutSuffix(name, ".json")
		if !ok || !de.Type().IsRegular() {
			continue // a temporary file of writeAtomic, or something else
		}
		rec, err := readHibernation(filepath.Join(dir, name))
		if err == nil && (rec.ID != id || WorkerOf(id) != m.cfg.Worker) {
			err = fmt.Errorf("it names sandbox %q of worker %q", rec.ID, WorkerOf(rec.ID))
		}
		if err != nil {
			m.lg.Warn("unreadable hibernation record: not adopted", zap.String("file", name), zap.Error(err))
			continue
		}
		out[id] = rec
	}
	return out, nil
}

// readHibernation reads and decodes one record.
func readHibernation(path string) (hibernationRecord, error) {
	var rec hibernationRecord
	f, err := os.Open(path)
	if err != nil {
		return rec, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxHibernationRecord+1))
	if err != nil {
		return rec, err
	}
	if len(data) > maxHibernationRecord {
		return rec, fmt.Errorf("over the %d-byte limit", maxHibernationRecord)
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, err
	}
	if rec.Version != 1 {
		return rec, fmt.Errorf("version %d, want 1", rec.Version)
	}
	if rec.Snapshot == "" {
		return rec, errors.New("no snapshot")
	}
	return rec, nil
}

// adoptHibernated takes over a recorded hibernated box after a restart.
// Its settings must still pass the worker's policy (it is recreated with
// them on wake); a box that does not is dropped, its snapshot kept in the
// store for its tenant. m.mu is not held (NewManager).
func (m *Manager) adoptHibernated(ctx context.Context, rec hibernationRecord, recorded map[string]time.Time) {
	// Its memory image is never restored by a restarted worker (nothing
	// pins its manifest): it wakes from its workspace.
	m.dropMemory(ctx, tenantOf(rec.Tenant), rec.Memory)
	t := rec.Settings
	err := t.validate()
	if err == nil {
		err = m.checkPolicy(ctx, t)
	}
	if err != nil {
		m.lg.Warn("hibernated sandbox not adopted: its settings no longer pass this worker's policy (its snapshot stays in the store)",
			zap.String("sandbox-id", rec.ID), zap.String("snapshot", rec.Snapshot), zap.Error(err))
		m.forgetHibernation(rec.ID)
		return
	}
	expires, ok := recorded[rec.ID]
	if !ok {
		expires = rec.ExpiresAt
	}
	t.IdleSuspendAfter, t.HibernateAfter = m.idleSettings(rec.Template)
	// leftover: a container or volume of its name may have outlived its
	// hibernation (the sweep keeps a hibernated box's volume): its wake
	// removes them first.
	sb := &sandbox{last: rec.Last, leftover: true, info: Info{
		ID: rec.ID, Worker: m.cfg.Worker, State: StateHibernated, Template: rec.Template, Tenant: tenantOf(rec.Tenant),
		Settings: t, Labels: rec.Labels, CreatedAt: rec.CreatedAt, LastUsedAt: rec.LastUsedAt, ExpiresAt: expires,
		Snapshot: rec.Snapshot, Volumes: rec.Volumes,
	}}
	m.sandboxes[rec.ID] = sb
	m.hibernated++
	m.lg.Info("adopted hibernated sandbox", zap.String("sandbox-id", rec.ID), zap.String("snapshot", rec.Snapshot), zap.Time("expires-at", expires))
}

// wakeRefused says that a wake found the worker full: the same
// RESOURCE_EXHAUSTED reason (CodeQuota) and limit as a create refused for
// it, and that the box is still hibernated.
func wakeRefused(id string, err error) error {
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeQuota {
		return err
	}
	return &Error{Code: CodeQuota, Limit: e.Limit, Message: fmt.Sprintf("sandbox %s stays hibernated: waking it needs room on its worker (%s); retry when a sandbox there ends", id, e.Message)}
}
