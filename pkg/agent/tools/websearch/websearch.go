package websearch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/agent"
)

// ToolName is the name the model calls the tool by.
const ToolName = "web_search"

// Provider names accepted by New.
const (
	ProviderTavily  = "tavily"
	ProviderSearXNG = "searxng"
)

// DefaultTavilyURL is Tavily's API base URL.
const DefaultTavilyURL = "https://api.tavily.com"

// Code classifies a search failure.
type Code string

// Failure codes.
const (
	// CodeRateLimited: the provider answered 429 and asked for a wait
	// longer than the tool may wait (or kept answering 429).
	CodeRateLimited Code = "rate_limited"
	// CodeTimeout: the provider did not answer in time.
	CodeTimeout Code = "timeout"
	// CodeUnavailable: the provider could not be reached or failed (5xx).
	CodeUnavailable Code = "unavailable"
	// CodeBadResponse: the body was not the provider's JSON, or too large.
	CodeBadResponse Code = "bad_response"
	// CodeAuth: the provider refused the credentials (401/403).
	CodeAuth Code = "auth"
	// CodeRejected: the provider refused the request (other 4xx).
	CodeRejected Code = "rejected"
)

// Error is a provider failure, written for the model.
type Error struct {
	// Code classifies the failure.
	Code Code
	// Provider names the provider.
	Provider string
	// Message says what happened and what the model can do.
	Message string
	// RetryAfter is the provider's requested wait on CodeRateLimited.
	RetryAfter time.Duration
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("[%s] %s: %s", e.Code, e.Provider, e.Message)
}

// Result is one search hit.
type Result struct {
	Title   string  `json:"title"`
	URL     string  `json:"url"`
	Snippet string  `json:"snippet"`
	Score   float64 `json:"score"`
}

// Provider runs one search. It returns at most max results, or an *Error.
type Provider interface {
	// Name names the provider in messages.
	Name() string
	// Search sends query and decodes the provider's answer.
	Search(ctx context.Context, query string, max int) ([]Result, error)
}

// Config configures New.
type Config struct {
	// Provider is "tavily" or "searxng".
	Provider string
	// BaseURL is the provider's base URL: DefaultTavilyURL when empty for
	// Tavily; required for SearXNG (http://searxng:8080).
	BaseURL string
	// APIKey is Tavily's key (sent as a bearer token); SearXNG ignores it.
	APIKey string
	// Timeout bounds each HTTP attempt (default 20s).
	Timeout time.Duration
	// MaxRetryAfter is the longest Retry-After the tool waits on a 429
	// before trying once more (default 10s); a longer one is an error
	// that tells the model when to try again.
	MaxRetryAfter time.Duration
	// DefaultResults is max_results when the model omits it (default 5).
	DefaultResults int
	// MaxBodyBytes caps the provider's answer (default 2 MiB).
	MaxBodyBytes int64
	// Limits cap the fields and the whole output.
	Limits Limits
	// Transport, when set, replaces the HTTP transport (a clone of
	// http.DefaultTransport by default).
	Transport http.RoundTripper
}

// Limits cap what the model sees, in characters.
type Limits struct {
	Title   int // default 300
	URL     int // default 2048
	Snippet int // default 1000
	// Total caps the JSON the tool returns (default 16000): results are
	// dropped from the end until it fits.
	Total int
}

func (l Limits) withDefaults() Limits {
	if l.Title <= 0 {
		l.Title = 300
	}
	if l.URL <= 0 {
		l.URL = 2048
	}
	if l.Snippet <= 0 {
		l.Snippet = 1000
	}
	if l.Total <= 0 {
		l.Total = 16000
	}
	return l
}

// Search is a configured provider plus the tool's limits and retry rule.
type Search struct {
	cfg       Config
	provider  Provider
	transport *http.Transport
}

// New validates cfg and returns the search. Close releases its idle
// connections.
func New(cfg Config) (*Search, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 20 * time.Second
	}
	if cfg.MaxRetryAfter <= 0 {
		cfg.MaxRetryAfter = 10 * time.Second
	}
	if cfg.DefaultResults <= 0 {
		cfg.DefaultResults = 5
	}
	if cfg.DefaultResults > 10 {
		return nil, fmt.Errorf("max_results %d: want 1 to 10", cfg.DefaultResults)
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 2 << 20
	}
	cfg.Limits = cfg.Limits.withDefaults()
	s := &Search{cfg: cfg}
	rt := cfg.Transport
	if rt == nil {
		s.transport = http.DefaultTransport.(*http.Transport).Clone()
		rt = s.transport
	}
	hc := &http.Client{Transport: rt, Timeout: cfg.Timeout}
	base := strings.TrimRight(cfg.BaseURL, "/")
	switch cfg.Provider {
	case ProviderTavily:
		if base == "" {
			base = DefaultTavilyURL
		}
		if cfg.APIKey == "" {
			return nil, errors.New("tavily needs an API key")
		}
		s.provider = &tavily{base: base, key: cfg.APIKey, hc: hc, s: s}
	case ProviderSearXNG:
		if base == "" {
			return nil, errors.New("searxng needs base_url (the instance, e.g. http://localhost:8080)")
		}
		s.provider = &searxng{base: base, hc: hc, s: s}
	default:
		return nil, fmt.Errorf("provider %q: want tavily or searxng", cfg.Provider)
	}
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("base_url %q: want an http:// or https:// URL", cfg.BaseURL)
	}
	return s, nil
}

// Provider returns the configured provider.
func (s *Search) Provider() Provider { return s.provider }

// Close closes idle connections of the search's own transport.
func (s *Search) Close() {
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
}

const schema = `{"type":"object","required":["query"],"additionalProperties":false,"properties":{` +
	`"query":{"type":"string","minLength":1,"maxLength":400,"description":"What to search the web for."},` +
	`"max_results":{"type":"integer","minimum":1,"maximum":10,"description":"How many results to return (1-10, default %d)."}}}`

// Tool returns the web_search tool.
func (s *Search) Tool() agent.Tool {
	return agent.Tool{
		Name: ToolName,
		Description: "Search the web. Returns a JSON list of results, each with title, url, snippet and score " +
			"(higher is more relevant). Snippets are short extracts; cite the url when you use a result.",
		Schema: json.RawMessage(fmt.Sprintf(schema, s.cfg.DefaultResults)),
		// One attempt, one wait and one more attempt, with slack.
		Timeout:      2*s.cfg.Timeout + s.cfg.MaxRetryAfter + 30*time.Second,
		Capabilities: agent.CapNetwork,
		Func: func(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
			var a struct {
				Query      string `json:"query"`
				MaxResults int    `json:"max_results"`
			}
			if err := req.DecodeArgs(&a); err != nil {
				return agent.ToolResult{}, err
			}
			out, err := s.Run(ctx, a.Query, a.MaxResults)
			if err != nil {
				return agent.ToolResult{}, err
			}
			return agent.ToolResult{Content: out}, nil
		},
	}
}

// Run searches and renders the bounded JSON list the model sees.
func (s *Search) Run(ctx context.Context, query string, max int) (string, error) {
	query = strings.TrimSpace(query)
	if query == "" {
		return "", errors.New("query is empty: send the words to search for")
	}
	if max <= 0 {
		max = s.cfg.DefaultResults
	}
	max = min(max, 10)
	rs, err := s.provider.Search(ctx, query, max)
	if err != nil {
		return "", err
	}
	return Render(rs, max, s.cfg.Limits), nil
}

// Render caps each field and the whole list and returns it as JSON.
func Render(rs []Result, max int, l Limits) string {
	l = l.withDefaults()
	out := make([]Result, 0, min(len(rs), max))
	for _, r := range rs {
		if len(out) == max {
			break
		}
		r.Title = clip(oneLine(r.Title), l.Title)
		r.URL = clip(strings.TrimSpace(r.URL), l.URL)
		r.Snippet = clip(oneLine(r.Snippet), l.Snippet)
		if r.URL == "" && r.Title == "" && r.Snippet == "" {
			continue
		}
		out = append(out, r)
	}
	for {
		b, err := json.Marshal(out)
		if err != nil || len(b) <= l.Total {
			if err != nil {
				return "[]"
			}
			return string(b)
		}
		if len(out) == 0 {
			return "[]"
		}
		out = out[:len(out)-1]
	}
}

// oneLine collapses runs of white space.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// clip cuts s to at most n characters (runes), marking the cut with "…".
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// do sends the request built by mk, honouring one 429 with a Retry-After
// no longer than MaxRetryAfter, and returns the body of a 2xx answer.
func (s *Search) do(ctx context.Context, name string, hc *http.Client, mk func(context.Context) (*http.Request, error)) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		req, err := mk(ctx)
		if err != nil {
			return nil, &Error{Code: CodeRejected, Provider: name, Message: err.Error()}
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, transportError(ctx, name, s.cfg.Timeout, err)
		}
		body, rerr := readCapped(resp.Body, s.cfg.MaxBodyBytes)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			wait, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
			if attempt == 0 && ok && wait <= s.cfg.MaxRetryAfter {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
					continue
				case <-ctx.Done():
					t.Stop()
					return nil, transportError(ctx, name, s.cfg.Timeout, ctx.Err())
				}
			}
			msg := "rate limited (HTTP 429)"
			switch {
			case ok && attempt == 0:
				msg += fmt.Sprintf("; the provider asks to wait %s: search again later or go on without it", wait.Round(time.Second))
			case ok:
				msg += fmt.Sprintf(" again after waiting; it asks to wait %s more: search again later or go on without it", wait.Round(time.Second))
			default:
				msg += "; search again later or go on without it"
			}
			return nil, &Error{Code: CodeRateLimited, Provider: name, Message: msg, RetryAfter: wait}
		}
		if rerr != nil {
			if errors.Is(rerr, errTooLarge) {
				return nil, &Error{Code: CodeBadResponse, Provider: name, Message: fmt.Sprintf("the answer is larger than %d bytes; try a narrower query", s.cfg.MaxBodyBytes)}
			}
			return nil, transportError(ctx, name, s.cfg.Timeout, rerr)
		}
		if resp.StatusCode/100 != 2 {
			return nil, statusError(name, resp.StatusCode, body)
		}
		return body, nil
	}
}

var errTooLarge = errors.New("body too large")

func readCapped(r io.Reader, n int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, n+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > n {
		return nil, errTooLarge
	}
	return b, nil
}

func transportError(ctx context.Context, name string, timeout time.Duration, err error) error {
	var ne interface{ Timeout() bool }
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", name, ctx.Err())
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return &Error{Code: CodeTimeout, Provider: name, Message: fmt.Sprintf("no answer within %s; try again or go on without it", timeout)}
	}
	return &Error{Code: CodeUnavailable, Provider: name, Message: fmt.Sprintf("cannot reach the provider (%s); try again later or go on without it", shortErr(err))}
}

// shortErr drops the URL Go's client puts in its errors (it may carry a
// query string) and keeps the cause.
func shortErr(err error) string {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) && ue.Unwrap() != nil {
		err = ue.Unwrap()
	}
	return clip(err.Error(), 200)
}

func statusError(name string, status int, body []byte) error {
	detail := providerMessage(body)
	suffix := ""
	if detail != "" {
		suffix = ": " + detail
	}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return &Error{Code: CodeAuth, Provider: name, Message: fmt.Sprintf("the provider refused the request (HTTP %d)%s; web search is misconfigured, go on without it", status, suffix)}
	case status >= 500:
		return &Error{Code: CodeUnavailable, Provider: name, Message: fmt.Sprintf("the provider failed (HTTP %d)%s; try again later or go on without it", status, suffix)}
	}
	return &Error{Code: CodeRejected, Provider: name, Message: fmt.Sprintf("the provider rejected the query (HTTP %d)%s; change the query", status, suffix)}
}

// providerMessage extracts an error text from a JSON error body
// ({"detail":{"error":...}}, {"detail":...}, {"error":...},
// {"message":...}) or the start of a plain body.
func providerMessage(body []byte) string {
	var v struct {
		Detail  json.RawMessage `json:"detail"`
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &v) == nil {
		for _, raw := range []json.RawMessage{v.Detail, v.Error} {
			var s string
			if json.Unmarshal(raw, &s) == nil && s != "" {
				return clip(oneLine(s), 300)
			}
			var inner struct {
				Error string `json:"error"`
			}
			if json.Unmarshal(raw, &inner) == nil && inner.Error != "" {
				return clip(oneLine(inner.Error), 300)
			}
		}
		if v.Message != "" {
			return clip(oneLine(v.Message), 300)
		}
		return ""
	}
	return clip(oneLine(string(body)), 200)
}

// badJSON is the error for a 2xx body that is not the provider's JSON.
func badJSON(name string, body []byte, err error) error {
	return &Error{Code: CodeBadResponse, Provider: name, Message: fmt.Sprintf(
		"the answer is not the expected JSON (%s; it starts with %q); try again later or go on without it",
		clip(err.Error(), 120), clip(string(body), 80))}
}

// ParseRetryAfter reads a Retry-After value: delay seconds or an HTTP
// date (relative to now). ok is false when v is empty or unreadable.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > 1<<31 {
			n = 1 << 31
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
