package openai

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/plumbhq/plumb/pkg/model"
)

func TestConfigDefaults(t *testing.T) {
	m, err := New(Config{Model: "gpt-4.1"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	got := m.Config()
	want := Config{
		BaseURL:          "https://api.openai.com/v1",
		Model:            "gpt-4.1",
		StreamUsage:      ptr(true),
		FirstByteTimeout: 60 * time.Second,
		RequestTimeout:   10 * time.Minute,
		Retry: RetryConfig{
			MaxAttempts:       4,
			InitialBackoff:    time.Second,
			MaxBackoff:        30 * time.Second,
			MaxRetryAfter:     60 * time.Second,
			RetryAfterPartial: ptr(true),
		},
		OverflowPatterns: []string{"maximum context length", "context_length_exceeded", "prompt is too long", "too many tokens"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults =\n%+v\nwant\n%+v", got, want)
	}
}

func TestConfigInvalid(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"missing model", Config{}, "model is required"},
		{"negative timeout", Config{Model: "m", FirstByteTimeout: -time.Second}, "first byte timeout must be positive"},
		{"negative attempts", Config{Model: "m", Retry: RetryConfig{MaxAttempts: -1}}, "max attempts must be positive"},
		{"negative backoff", Config{Model: "m", Retry: RetryConfig{MaxBackoff: -1}}, "max backoff must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New error = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestRetryAfterHeader(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
		wantOK bool
	}{
		{"none", http.Header{}, 0, false},
		{"seconds", http.Header{"Retry-After": {"2"}}, 2 * time.Second, true},
		{"fractional seconds", http.Header{"Retry-After": {"0.25"}}, 250 * time.Millisecond, true},
		{"zero", http.Header{"Retry-After": {"0"}}, 0, true},
		{"http date", http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second, true},
		{"http date in the past", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0, true},
		{"milliseconds win", http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"2"}}, 1500 * time.Millisecond, true},
		{"bad milliseconds fall back", http.Header{"Retry-After-Ms": {"soon"}, "Retry-After": {"2"}}, 2 * time.Second, true},
		{"huge saturates", http.Header{"Retry-After": {"1e30"}}, time.Duration(1<<63 - 1), true},
		{"garbage", http.Header{"Retry-After": {"later"}}, 0, false},
		{"negative", http.Header{"Retry-After": {"-5"}}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := retryAfter(tt.header, now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("retryAfter = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	c := newClassifier(Config{OverflowPatterns: DefaultOverflowPatterns(), FirstByteTimeout: time.Minute, RequestTimeout: time.Hour})
	sent := &attemptState{sent: true, status: 200}
	tests := []struct {
		name       string
		err, cause error
		st         *attemptState
		wantCode   model.ErrorCode
		wantStatus int
	}{
		{"first byte timeout", errors.New("context canceled"), errFirstByteTimeout, &attemptState{sent: true}, model.CodeUnavailable, 0},
		{"request timeout", errors.New("context deadline exceeded"), errRequestTimeout, sent, model.CodeUnavailable, 0},
		{"not sent", goopenai.ErrChatCompletionInvalidModel, nil, &attemptState{}, model.CodeBadRequest, 0},
		{"dial error", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), nil, &attemptState{sent: true}, model.CodeUnavailable, 0},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), nil, sent, model.CodeUnavailable, 0},
		{"empty messages", goopenai.ErrTooManyEmptyStreamMessages, nil, sent, model.CodeUnavailable, 0},
		{"request error 503", &goopenai.RequestError{HTTPStatusCode: 503, Body: []byte("upstream down")}, nil, sent, model.CodeUnavailable, 503},
		{"request error 413 overflow", &goopenai.RequestError{HTTPStatusCode: 413, Body: []byte("Too many tokens in prompt")}, nil, sent, model.CodeContextOverflow, 413},
		{"api error 408", &goopenai.APIError{HTTPStatusCode: 408, Message: "timeout"}, nil, sent, model.CodeUnavailable, 408},
		{"api error 409", &goopenai.APIError{HTTPStatusCode: 409, Message: "conflict"}, nil, sent, model.CodeBadRequest, 409},
		{"overflow code on any status", &goopenai.APIError{HTTPStatusCode: 500, Code: "context_length_exceeded"}, nil, sent, model.CodeContextOverflow, 500},
		{"unreadable error body", errors.New("error, reading response body: reset"), nil, &attemptState{sent: true, status: 429}, model.CodeRateLimited, 429},
		{"mid-stream rate limit", fmt.Errorf("error, %w", &goopenai.APIError{Type: "rate_limit_exceeded"}), nil, sent, model.CodeRateLimited, 0},
		{"mid-stream unknown type", fmt.Errorf("error, %w", &goopenai.APIError{Type: "weird"}), nil, sent, model.CodeUnavailable, 0},
		{"mid-stream overflow code", fmt.Errorf("error, %w", &goopenai.APIError{Type: "invalid_request_error", Code: "context_length_exceeded"}), nil, sent, model.CodeContextOverflow, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := c.classify(tt.err, tt.cause, tt.st)
			if got.Code != tt.wantCode || got.StatusCode != tt.wantStatus {
				t.Errorf("classify = %s status %d (%v), want %s status %d", got.Code, got.StatusCode, got, tt.wantCode, tt.wantStatus)
			}
			if got.Retryable != (tt.wantCode == model.CodeRateLimited || tt.wantCode == model.CodeUnavailable) {
				t.Errorf("retryable = %v for %s", got.Retryable, got.Code)
			}
			if got.Message == "" {
				t.Errorf("empty message")
			}
		})
	}
}

func TestWatchedBodyDetectsDone(t *testing.T) {
	tests := []struct {
		name string
		body string
		want bool
	}{
		{"done", "data: {\"x\":1}\n\ndata: [DONE]\n\n", true},
		{"done without space", "data:[DONE]\n", true},
		{"done with padding", "  data:   [DONE]  \r\n", true},
		{"no done", "data: {\"x\":1}\n\n", false},
		{"done without newline", "data: [DONE]", false},
		{"done inside a payload", "data: {\"text\":\"[DONE]\"}\n", false},
		{"done after a long line", "data: " + strings.Repeat("x", 500) + "\ndata: [DONE]\n", true},
		{"long padding", "data: " + strings.Repeat(" ", 100) + "[DONE]\n", true},
		{"two terminators in one line", "data: [DONE][DONE]\n", false},
		{"other prefix", "event: [DONE]\n", false},
	}
	for _, tt := range tests {
		for _, reader := range []struct {
			name string
			wrap func(io.Reader) io.Reader
		}{
			{"whole", func(r io.Reader) io.Reader { return r }},
			{"byte by byte", iotest.OneByteReader},
		} {
			t.Run(tt.name+"/"+reader.name, func(t *testing.T) {
				st := &attemptState{}
				b := &watchedBody{ReadCloser: io.NopCloser(reader.wrap(strings.NewReader(tt.body))), st: st}
				if _, err := io.ReadAll(b); err != nil {
					t.Fatal(err)
				}
				if st.sawDone != tt.want {
					t.Errorf("sawDone = %v, want %v", st.sawDone, tt.want)
				}
				if tt.body != "" && !st.gotByte {
					t.Errorf("first byte not noticed")
				}
			})
		}
	}
}
