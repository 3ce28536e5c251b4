package agentd

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
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

	acme := map[string]string{"tenant": "acme"}
	first, err := tb.Build(ctx, "th", acme, nil)
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

	second, err := tb.Build(ctx, "th", acme, delta)
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
	if _, err := tb.Build(ctx, "anon", nil, nil); !errors.Is(err, agent.ErrInvalidInput) {
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

// TestStoreRouteLabelsCheckedBeforeRunStarts: a Run whose thread lacks a
// label that a store route's namespace needs fails before run_started
// (docs/agent-core.md §10.1: INVALID_ARGUMENT, no events), naming the key and the
// route, instead of the memory being "unavailable" mid-run. Labels count
// whether they come with the request or are already on the thread.
func TestStoreRouteLabelsCheckedBeforeRunStarts(t *testing.T) {
	srv := modeltest.New(t)
	cfg, err := Parse([]byte(`
models: {m: {base_url: "` + srv.URL() + `", model: gpt-test}}
backends:
  default: state
  routes:
    /memories/: {type: store, namespace: ["{metadata.tenant}", memories]}
middleware:
  memory: {paths: [/memories/AGENTS.md]}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Storage.SQLitePath = filepath.Join(t.TempDir(), "agentd.db")
	a, err := Build(context.Background(), cfg, Options{Env: func(string) string { return "" }, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := func(threadID string, md map[string]string) (*agent.RunResult, []agent.Event, error) {
		var mu sync.Mutex
		var evs []agent.Event
		res, err := a.Runtime.Run(ctx, agent.RunInput{ThreadID: threadID, Metadata: md, Input: []string{"hi"}}, func(ev agent.Event) {
			mu.Lock()
			defer mu.Unlock()
			evs = append(evs, ev)
		})
		return res, evs, err
	}

	for _, tt := range []struct {
		name string
		md   map[string]string
		want string
	}{
		{"no label", nil, `metadata key "tenant" is required by backend route /memories/`},
		{"empty label", map[string]string{"tenant": ""}, `metadata key "tenant" is required by backend route /memories/`},
		{"other labels only", map[string]string{"team": "a"}, `metadata key "tenant" is required by backend route /memories/`},
		{"label that is no namespace component", map[string]string{"tenant": "a/b"}, `metadata.tenant "a/b" cannot name the namespace of backend route /memories/`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, evs, err := run("", tt.md)
			if !errors.Is(err, agent.ErrInvalidInput) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want invalid input mentioning %q", err, tt.want)
			}
			if len(evs) != 0 {
				t.Fatalf("%d events before the error, first %s", len(evs), evs[0].Payload.Kind())
			}
		})
	}
	if n := len(srv.AllRequests()); n != 0 {
		t.Fatalf("%d model requests for rejected runs", n)
	}

	// The label on the request: the run starts and the memory route works.
	srv.Script("main", modeltest.Text("ok"), modeltest.Text("ok"), modeltest.Text("ok"))
	res, _, err := run("", map[string]string{"tenant": "acme"})
	if err != nil || res.Status != agent.StatusCompleted {
		t.Fatalf("run with the label: %v %+v", err, res)
	}
	// The label already on the thread: a later run needs no metadata.
	if res, _, err = run(res.ThreadID, nil); err != nil || res.Status != agent.StatusCompleted {
		t.Fatalf("continued run: %v %+v", err, res)
	}
	// A thread created without it gets it merged in by the Run.
	if err := a.Store.CreateThread(ctx, agent.Thread{ID: "bare", CreatedAt: time.Now(), UpdatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run("bare", nil); !errors.Is(err, agent.ErrInvalidInput) {
		t.Fatalf("bare thread without the label: %v", err)
	}
	if res, _, err = run("bare", map[string]string{"tenant": "acme"}); err != nil || res.Status != agent.StatusCompleted {
		t.Fatalf("bare thread with the label merged in: %v %+v", err, res)
	}
	for _, r := range srv.Requests("main") {
		if strings.Contains(systemPrompt(r), "unavailable") {
			t.Errorf("memory unavailable in a started run: %q", systemPrompt(r))
		}
	}
}

func systemPrompt(r modeltest.Request) string {
	for _, m := range r.Body.Messages {
		if m.Role == "system" {
			return m.Content
		}
	}
	return ""
}
