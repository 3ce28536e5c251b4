package agentd

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// searxngServer answers GET /search?q=…&format=json as SearXNG documents
// it: a first query is rate limited with a long Retry-After, every later
// one gets twenty results.
func searxngServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.URL.Path != "/search" || q.Get("format") != "json" || q.Get("q") == "" {
			http.Error(w, "Forbidden", http.StatusForbidden)
			return
		}
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "120")
			http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
			return
		}
		var rs []map[string]any
		for i := range 20 {
			rs = append(rs, map[string]any{"url": fmt.Sprintf("https://go.dev/doc/%d", i), "title": fmt.Sprintf("Doc %d", i),
				"content": "about " + q.Get("q"), "engine": "brave", "engines": []string{"brave"}, "score": 2.5, "category": "general"})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"query": q.Get("q"), "number_of_results": 0, "results": rs,
			"answers": []any{}, "suggestions": []any{}, "unresponsive_engines": []any{}})
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// TestWebSearchEndToEnd: with tools.web_search configured, the model is
// offered web_search, a rate-limited search is a tool error the run goes
// past, a bad max_results is rejected by the schema, and a good call
// returns the provider's results, bounded to max_results.
func TestWebSearchEndToEnd(t *testing.T) {
	srv, hits := searxngServer(t)
	s := startStack(t, nil, fmt.Sprintf("tools:\n  web_search: {provider: searxng, base_url: %s, max_retry_after: 1s}\n", srv.URL))
	s.model.Script("main",
		modeltest.Calls(mcall("w1", "web_search", `{"query":"go generics"}`)),
		modeltest.Calls(
			mcall("w2", "web_search", `{"query":"go generics","max_results":11}`),
			mcall("w3", "web_search", `{"query":"go generics","max_results":2}`),
		),
		modeltest.Text("found it"),
	)
	_, results := s.mustRun(input("", "Search the web for Go generics."))
	wantResult(t, results, "w1", true, "web_search failed", "rate_limited", "HTTP 429", "wait 2m0s")
	wantResult(t, results, "w2", true, "Invalid arguments for web_search")
	r := wantResult(t, results, "w3", false, `"url":"https://go.dev/doc/0"`, `"snippet":"about go generics"`)
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.GetContent()), &got); err != nil || len(got) != 2 {
		t.Errorf("result %q: %d results (%v), want 2", r.GetContent(), len(got), err)
	}
	if n := hits.Load(); n != 2 {
		t.Errorf("provider saw %d searches, want 2", n)
	}
	req := s.model.Requests("main")[0]
	var names []string
	for _, tool := range req.Body.Tools {
		names = append(names, tool.Function.Name)
	}
	if !slices.Contains(names, "web_search") {
		t.Errorf("tools offered %v lack web_search", names)
	}
}

// TestWebSearchNotOffered: without the section, or with Tavily and no key
// in the environment, the model is not offered web_search; a plain config
// error names its path.
func TestWebSearchNotOffered(t *testing.T) {
	for _, extra := range []string{"", "tools:\n  web_search: {provider: tavily}\n"} {
		s := startStack(t, nil, extra)
		s.model.Script("main", modeltest.Calls(mcall("w1", "web_search", `{"query":"x"}`)), modeltest.Text("ok"))
		_, results := s.mustRun(input("", "search"))
		if extra == "" {
			wantResult(t, results, "w1", true, `Unknown tool "web_search"`)
		} else {
			wantResult(t, results, "w1", true, "web search is not configured", "TAVILY_API_KEY")
		}
		for _, tool := range s.model.Requests("main")[0].Body.Tools {
			if tool.Function.Name == "web_search" {
				t.Errorf("config %q: web_search offered", extra)
			}
		}
	}
	for extra, want := range map[string]string{
		"tools:\n  web_search: {provider: bing}\n":                                  "tools.web_search: provider \"bing\"",
		"tools:\n  web_search: {provider: searxng}\n":                               "tools.web_search: searxng needs base_url",
		"tools:\n  web_search: {provider: searxng, base_url: x, max_results: 20}\n": "tools.web_search.max_results",
		"tools:\n  web_search: {provider: searxng, bse_url: x}\n":                   "tools.web_search.bse_url: unknown key",
	} {
		cfg, err := Parse([]byte("version: 1\n" + extra))
		if err == nil {
			_, err = Build(t.Context(), cfg, Options{Env: func(string) string { return "" }, TempDir: t.TempDir()})
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %q: error %v, want %q", extra, err, want)
		}
	}
}

// TestWebSearchTavilyPerAgent: Tavily through agentd, with the key from
// the environment variable the config names, sent as a bearer token;
// an agent whose allow-list leaves web_search out is not offered it.
func TestWebSearchTavilyPerAgent(t *testing.T) {
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		var body struct {
			Query      string `json:"query"`
			MaxResults int    `json:"max_results"`
		}
		if r.Method != http.MethodPost || r.URL.Path != "/search" || json.NewDecoder(r.Body).Decode(&body) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"query": body.Query, "answer": nil, "images": []any{}, "response_time": 0.8,
			"results": []map[string]any{{"title": "Tavily hit", "url": "https://tavily.example/1", "content": "max " + fmt.Sprint(body.MaxResults), "score": 0.75, "raw_content": nil}}})
	}))
	t.Cleanup(srv.Close)
	s := startStack(t, nil, fmt.Sprintf(`tools:
  web_search: {provider: tavily, base_url: %s, api_key_env: TEST_MODEL_KEY, max_results: 3}
agents:
  offline: {description: no web, tools: ["@read"]}
`, srv.URL))
	s.model.Script("main", modeltest.Calls(mcall("t1", "web_search", `{"query":"plumb"}`)), modeltest.Text("ok"))
	_, results := s.mustRun(input("", "search"))
	wantResult(t, results, "t1", false, `"title":"Tavily hit"`, `"snippet":"max 3"`, `"score":0.75`)
	if got := auth.Load(); got != "Bearer test-key" {
		t.Errorf("Authorization %q", got)
	}

	s.model.Script("offline", modeltest.Calls(mcall("o1", "web_search", `{"query":"plumb"}`)), modeltest.Text("ok"))
	req := input("", "search")
	req.Agent = "offline"
	_, results = s.mustRun(req)
	wantResult(t, results, "o1", true, `Unknown tool "web_search"`)
	for _, tool := range s.model.Requests("offline")[0].Body.Tools {
		if tool.Function.Name == "web_search" {
			t.Error("the offline agent was offered web_search")
		}
	}
}
