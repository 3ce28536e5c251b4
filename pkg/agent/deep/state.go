package deep

import (
	"github.com/plumbhq/plumb/pkg/skills"

	"context"
	"encoding/json"
	"fmt"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/state"
)

// ThreadBackend is a thread's file backend for one run segment.
type ThreadBackend struct {
	// Backend serves the file tools; nil means none.
	Backend backend.Backend
	// FileChanges, if set, yields the State-backend delta to persist with
	// each checkpoint (see BindState).
	FileChanges func() (map[string]json.RawMessage, error)
	// Skills are the config and tenant skills the thread may use, with
	// where Backend serves each SKILL.md (docs/skills.md); the skills
	// middleware lists them, filtered by each profile's config skills.
	Skills []skills.Info
}

// BackendFunc builds a thread's backend for a run segment. labels are the
// thread's labels as the run sees them (request metadata merged in);
// stored holds the thread's persisted State files (path → JSON
// document). An error wrapping agent.ErrInvalidInput rejects the request
// (e.g. a label a route needs is missing).
type BackendFunc func(ctx context.Context, threadID string, labels map[string]string, stored map[string]json.RawMessage) (ThreadBackend, error)

// BindState loads a thread's stored files into a State backend and
// returns the FileChanges function that reports its later changes as JSON
// documents. agentd calls it for the State part of a thread's Composite.
func BindState(b *state.Backend, stored map[string]json.RawMessage) (func() (map[string]json.RawMessage, error), error) {
	files := make(map[string]state.File, len(stored))
	for p, doc := range stored {
		var f state.File
		if err := json.Unmarshal(doc, &f); err != nil {
			return nil, fmt.Errorf("state file %s: %w", p, err)
		}
		files[p] = f
	}
	if err := b.Load(files); err != nil {
		return nil, err
	}
	return func() (map[string]json.RawMessage, error) {
		changes := b.TakeChanges()
		if len(changes) == 0 {
			return nil, nil
		}
		out := make(map[string]json.RawMessage, len(changes))
		for p, f := range changes {
			if f == nil {
				out[p] = nil
				continue
			}
			doc, err := json.Marshal(*f)
			if err != nil {
				return nil, fmt.Errorf("state file %s: %w", p, err)
			}
			out[p] = doc
		}
		return out, nil
	}, nil
}

// StateBackends gives every thread its own State backend, restored from
// and persisted to the thread store: the default when no other backend is
// configured.
func StateBackends(opts ...state.Option) BackendFunc {
	return func(_ context.Context, _ string, _ map[string]string, stored map[string]json.RawMessage) (ThreadBackend, error) {
		b := state.New(opts...)
		changes, err := BindState(b, stored)
		if err != nil {
			return ThreadBackend{}, err
		}
		return ThreadBackend{Backend: b, FileChanges: changes}, nil
	}
}

// StoredFile decodes one stored State file's content.
func StoredFile(doc json.RawMessage) ([]byte, error) {
	var f state.File
	if err := json.Unmarshal(doc, &f); err != nil {
		return nil, err
	}
	return []byte(f.Content), nil
}
