package agentd

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
	"go.uber.org/zap/zaptest"
)

// TestStateRoutesPersistUnderFullPaths: the default State backend and a
// State route each keep their files, the thread store sees one delta keyed
// by full virtual paths, and a later run segment gets them back.
func TestStateRoutesPersistUnderFullPaths(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateThread(ctx, agent.Thread{ID: "th", Metadata: map[string]string{"tenant": "acme"}}); err != nil {
		t.Fatal(err)
	}
	cfg := &Config{Backends: BackendsConfig{Default: "state", Routes: map[string]RouteConfig{
		"/large_tool_results/": {Type: "state"},
		"/memories/":           {Type: "store", Namespace: []string{"{metadata.tenant}", "memories"}},
	}}}
	tb, err := newThreadBackends(cfg, filepath.Join(dir, "db"), st, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()

	first, err := tb.Build(ctx, "th", nil)
	if err != nil {
		t.Fatal(err)
	}
	for p, body := range map[string]string{"/notes.md": "default", "/large_tool_results/call_1": "big", "/memories/AGENTS.md": "prefers tabs"} {
		if _, err := first.Backend.Write(ctx, p, []byte(body)); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
	delta, err := first.FileChanges()
	if err != nil {
		t.Fatal(err)
	}
	if len(delta) != 2 || delta["/notes.md"] == nil || delta["/large_tool_results/call_1"] == nil {
		t.Fatalf("delta keys = %v, want the two State files under full paths (the Store route persists itself)", keys(delta))
	}

	second, err := tb.Build(ctx, "th", delta)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"/notes.md": "default", "/large_tool_results/call_1": "big", "/memories/AGENTS.md": "prefers tabs"} {
		got, err := second.Backend.Download(ctx, []string{p})
		if err != nil || got[0].Err != nil || string(got[0].Content) != want {
			t.Fatalf("%s after restore = %q, %v %v", p, got[0].Content, err, got[0].Err)
		}
	}
	if more, _ := second.FileChanges(); len(more) != 0 {
		t.Fatalf("a restore is not a change: %v", keys(more))
	}

	// A thread without the label cannot open the tenant's memories.
	if err := st.CreateThread(ctx, agent.Thread{ID: "anon"}); err != nil {
		t.Fatal(err)
	}
	anon, err := tb.Build(ctx, "anon", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.Backend.Ls(ctx, "/memories"); backend.CodeOf(err) != backend.CodeInvalidArgument {
		t.Fatalf("store route without its label: %v", err)
	}
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
