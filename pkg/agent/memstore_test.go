package agent_test

import (
	"context"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) agent.Store { return agent.NewMemoryStore() })
}

func TestMemoryStoreListAndDelete(t *testing.T) {
	s := agent.NewMemoryStore()
	ctx := context.Background()
	for _, th := range []agent.Thread{{ID: "a", Metadata: map[string]string{"tenant": "a"}}, {ID: "b", Metadata: map[string]string{"tenant": "b"}}} {
		if err := s.CreateThread(ctx, th); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := s.ListThreads(ctx, map[string]string{"tenant": "a"})
	if len(got) != 1 || got[0].Thread.ID != "a" {
		t.Errorf("list = %v", got)
	}
	if err := s.DeleteThread(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadThread(ctx, "a"); err == nil {
		t.Error("deleted thread still loads")
	}
}
