package openai

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// span is an accepted range [lo, hi) for one recorded sleep; lo == hi
// means exactly lo.
type span struct{ lo, hi time.Duration }

func exactly(d time.Duration) span { return span{d, d} }

func within(lo, hi time.Duration) span { return span{lo, hi} }

func (s span) holds(d time.Duration) bool {
	if s.lo == s.hi {
		return d == s.lo
	}
	return d >= s.lo && d < s.hi
}

func (s span) String() string {
	if s.lo == s.hi {
		return s.lo.String()
	}
	return fmt.Sprintf("[%v, %v)", s.lo, s.hi)
}

func serverError(typ string, code any, msg string) *modeltest.ErrorObject {
	return &modeltest.ErrorObject{Type: typ, Code: code, Message: msg}
}

// emptyMessages answers with more SSE comment lines than go-openai accepts
// before a data line (ErrTooManyEmptyStreamMessages).
func emptyMessages(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	for range 400 {
		fmt.Fprint(w, ": keep-alive\n")
	}
}

func TestGenerateRetries(t *testing.T) {
	const ok = model.ErrorCode("")
	h429 := func(h http.Header) modeltest.Turn { return modeltest.HTTPError(429, h, "") }
	status := func(code int) modeltest.Turn { return modeltest.HTTPError(code, nil, "") }
	apiErr := func(code int, typ string, errCode any, msg string) modeltest.Turn {
		return modeltest.HTTPError(code, nil, modeltest.ErrorBody(typ, errCode, msg))
	}
	httpDate := time.Now().Add(10 * time.Second).UTC().Format(http.TimeFormat)

	tests := []struct {
		name   string
		turns  []modeltest.Turn
		mutate func(*Config)

		wantCode       model.ErrorCode // ok for success
		wantRetryable  bool
		wantStatus     int
		wantRetryAfter time.Duration
		wantMessage    string // substring of the error
		wantRequests   int
		wantSleeps     []span
		wantTexts      []string // "attempt:text"; nil skips the check
		wantContent    string
	}{
		{
			name:         "#62 429 with Retry-After 2 is honoured",
			turns:        []modeltest.Turn{h429(modeltest.RetryAfter("2")), modeltest.Text("ok")},
			wantRequests: 2,
			wantSleeps:   []span{exactly(2 * time.Second)},
			wantTexts:    []string{"1:o", "1:k"},
			wantContent:  "ok",
		},
		{
			name:         "429 with retry-after-ms",
			turns:        []modeltest.Turn{h429(http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"2"}}), modeltest.Text("ok")},
			wantRequests: 2,
			wantSleeps:   []span{exactly(1500 * time.Millisecond)},
			wantContent:  "ok",
		},
		{
			name:         "429 with Retry-After as an HTTP date",
			turns:        []modeltest.Turn{h429(modeltest.RetryAfter(httpDate)), modeltest.Text("ok")},
			wantRequests: 2,
			wantSleeps:   []span{within(8*time.Second, 10*time.Second+time.Millisecond)},
			wantContent:  "ok",
		},
		{
			name:         "#63 503 three times then success, jittered exponential backoff",
			turns:        []modeltest.Turn{status(503), status(503), status(503), modeltest.Text("ok")},
			wantRequests: 4,
			wantSleeps: []span{
				within(500*time.Millisecond, time.Second),
				within(time.Second, 2*time.Second),
				within(2*time.Second, 4*time.Second),
			},
			wantContent: "ok",
		},
		{
			name:   "backoff is capped by max backoff",
			turns:  []modeltest.Turn{status(503), status(503), status(503), modeltest.Text("ok")},
			mutate: func(c *Config) { c.Retry.MaxBackoff = 1500 * time.Millisecond },
			wantSleeps: []span{
				within(500*time.Millisecond, time.Second),
				within(750*time.Millisecond, 1500*time.Millisecond),
				within(750*time.Millisecond, 1500*time.Millisecond),
			},
			wantRequests: 4,
			wantContent:  "ok",
		},
		{
			name:          "#64 500 four times gives up retryable",
			turns:         []modeltest.Turn{status(500), status(500), status(500), status(500)},
			wantCode:      model.CodeUnavailable,
			wantRetryable: true,
			wantStatus:    500,
			wantMessage:   "attempt 4 of 4",
			wantRequests:  4,
			wantSleeps: []span{
				within(500*time.Millisecond, time.Second),
				within(time.Second, 2*time.Second),
				within(2*time.Second, 4*time.Second),
			},
		},
		{
			name:         "502 with a non-JSON body and 529 are retried",
			turns:        []modeltest.Turn{modeltest.HTTPError(502, nil, "<html>bad gateway</html>"), status(529), modeltest.Text("ok")},
			wantRequests: 3,
			wantSleeps:   []span{within(500*time.Millisecond, time.Second), within(time.Second, 2*time.Second)},
			wantContent:  "ok",
		},
		{
			name:         "#65 401 is not retried",
			turns:        []modeltest.Turn{status(401)},
			wantCode:     model.CodeAuth,
			wantStatus:   401,
			wantRequests: 1,
		},
		{
			name:         "403 is not retried",
			turns:        []modeltest.Turn{status(403)},
			wantCode:     model.CodeAuth,
			wantStatus:   403,
			wantRequests: 1,
		},
		{
			name:         "400 is a bad request",
			turns:        []modeltest.Turn{apiErr(400, "invalid_request_error", "invalid_value", "messages[1].role is invalid")},
			wantCode:     model.CodeBadRequest,
			wantStatus:   400,
			wantMessage:  "messages[1].role is invalid",
			wantRequests: 1,
		},
		{
			name:         "404 is a bad request",
			turns:        []modeltest.Turn{apiErr(404, "invalid_request_error", "model_not_found", "The model `nope` does not exist")},
			wantCode:     model.CodeBadRequest,
			wantStatus:   404,
			wantRequests: 1,
		},
		{
			name:         "422 is a bad request even when it mentions the context length",
			turns:        []modeltest.Turn{apiErr(422, "invalid_request_error", nil, "maximum context length is 4096")},
			wantCode:     model.CodeBadRequest,
			wantStatus:   422,
			wantRequests: 1,
		},
		{
			name:           "#66 Retry-After above the maximum gives up at once",
			turns:          []modeltest.Turn{h429(modeltest.RetryAfter("3600"))},
			wantCode:       model.CodeRateLimited,
			wantRetryable:  true,
			wantStatus:     429,
			wantRetryAfter: time.Hour,
			wantMessage:    "retry-after above the maximum",
			wantRequests:   1,
		},
		{
			name:           "Retry-After past the context deadline gives up at once",
			turns:          []modeltest.Turn{h429(modeltest.RetryAfter("30"))}, // the test context has 20s
			wantCode:       model.CodeRateLimited,
			wantRetryable:  true,
			wantStatus:     429,
			wantRetryAfter: 30 * time.Second,
			wantMessage:    "deadline",
			wantRequests:   1,
		},
		{
			name:          "429 four times",
			turns:         []modeltest.Turn{h429(nil), h429(nil), h429(nil), h429(nil)},
			wantCode:      model.CodeRateLimited,
			wantRetryable: true,
			wantStatus:    429,
			wantRequests:  4,
			wantSleeps: []span{
				within(500*time.Millisecond, time.Second),
				within(time.Second, 2*time.Second),
				within(2*time.Second, 4*time.Second),
			},
		},
		{
			name:          "max attempts 1 disables retries",
			turns:         []modeltest.Turn{status(503)},
			mutate:        func(c *Config) { c.Retry.MaxAttempts = 1 },
			wantCode:      model.CodeUnavailable,
			wantRetryable: true,
			wantStatus:    503,
			wantRequests:  1,
		},
		{
			name:         "#67 dropped stream after two chunks, retried with attempt 2 deltas",
			turns:        []modeltest.Turn{modeltest.Drop(2, modeltest.Text("partial answer")), modeltest.Text("full")},
			wantRequests: 2,
			wantSleeps:   []span{within(500*time.Millisecond, time.Second)},
			wantTexts:    []string{"1:part", "1:ial a", "2:f", "2:u", "2:ll"},
			wantContent:  "full",
		},
		{
			name:          "dropped stream after deltas without retry_after_partial",
			turns:         []modeltest.Turn{modeltest.Drop(2, modeltest.Text("partial answer"))},
			mutate:        func(c *Config) { c.Retry.RetryAfterPartial = ptr(false) },
			wantCode:      model.CodeUnavailable,
			wantRetryable: true,
			wantMessage:   "connection closed mid-response (attempt 1 of 4; output already streamed)",
			wantRequests:  1,
			wantTexts:     []string{"1:part", "1:ial a"},
		},
		{
			name:         "dropped before any delta keeps attempt 1",
			turns:        []modeltest.Turn{modeltest.Drop(0, modeltest.Text("lost")), modeltest.Text("ok")},
			mutate:       func(c *Config) { c.Retry.RetryAfterPartial = ptr(false) },
			wantRequests: 2,
			wantSleeps:   []span{within(500*time.Millisecond, time.Second)},
			wantTexts:    []string{"1:o", "1:k"},
			wantContent:  "ok",
		},
		{
			name:         "clean EOF without [DONE] or finish_reason is stream_truncated",
			turns:        []modeltest.Turn{{Text: []string{"a"}, NoFinishReason: true, NoDone: true}, modeltest.Text("ok")},
			wantRequests: 2,
			wantSleeps:   []span{within(500*time.Millisecond, time.Second)},
			wantTexts:    []string{"1:a", "2:o", "2:k"},
			wantContent:  "ok",
		},
		{
			name:         "finish_reason then EOF without [DONE] is complete",
			turns:        []modeltest.Turn{{Text: []string{"ok"}, NoDone: true}},
			wantRequests: 1,
			wantContent:  "ok",
		},
		{
			name:         "[DONE] without finish_reason is complete",
			turns:        []modeltest.Turn{{Text: []string{"ok"}, NoFinishReason: true}},
			wantRequests: 1,
			wantContent:  "ok",
		},
		{
			name:         "too many empty stream messages is a transport failure",
			turns:        []modeltest.Turn{{Handler: emptyMessages}, modeltest.Text("ok")},
			wantRequests: 2,
			wantSleeps:   []span{within(500*time.Millisecond, time.Second)},
			wantContent:  "ok",
		},
		{
			name:         "overflow by code",
			turns:        []modeltest.Turn{apiErr(400, "invalid_request_error", "context_length_exceeded", "Input too long for us")},
			wantCode:     model.CodeContextOverflow,
			wantStatus:   400,
			wantRequests: 1,
		},
		{
			name:         "overflow by pattern on 400",
			turns:        []modeltest.Turn{apiErr(400, "invalid_request_error", nil, "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens.")},
			wantCode:     model.CodeContextOverflow,
			wantStatus:   400,
			wantRequests: 1,
		},
		{
			name:         "overflow by pattern on 413, case-insensitive",
			turns:        []modeltest.Turn{apiErr(413, "request_too_large", nil, "Prompt Is Too Long: 250000 tokens > 200000 maximum")},
			wantCode:     model.CodeContextOverflow,
			wantStatus:   413,
			wantRequests: 1,
		},
		{
			name:         "overflow by a configured pattern",
			turns:        []modeltest.Turn{apiErr(400, "BadRequestError", nil, "Input exceeds window of 4k")},
			mutate:       func(c *Config) { c.OverflowPatterns = []string{"INPUT EXCEEDS WINDOW"} },
			wantCode:     model.CodeContextOverflow,
			wantStatus:   400,
			wantRequests: 1,
		},
		{
			name:         "configured patterns replace the defaults",
			turns:        []modeltest.Turn{apiErr(400, "BadRequestError", nil, "too many tokens")},
			mutate:       func(c *Config) { c.OverflowPatterns = []string{"input exceeds window"} },
			wantCode:     model.CodeBadRequest,
			wantStatus:   400,
			wantRequests: 1,
		},
		{
			name:         "content filter",
			turns:        []modeltest.Turn{{Text: []string{"I"}, FinishReason: "content_filter"}},
			wantCode:     model.CodeContentFiltered,
			wantRequests: 1,
			wantTexts:    []string{"1:I"},
		},
		{
			name:         "mid-stream server_error is retried",
			turns:        []modeltest.Turn{{Text: []string{"Hel"}, StreamError: serverError("server_error", nil, "The server had an error")}, modeltest.Text("ok")},
			wantRequests: 2,
			wantSleeps:   []span{within(500*time.Millisecond, time.Second)},
			wantTexts:    []string{"1:Hel", "2:o", "2:k"},
			wantContent:  "ok",
		},
		{
			name:         "mid-stream invalid_request_error is not retried",
			turns:        []modeltest.Turn{{StreamError: serverError("invalid_request_error", nil, "bad tool schema")}},
			wantCode:     model.CodeBadRequest,
			wantMessage:  "bad tool schema",
			wantRequests: 1,
		},
		{
			name:         "mid-stream error with an HTTP status code (vLLM)",
			turns:        []modeltest.Turn{{StreamError: serverError("BadRequestError", 400, "This model's maximum context length is 4096 tokens")}},
			wantCode:     model.CodeContextOverflow,
			wantRequests: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := modeltest.New(t)
			srv.Script(modeltest.DefaultKey, tt.turns...)
			m, clock := newTestModel(t, srv, tt.mutate)

			var rec recorder
			resp, err := m.Generate(testContext(t), userRequest("hi"), rec.on)

			if tt.wantCode == ok {
				if err != nil {
					t.Fatalf("Generate: %v", err)
				}
				if resp.Message.Content != tt.wantContent {
					t.Errorf("content = %q, want %q", resp.Message.Content, tt.wantContent)
				}
				if resp.Attempts != tt.wantRequests {
					t.Errorf("attempts = %d, want %d", resp.Attempts, tt.wantRequests)
				}
			} else {
				var me *model.Error
				if !errors.As(err, &me) {
					t.Fatalf("err = %v (%T), want *model.Error %s", err, err, tt.wantCode)
				}
				if me.Code != tt.wantCode || me.Retryable != tt.wantRetryable || me.StatusCode != tt.wantStatus {
					t.Errorf("error = {%s retryable:%v status:%d}, want {%s retryable:%v status:%d}: %v",
						me.Code, me.Retryable, me.StatusCode, tt.wantCode, tt.wantRetryable, tt.wantStatus, me)
				}
				if me.RetryAfter != tt.wantRetryAfter {
					t.Errorf("RetryAfter = %v, want %v", me.RetryAfter, tt.wantRetryAfter)
				}
				if !strings.Contains(me.Error(), tt.wantMessage) {
					t.Errorf("error %q does not mention %q", me.Error(), tt.wantMessage)
				}
				if resp.Attempts != tt.wantRequests {
					t.Errorf("attempts = %d, want %d", resp.Attempts, tt.wantRequests)
				}
			}
			if n := len(srv.AllRequests()); n != tt.wantRequests {
				t.Errorf("server saw %d requests, want %d", n, tt.wantRequests)
			}
			sleeps := clock.Sleeps()
			if len(sleeps) != len(tt.wantSleeps) {
				t.Errorf("sleeps = %v, want %v", sleeps, tt.wantSleeps)
			} else {
				for i, s := range tt.wantSleeps {
					if !s.holds(sleeps[i]) {
						t.Errorf("sleep %d = %v, want %v", i+1, sleeps[i], s)
					}
				}
			}
			if tt.wantTexts != nil && !reflect.DeepEqual(rec.texts(), tt.wantTexts) {
				t.Errorf("deltas = %q, want %q", rec.texts(), tt.wantTexts)
			}
		})
	}
}

func TestBackoffDelays(t *testing.T) {
	m, err := New(Config{Model: "m", Retry: RetryConfig{InitialBackoff: time.Second, MaxBackoff: 30 * time.Second}}, WithRand(rand.NewPCG(7, 7)))
	if err != nil {
		t.Fatal(err)
	}
	bases := []time.Duration{1, 2, 4, 8, 16, 30, 30, 30}
	for seed := range 50 {
		m.jitter = rand.New(rand.NewPCG(uint64(seed), 1)).Int64N
		for i, b := range bases {
			base := b * time.Second
			if d := m.delay(i+1, &failure{}); d < base/2 || d >= base {
				t.Fatalf("seed %d: delay before attempt %d = %v, want in [%v, %v)", seed, i+2, d, base/2, base)
			}
		}
	}
	if d := m.delay(3, &failure{hasRetryAfter: true, retryAfter: 0}); d != 0 {
		t.Errorf("Retry-After 0 gives delay %v, want 0", d)
	}
}

// #62 in real time: the second request arrives no earlier than the
// Retry-After the first response asked for.
func TestRetryAfterRealClock(t *testing.T) {
	srv := modeltest.New(t)
	srv.Script(modeltest.DefaultKey, modeltest.HTTPError(429, http.Header{"Retry-After-Ms": {"150"}}, ""), modeltest.Text("ok"))
	m, err := New(Config{BaseURL: srv.URL(), Model: "m"}, WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := m.Generate(testContext(t), userRequest("hi"), nil)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if resp.Usage.Estimated || resp.Attempts != 2 {
		t.Errorf("usage %+v attempts %d, want the second attempt's reported usage", resp.Usage, resp.Attempts)
	}
	reqs := srv.AllRequests()
	if len(reqs) != 2 {
		t.Fatalf("server saw %d requests, want 2", len(reqs))
	}
	if gap := reqs[1].Received.Sub(reqs[0].Received); gap < 150*time.Millisecond {
		t.Errorf("gap between requests = %v, want >= 150ms", gap)
	}
}

func TestFirstByteTimeout(t *testing.T) {
	srv := modeltest.New(t)
	slow := modeltest.Text("late")
	slow.FirstByteDelay = time.Minute
	srv.Script(modeltest.DefaultKey, slow, modeltest.Text("ok"))
	// Generous enough that the second, prompt attempt never trips it.
	m, clock := newTestModel(t, srv, func(c *Config) { c.FirstByteTimeout = 500 * time.Millisecond })

	start := time.Now()
	resp, err := m.Generate(testContext(t), userRequest("hi"), nil)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("took %v, want about the first-byte timeout", elapsed)
	}
	if resp.Message.Content != "ok" || resp.Attempts != 2 || len(clock.Sleeps()) != 1 {
		t.Errorf("content %q attempts %d sleeps %v, want ok after one retry", resp.Message.Content, resp.Attempts, clock.Sleeps())
	}

	// Without retries, the timeout surfaces as MODEL_UNAVAILABLE.
	srv.Script(modeltest.DefaultKey, slow)
	m, _ = newTestModel(t, srv, func(c *Config) {
		c.FirstByteTimeout = 100 * time.Millisecond
		c.Retry.MaxAttempts = 1
	})
	_, err = m.Generate(testContext(t), userRequest("hi"), nil)
	var me *model.Error
	if !errors.As(err, &me) || me.Code != model.CodeUnavailable || !me.Retryable || !strings.Contains(me.Message, "first byte") {
		t.Errorf("err = %v, want retryable MODEL_UNAVAILABLE about the first byte", err)
	}
}

func TestRequestTimeout(t *testing.T) {
	srv := modeltest.New(t)
	slow := modeltest.Text("slow answer")
	slow.ChunkDelay = time.Minute
	srv.Script(modeltest.DefaultKey, slow)
	m, _ := newTestModel(t, srv, func(c *Config) {
		c.RequestTimeout = 500 * time.Millisecond
		c.Retry.MaxAttempts = 1
	})
	var rec recorder
	_, err := m.Generate(testContext(t), userRequest("hi"), rec.on)
	var me *model.Error
	if !errors.As(err, &me) || me.Code != model.CodeUnavailable || !strings.Contains(me.Message, "request exceeded") {
		t.Errorf("err = %v, want MODEL_UNAVAILABLE request timeout", err)
	}
	if got := rec.texts(); len(got) != 1 {
		t.Errorf("deltas = %q, want the first chunk only", got)
	}
}

func TestCancelMidStreamReturnsPromptly(t *testing.T) {
	srv := modeltest.New(t)
	slow := modeltest.Text("a slow answer")
	slow.ChunkDelay = time.Minute
	srv.Script(modeltest.DefaultKey, slow)
	m, clock := newTestModel(t, srv, nil)

	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	var canceledAt time.Time
	resp, err := m.Generate(ctx, userRequest("hi"), func(model.Delta) {
		canceledAt = time.Now()
		cancel()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if model.CodeOf(err) != "" {
		t.Errorf("cancellation classified as %s, want a plain context error", model.CodeOf(err))
	}
	if d := time.Since(canceledAt); d > 2*time.Second {
		t.Errorf("Generate returned %v after cancel", d)
	}
	if resp.Attempts != 1 || len(clock.Sleeps()) != 0 || len(srv.AllRequests()) != 1 {
		t.Errorf("attempts %d sleeps %v requests %d, want one attempt and no retry", resp.Attempts, clock.Sleeps(), len(srv.AllRequests()))
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	srv := modeltest.New(t)
	srv.Script(modeltest.DefaultKey, modeltest.HTTPError(503, nil, ""))
	// The real clock: the first backoff waits at least 5s.
	m, err := New(Config{BaseURL: srv.URL(), Model: "m", Retry: RetryConfig{InitialBackoff: 10 * time.Second}}, WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := m.Generate(ctx, userRequest("hi"), nil)
		done <- err
	}()
	// Cancel once the first attempt has failed.
	deadline := time.Now().Add(5 * time.Second)
	for len(srv.AllRequests()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Generate did not return within 2s of cancel")
	}
}
