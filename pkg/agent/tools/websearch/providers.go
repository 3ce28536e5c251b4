package websearch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
)

// tavily is Tavily's search API: POST {base}/search with a JSON body and
// the key as a bearer token; the answer is {query, answer, results:
// [{title, url, content, score, raw_content}], response_time}.
type tavily struct {
	base, key string
	hc        *http.Client
	s         *Search
}

func (t *tavily) Name() string { return ProviderTavily }

func (t *tavily) Search(ctx context.Context, query string, max int) ([]Result, error) {
	body, err := json.Marshal(map[string]any{
		"query": query, "max_results": max, "search_depth": "basic",
		"include_answer": false, "include_raw_content": false, "include_images": false,
	})
	if err != nil {
		return nil, err
	}
	raw, err := t.s.do(ctx, t.Name(), t.hc, func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.base+"/search", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Authorization", "Bearer "+t.key)
		return req, nil
	})
	if err != nil {
		return nil, err
	}
	rs, err := ParseTavily(raw)
	if err != nil {
		return nil, badJSON(t.Name(), t.s.redact.cleanBytes(raw), err)
	}
	return rs, nil
}

// ParseTavily decodes the body of a Tavily search answer.
func ParseTavily(raw []byte) ([]Result, error) { return parseResults(raw) }

// searxng is SearXNG's search API: GET {base}/search?q=…&format=json
// (the instance must list json in search.formats); the answer is {query,
// number_of_results, results: [{url, title, content, engine, score, …}],
// answers, suggestions, …}.
type searxng struct {
	base string
	hc   *http.Client
	s    *Search
}

func (x *searxng) Name() string { return ProviderSearXNG }

func (x *searxng) Search(ctx context.Context, query string, max int) ([]Result, error) {
	u := x.base + "/search?" + url.Values{"q": {query}, "format": {"json"}, "pageno": {"1"}}.Encode()
	raw, err := x.s.do(ctx, x.Name(), x.hc, func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json")
		return req, nil
	})
	var se *Error
	if errors.As(err, &se) && se.Code == CodeAuth {
		se.Message += " (a SearXNG instance answers 403 to format=json unless its settings.yml lists json in search.formats)"
	}
	if err != nil {
		return nil, err
	}
	rs, err := ParseSearXNG(raw)
	if err != nil {
		return nil, badJSON(x.Name(), x.s.redact.cleanBytes(raw), err)
	}
	if len(rs) > max {
		rs = rs[:max]
	}
	return rs, nil
}

// ParseSearXNG decodes the body of a SearXNG JSON answer.
func ParseSearXNG(raw []byte) ([]Result, error) { return parseResults(raw) }

// parseResults decodes {results: [{title, url, content, score}]}: Tavily
// and SearXNG name the fields they share alike.
func parseResults(raw []byte) ([]Result, error) {
	var v struct {
		Results *[]struct {
			Title   string  `json:"title"`
			URL     string  `json:"url"`
			Content string  `json:"content"`
			Score   float64 `json:"score"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	if v.Results == nil {
		return nil, errors.New("no results field")
	}
	out := make([]Result, 0, len(*v.Results))
	for _, r := range *v.Results {
		out = append(out, Result{Title: r.Title, URL: r.URL, Snippet: r.Content, Score: r.Score})
	}
	return out, nil
}
