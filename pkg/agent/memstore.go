package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"github.com/plumbhq/plumb/pkg/model"
)

// DefaultCheckpointRetention is storage.checkpoint_retention's default.
const DefaultCheckpointRetention = 100

// MemoryStore is the ephemeral Store: everything lives in process memory
// and is lost on exit. It suits tests, development and agentd runs that
// need no durability. It deep-copies on the way in and out, so stored data
// is never shared with callers.
type MemoryStore struct {
	mu        sync.Mutex
	retention int
	nextCP    int64
	threads   map[string]*memThread
}

type memThread struct {
	data ThreadData
	runs []RunRecord // in start order
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store keeping DefaultCheckpointRetention
// checkpoint records per thread.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{retention: DefaultCheckpointRetention, threads: make(map[string]*memThread)}
}

// CreateThread implements Store.
func (s *MemoryStore) CreateThread(_ context.Context, t Thread) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.threads[t.ID]; ok {
		return fmt.Errorf("create thread %s: %w", t.ID, ErrConflict)
	}
	if t.UpdatedAt.IsZero() {
		t.UpdatedAt = t.CreatedAt
	}
	t.Metadata = maps.Clone(t.Metadata)
	s.threads[t.ID] = &memThread{data: ThreadData{Thread: t}}
	return nil
}

// LoadThread implements Store.
func (s *MemoryStore) LoadThread(_ context.Context, id string) (*ThreadData, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mt, ok := s.threads[id]
	if !ok {
		return nil, fmt.Errorf("load thread %s: %w", id, ErrThreadNotFound)
	}
	return mt.copyData(), nil
}

func (mt *memThread) copyData() *ThreadData {
	d := mt.data
	d.Thread.Metadata = maps.Clone(d.Thread.Metadata)
	d.Messages = cloneMessages(d.Messages)
	d.Todos = slices.Clone(d.Todos)
	d.Summary = cloneSummary(d.Summary)
	d.Private = clonePrivate(d.Private)
	d.Pending = d.Pending.clone()
	d.Interrupt = cloneInterrupt(d.Interrupt)
	d.Checkpoints = slices.Clone(d.Checkpoints)
	d.Files = clonePrivate(d.Files)
	if n := len(mt.runs); n > 0 {
		r := cloneRun(mt.runs[n-1])
		d.LastRun = &r
	}
	for _, r := range mt.runs {
		d.Usage = d.Usage.Add(r.Usage)
	}
	return &d
}

// SaveCheckpoint implements Store.
func (s *MemoryStore) SaveCheckpoint(_ context.Context, cp *Checkpoint) error {
	// Copy before taking the lock: the caller keeps ownership of cp.
	c := cloneCheckpoint(cp)
	s.mu.Lock()
	defer s.mu.Unlock()
	mt, ok := s.threads[c.ThreadID]
	if !ok {
		return fmt.Errorf("checkpoint %s: %w", c.ThreadID, ErrThreadNotFound)
	}
	d := &mt.data
	stored := len(d.Messages)
	if c.Truncate && c.Base <= stored {
		stored = c.Base
	}
	if c.Base != stored {
		return fmt.Errorf("checkpoint %s: base %d, stored %d messages: %w", c.ThreadID, c.Base, len(d.Messages), ErrConflict)
	}
	// Validate everything before changing anything.
	for _, e := range c.EditCalls {
		if !hasCall(d.Messages, e) {
			return fmt.Errorf("checkpoint %s: no call %s in message %d: %w", c.ThreadID, e.CallID, e.MessageIndex, ErrConflict)
		}
	}
	for _, e := range c.EditCalls {
		m := &d.Messages[e.MessageIndex]
		for j := range m.ToolCalls {
			if m.ToolCalls[j].ID == e.CallID {
				m.ToolCalls[j].Args = e.Args
			}
		}
	}
	d.Messages = append(d.Messages[:stored], c.Append...)
	if c.Metadata != nil {
		if d.Thread.Metadata == nil {
			d.Thread.Metadata = make(map[string]string)
		}
		maps.Copy(d.Thread.Metadata, c.Metadata)
	}
	d.Todos, d.Summary, d.Private, d.Pending, d.Interrupt = c.Todos, c.Summary, c.Private, c.Pending, c.Interrupt
	for path, f := range c.Files {
		if f == nil {
			delete(d.Files, path)
			continue
		}
		if d.Files == nil {
			d.Files = make(map[string]json.RawMessage)
		}
		d.Files[path] = f
	}
	if c.Run.RunID != "" {
		i := slices.IndexFunc(mt.runs, func(r RunRecord) bool { return r.RunID == c.Run.RunID })
		if i < 0 {
			mt.runs = append(mt.runs, c.Run)
		} else {
			mt.runs[i] = c.Run
		}
	}
	if c.CreatedAt.After(d.Thread.UpdatedAt) {
		d.Thread.UpdatedAt = c.CreatedAt
	}
	s.nextCP++
	d.Checkpoints = append(d.Checkpoints, CheckpointInfo{
		ID: s.nextCP, RunID: c.Run.RunID, Phase: c.Phase, Step: c.Step,
		MessageCount: len(d.Messages), CreatedAt: c.CreatedAt,
	})
	if n := len(d.Checkpoints) - s.retention; n > 0 {
		d.Checkpoints = slices.Delete(d.Checkpoints, 0, n)
	}
	return nil
}

func hasCall(msgs []Message, e CallEdit) bool {
	if e.MessageIndex < 0 || e.MessageIndex >= len(msgs) {
		return false
	}
	return slices.ContainsFunc(msgs[e.MessageIndex].ToolCalls, func(c model.ToolCall) bool { return c.ID == e.CallID })
}

// FailRunningRuns implements Store.
func (s *MemoryStore) FailRunningRuns(_ context.Context, message string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, mt := range s.threads {
		for i := range mt.runs {
			if mt.runs[i].Status == StatusRunning {
				mt.runs[i].Status = StatusFailed
				mt.runs[i].Error = &RunError{Code: CodeInternal, Message: message}
				n++
			}
		}
	}
	return n, nil
}

// ListThreads returns the threads whose metadata holds every label of
// labels, newest UpdatedAt first. It serves agentd's ListThreads when the
// memory store is configured.
func (s *MemoryStore) ListThreads(_ context.Context, labels map[string]string) ([]*ThreadData, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*ThreadData
	for _, mt := range s.threads {
		match := true
		for k, v := range labels {
			if mt.data.Thread.Metadata[k] != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, mt.copyData())
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Thread, out[j].Thread
		if !a.UpdatedAt.Equal(b.UpdatedAt) {
			return a.UpdatedAt.After(b.UpdatedAt)
		}
		return a.ID > b.ID
	})
	return out, nil
}

// DeleteThread removes a thread and everything stored with it.
func (s *MemoryStore) DeleteThread(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.threads[id]; !ok {
		return fmt.Errorf("delete thread %s: %w", id, ErrThreadNotFound)
	}
	delete(s.threads, id)
	return nil
}

func cloneInterrupt(p *PendingInterrupt) *PendingInterrupt {
	if p == nil {
		return nil
	}
	c := *p
	c.Requests = make([]InterruptRequest, len(p.Requests))
	for i, r := range p.Requests {
		r.Allowed = slices.Clone(r.Allowed)
		r.ArgsSchema = slices.Clone(r.ArgsSchema)
		c.Requests[i] = r
	}
	return &c
}

func cloneRun(r RunRecord) RunRecord {
	r.Spec.ClientTools = slices.Clone(r.Spec.ClientTools)
	r.Input = slices.Clone(r.Input)
	r.Metadata = maps.Clone(r.Metadata)
	if r.Error != nil {
		e := *r.Error
		r.Error = &e
	}
	return r
}

// cloneCheckpoint deep-copies through JSON-free helpers where they exist
// and through encoding/json for the nested pending tree.
func cloneCheckpoint(cp *Checkpoint) *Checkpoint {
	c := *cp
	c.Append = cloneMessages(cp.Append)
	c.EditCalls = slices.Clone(cp.EditCalls)
	c.Metadata = maps.Clone(cp.Metadata)
	c.Todos = slices.Clone(cp.Todos)
	c.Summary = cloneSummary(cp.Summary)
	c.Private = clonePrivate(cp.Private)
	c.Pending = cp.Pending.clone()
	c.Interrupt = cloneInterrupt(cp.Interrupt)
	c.Run = cloneRun(cp.Run)
	if cp.Files != nil {
		c.Files = make(map[string]json.RawMessage, len(cp.Files))
		for k, v := range cp.Files {
			c.Files[k] = slices.Clone(v)
		}
	}
	return &c
}
