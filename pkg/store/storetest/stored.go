package storetest

import (
	"encoding/json"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/store"
)

// StoredStore is what RunStoredBytes needs of a store.
type StoredStore interface {
	store.Threads
	store.StorageMeter
}

// RunStoredBytes runs the store.StorageMeter contract against a fresh
// store from newStore: a tenant's threads, messages, State, files and
// runs are counted, growing as they are written, and another tenant's
// never; a tenant without threads stores nothing.
func RunStoredBytes(t *testing.T, newStore func(t *testing.T) StoredStore) {
	t.Helper()
	s := newStore(t)
	for _, th := range []agent.Thread{{ID: "ta", Tenant: "acme", CreatedAt: t0}, {ID: "tz", Tenant: "zeta", CreatedAt: t0}} {
		if err := s.CreateThread(ctx(), th); err != nil {
			t.Fatal(err)
		}
	}
	before, err := s.StoredBytes(ctx(), "acme")
	if err != nil || before.Threads != 1 || before.Messages != 0 || before.Files != 0 || before.Runs != 0 {
		t.Fatalf("StoredBytes(acme) of an empty thread = %+v, %v", before, err)
	}
	big := make([]byte, 4000)
	for i := range big {
		big[i] = 'x'
	}
	doc, _ := json.Marshal(map[string]string{"content": string(big)})
	cp := &agent.Checkpoint{ThreadID: "ta", Phase: agent.PhaseFinal, Files: map[string]json.RawMessage{"/notes.txt": doc}, CreatedAt: t0,
		Run:    agent.RunRecord{RunID: "r1", Status: agent.StatusCompleted, StartedAt: t0, Input: []string{string(big)}},
		Append: []agent.Message{{Message: model.Message{Role: model.RoleUser, Content: string(big)}}}}
	if err := s.SaveCheckpoint(ctx(), cp); err != nil {
		t.Fatal(err)
	}
	after, err := s.StoredBytes(ctx(), "acme")
	if err != nil || after.Threads != 1 || after.Messages < 4000 || after.Runs < 4000 || after.Files < 4000 || after.State <= 0 {
		t.Fatalf("StoredBytes(acme) after a checkpoint = %+v, %v; want each part to hold its 4000 bytes", after, err)
	}
	other, err := s.StoredBytes(ctx(), "zeta")
	if err != nil || other.Threads != 1 || other.Messages != 0 || other.Runs != 0 || other.Files != 0 {
		t.Fatalf("StoredBytes(zeta) = %+v, %v; want only its empty thread", other, err)
	}
	if none, err := s.StoredBytes(ctx(), "nobody"); err != nil || none != (store.StoredBytes{}) {
		t.Fatalf("StoredBytes(nobody) = %+v, %v", none, err)
	}
}
