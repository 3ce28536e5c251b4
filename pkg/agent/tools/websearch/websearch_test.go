package websearch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent/tools/websearch"
)

// behavior is what a fake provider does with one request.
type behavior func(w http.ResponseWriter, r *http.Request)

// fake is a provider endpoint that follows the documented API: it checks
// the request shape, then answers with the next scripted behavior (the
// last one repeats).
type fake struct {
	t        *testing.T
	provider string
	mu       sync.Mutex
	script   []behavior
	requests []*http.Request
	bodies   []map[string]any
}

func startFake(t *testing.T, provider string, script ...behavior) (*fake, *httptest.Server) {
	f := &fake{t: t, provider: provider, script: script}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	switch f.provider {
	case websearch.ProviderTavily:
		// POST /search, JSON body, Authorization: Bearer tvly-...
		if r.Method != http.MethodPost || r.URL.Path != "/search" {
			http.Error(w, `{"detail":{"error":"not found"}}`, http.StatusNotFound)
			return
		}
		if r.Header.Get("Authorization") != "Bearer tvly-test" {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"detail":{"error":"Unauthorized: missing or invalid API key."}}`)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body["query"] == nil {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"detail":{"error":"query is required"}}`)
			return
		}
	case websearch.ProviderSearXNG:
		// GET /search?q=...&format=json
		if r.Method != http.MethodGet || r.URL.Path != "/search" || r.URL.Query().Get("q") == "" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if r.URL.Query().Get("format") != "json" {
			http.Error(w, "Forbidden", http.StatusForbidden)
			return
		}
		body = map[string]any{"query": r.URL.Query().Get("q")}
	}
	f.mu.Lock()
	n := len(f.requests)
	f.requests = append(f.requests, r)
	f.bodies = append(f.bodies, body)
	b := f.script[min(n, len(f.script)-1)]
	f.mu.Unlock()
	b(w, r)
}

func (f *fake) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func jsonBody(status int, v any) behavior {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
}

func raw(status int, header http.Header, body string) behavior {
	return func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func hang(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

// tavilyAnswer is a documented Tavily search response.
func tavilyAnswer(query string, n int) map[string]any {
	var rs []map[string]any
	for i := range n {
		rs = append(rs, map[string]any{
			"title": fmt.Sprintf("Result %d", i), "url": fmt.Sprintf("https://example.com/%d", i),
			"content": fmt.Sprintf("snippet %d about %s", i, query), "score": 0.9 - float64(i)/100, "raw_content": nil,
		})
	}
	return map[string]any{"query": query, "follow_up_questions": nil, "answer": nil, "images": []any{}, "results": rs, "response_time": 1.09}
}

// searxngAnswer is a documented SearXNG JSON response (20 results: the
// API has no result-count parameter).
func searxngAnswer(query string) map[string]any {
	var rs []map[string]any
	for i := range 20 {
		rs = append(rs, map[string]any{
			"url": fmt.Sprintf("https://example.org/%d", i), "title": fmt.Sprintf("Hit %d", i), "content": "about " + query,
			"engine": "duckduckgo", "parsed_url": []string{"https", "example.org", fmt.Sprintf("/%d", i), "", "", ""},
			"template": "default.html", "engines": []string{"duckduckgo", "brave"}, "positions": []int{i + 1},
			"score": 4.0 - float64(i)/10, "category": "general",
		})
	}
	return map[string]any{"query": query, "number_of_results": 0, "results": rs, "answers": []any{}, "corrections": []any{},
		"infoboxes": []any{}, "suggestions": []any{}, "unresponsive_engines": []any{}}
}

func newSearch(t *testing.T, provider, base string, mod func(*websearch.Config)) *websearch.Search {
	t.Helper()
	cfg := websearch.Config{Provider: provider, BaseURL: base, APIKey: "tvly-test"}
	if mod != nil {
		mod(&cfg)
	}
	s, err := websearch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func decode(t *testing.T, out string) []websearch.Result {
	t.Helper()
	var rs []websearch.Result
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("output is not a JSON list: %v\n%s", err, out)
	}
	return rs
}

func TestTavily(t *testing.T) {
	f, srv := startFake(t, websearch.ProviderTavily, func(w http.ResponseWriter, r *http.Request) {
		jsonBody(200, tavilyAnswer("golang generics", 3))(w, r)
	})
	s := newSearch(t, websearch.ProviderTavily, srv.URL, nil)
	out, err := s.Run(t.Context(), "  golang generics ", 3)
	if err != nil {
		t.Fatal(err)
	}
	rs := decode(t, out)
	want := websearch.Result{Title: "Result 0", URL: "https://example.com/0", Snippet: "snippet 0 about golang generics", Score: 0.9}
	if len(rs) != 3 || rs[0] != want {
		t.Fatalf("results %+v, want 3 starting with %+v", rs, want)
	}
	if got := f.bodies[0]; got["query"] != "golang generics" || got["max_results"] != float64(3) {
		t.Errorf("request body %v", got)
	}
	if ct := f.requests[0].Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
}

func TestSearXNG(t *testing.T) {
	f, srv := startFake(t, websearch.ProviderSearXNG, func(w http.ResponseWriter, r *http.Request) {
		jsonBody(200, searxngAnswer(r.URL.Query().Get("q")))(w, r)
	})
	s := newSearch(t, websearch.ProviderSearXNG, srv.URL+"/", nil)
	out, err := s.Run(t.Context(), "rust & go?", 4)
	if err != nil {
		t.Fatal(err)
	}
	rs := decode(t, out)
	if len(rs) != 4 || rs[0].Title != "Hit 0" || rs[3].URL != "https://example.org/3" || rs[0].Snippet != "about rust & go?" || rs[0].Score != 4 {
		t.Fatalf("results %+v", rs)
	}
	// max_results omitted: the configured default (5).
	out, err = s.Run(t.Context(), "x", 0)
	if err != nil {
		t.Fatal(err)
	}
	if rs := decode(t, out); len(rs) != 5 {
		t.Errorf("%d results, want the default 5", len(rs))
	}
	if q := f.requests[0].URL.Query(); q.Get("q") != "rust & go?" || q.Get("format") != "json" {
		t.Errorf("query %v", q)
	}
}

// TestFailures: every way a provider can fail is an *Error with a code and
// a message the model can act on; the tool never hangs or panics.
func TestFailures(t *testing.T) {
	huge := strings.Repeat("x", 3<<20)
	cases := []struct {
		name     string
		provider string
		key      string
		script   []behavior
		mod      func(*websearch.Config)
		code     websearch.Code
		has      []string
		requests int
	}{
		{name: "tavily bad key", provider: websearch.ProviderTavily, key: "wrong", script: []behavior{raw(200, nil, "{}")},
			code: websearch.CodeAuth, has: []string{"HTTP 401", "invalid API key"}, requests: 0},
		{name: "tavily 500", provider: websearch.ProviderTavily, script: []behavior{jsonBody(500, map[string]any{"detail": map[string]any{"error": "internal"}})},
			code: websearch.CodeUnavailable, has: []string{"HTTP 500", "internal", "try again later"}, requests: 1},
		{name: "tavily 400", provider: websearch.ProviderTavily, script: []behavior{jsonBody(400, map[string]any{"detail": map[string]any{"error": "Query is too long."}})},
			code: websearch.CodeRejected, has: []string{"Query is too long.", "change the query"}, requests: 1},
		{name: "tavily 429 long Retry-After", provider: websearch.ProviderTavily,
			script: []behavior{raw(429, http.Header{"Retry-After": {"3600"}}, `{"detail":{"error":"rate limit"}}`)},
			code:   websearch.CodeRateLimited, has: []string{"HTTP 429", "wait 1h0m0s"}, requests: 1},
		{name: "searxng 429 twice", provider: websearch.ProviderSearXNG,
			script: []behavior{raw(429, http.Header{"Retry-After": {"0"}}, "Too Many Requests")},
			code:   websearch.CodeRateLimited, has: []string{"again after waiting"}, requests: 2},
		{name: "searxng 429 without Retry-After", provider: websearch.ProviderSearXNG,
			script: []behavior{raw(429, nil, "Too Many Requests")},
			code:   websearch.CodeRateLimited, has: []string{"search again later"}, requests: 1},
		{name: "tavily garbage", provider: websearch.ProviderTavily, script: []behavior{raw(200, nil, "<html>oops</html>")},
			code: websearch.CodeBadResponse, has: []string{"not the expected JSON", "<html>"}, requests: 1},
		{name: "searxng wrong JSON", provider: websearch.ProviderSearXNG, script: []behavior{raw(200, nil, `{"query":"x"}`)},
			code: websearch.CodeBadResponse, has: []string{"no results field"}, requests: 1},
		{name: "searxng json disabled", provider: websearch.ProviderSearXNG, script: []behavior{raw(403, nil, "Forbidden")},
			code: websearch.CodeAuth, has: []string{"HTTP 403", "search.formats"}, requests: 1},
		{name: "tavily hang", provider: websearch.ProviderTavily, script: []behavior{hang},
			mod:  func(c *websearch.Config) { c.Timeout = 200 * time.Millisecond },
			code: websearch.CodeTimeout, has: []string{"no answer within 200ms"}, requests: 1},
		{name: "searxng huge body", provider: websearch.ProviderSearXNG, script: []behavior{raw(200, nil, `{"results":[{"title":"`+huge+`"}]}`)},
			code: websearch.CodeBadResponse, has: []string{"larger than 2097152 bytes"}, requests: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, srv := startFake(t, c.provider, c.script...)
			s := newSearch(t, c.provider, srv.URL, func(cfg *websearch.Config) {
				if c.key != "" {
					cfg.APIKey = c.key
				}
				if c.mod != nil {
					c.mod(cfg)
				}
			})
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // hang guard
			defer cancel()
			out, err := s.Run(ctx, "q", 3)
			var se *websearch.Error
			if !errors.As(err, &se) {
				t.Fatalf("Run = %q, %v; want a *websearch.Error", out, err)
			}
			if se.Code != c.code || se.Provider != c.provider {
				t.Errorf("error %v, want code %s from %s", err, c.code, c.provider)
			}
			for _, h := range c.has {
				if !strings.Contains(err.Error(), h) {
					t.Errorf("error %q lacks %q", err, h)
				}
			}
			if n := f.count(); n != c.requests {
				t.Errorf("%d requests, want %d", n, c.requests)
			}
		})
	}
}

// TestRetryAfterHonoured: a 429 with a short Retry-After is waited out and
// the search is sent once more.
func TestRetryAfterHonoured(t *testing.T) {
	for _, p := range []string{websearch.ProviderTavily, websearch.ProviderSearXNG} {
		t.Run(p, func(t *testing.T) {
			var first time.Time
			var waited time.Duration
			ok := func(w http.ResponseWriter, r *http.Request) {
				waited = time.Since(first)
				if p == websearch.ProviderTavily {
					jsonBody(200, tavilyAnswer("q", 2))(w, r)
				} else {
					jsonBody(200, searxngAnswer("q"))(w, r)
				}
			}
			f, srv := startFake(t, p, func(w http.ResponseWriter, r *http.Request) {
				first = time.Now()
				raw(429, http.Header{"Retry-After": {"1"}}, `{"detail":{"error":"slow down"}}`)(w, r)
			}, ok)
			s := newSearch(t, p, srv.URL, nil)
			out, err := s.Run(t.Context(), "q", 2)
			if err != nil {
				t.Fatal(err)
			}
			if rs := decode(t, out); len(rs) != 2 || f.count() != 2 {
				t.Fatalf("%d results after %d requests", len(rs), f.count())
			}
			// Order, not speed: the second request came after the asked wait.
			if waited < time.Second {
				t.Errorf("retried after %s, before the 1s Retry-After", waited)
			}
		})
	}
}

// TestBounded: huge fields are clipped and the whole output fits Total.
func TestBounded(t *testing.T) {
	big := strings.Repeat("é", 20000)
	_, srv := startFake(t, websearch.ProviderTavily, func(w http.ResponseWriter, r *http.Request) {
		a := tavilyAnswer("q", 10)
		for _, r := range a["results"].([]map[string]any) {
			r["title"], r["content"], r["url"] = big, "line1\n\n\tline2 "+big, "https://example.com/"+big
		}
		jsonBody(200, a)(w, r)
	})
	s := newSearch(t, websearch.ProviderTavily, srv.URL, func(c *websearch.Config) { c.Limits.Total = 8000 })
	out, err := s.Run(t.Context(), "q", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) > 8000 {
		t.Errorf("output is %d bytes, want at most 8000", len(out))
	}
	rs := decode(t, out)
	if len(rs) == 0 || len(rs) == 10 {
		t.Fatalf("%d results, want some dropped to fit", len(rs))
	}
	r := rs[0]
	if n := len([]rune(r.Title)); n != 300 || !strings.HasSuffix(r.Title, "…") {
		t.Errorf("title has %d runes", n)
	}
	if n := len([]rune(r.Snippet)); n != 1000 || !strings.HasPrefix(r.Snippet, "line1 line2 ") {
		t.Errorf("snippet has %d runes: %.40q", n, r.Snippet)
	}
	if n := len([]rune(r.URL)); n != 2048 {
		t.Errorf("url has %d runes", n)
	}
}

func TestNewRejects(t *testing.T) {
	for _, c := range []struct {
		cfg  websearch.Config
		want string
	}{
		{websearch.Config{Provider: "bing"}, "want tavily or searxng"},
		{websearch.Config{Provider: "tavily"}, "API key"},
		{websearch.Config{Provider: "searxng"}, "base_url"},
		{websearch.Config{Provider: "searxng", BaseURL: "searx:8080"}, "http://"},
		{websearch.Config{Provider: "searxng", BaseURL: "http://x", DefaultResults: 11}, "1 to 10"},
	} {
		if _, err := websearch.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false}, {"7", 7 * time.Second, true}, {"-1", 0, false}, {"soon", 0, false},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
	} {
		got, ok := websearch.ParseRetryAfter(c.in, now)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// TestProviderEchoesAreRedacted: a provider that echoes the request (its
// Authorization header, the key in a JSON field or in a long body where a
// clip would cut it) never gets the key, nor another credential value,
// into what the model sees, error or result, and what it sees is bounded.
func TestProviderEchoesAreRedacted(t *testing.T) {
	const key = "tvly-Zq8Secret0042"
	echo := func(status int, render func(auth string) string) behavior {
		return func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			io.WriteString(w, render(r.Header.Get("Authorization")))
		}
	}
	cases := map[string]behavior{
		"401 json": echo(401, func(auth string) string {
			return fmt.Sprintf(`{"detail":{"error":"invalid API key %s sent as %q"}}`, strings.TrimPrefix(auth, "Bearer "), auth)
		}),
		"500 headers dump": echo(500, func(auth string) string {
			return "upstream failed; request headers:\nAuthorization: " + auth + "\nX-Api-Key: other-Secret-77\n"
		}),
		"400 key cut by the clip": echo(400, func(auth string) string {
			return strings.Repeat("a ", 95) + strings.TrimPrefix(auth, "Bearer ") + strings.Repeat(" b", 100)
		}),
		"200 not json": echo(200, func(auth string) string { return auth + " <html>" + strings.Repeat("x", 1<<20) }),
		"200 key in a result": echo(200, func(auth string) string {
			b, _ := json.Marshal(map[string]any{"results": []map[string]any{{"title": "api_key=" + key, "url": "https://e.com/?token=" + key,
				"content": "you searched with " + auth, "score": 1}}})
			return string(b)
		}),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(b))
			t.Cleanup(srv.Close)
			s := newSearch(t, websearch.ProviderTavily, srv.URL, func(c *websearch.Config) { c.APIKey = key })
			out, err := s.Run(t.Context(), "q", 3)
			seen := out
			if err != nil {
				seen = err.Error()
			}
			if seen == "" || strings.Contains(seen, key[:9]) || strings.Contains(seen, "other-Secret") {
				t.Errorf("the model would see %q", seen)
			}
			if len(seen) > 2000 {
				t.Errorf("the model would see %d bytes", len(seen))
			}
			if strings.HasPrefix(name, "200 key") && (err != nil || !strings.Contains(out, "[REDACTED]")) {
				t.Errorf("Run = %q, %v; want results with the key redacted", out, err)
			}
		})
	}
}
