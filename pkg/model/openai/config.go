package openai

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Defaults applied by New to zero-valued Config fields. They are the example
// values of docs/agent-core.md §5.6.
const (
	DefaultFirstByteTimeout = 60 * time.Second
	DefaultRequestTimeout   = 10 * time.Minute
	DefaultMaxAttempts      = 4
	DefaultInitialBackoff   = 1 * time.Second
	DefaultMaxBackoff       = 30 * time.Second
	DefaultMaxRetryAfter    = 60 * time.Second
)

// DefaultOverflowPatterns returns the error-message fragments that mark a
// 400/413 response as a context overflow when Config.OverflowPatterns is nil.
func DefaultOverflowPatterns() []string {
	return []string{"maximum context length", "context_length_exceeded", "prompt is too long", "too many tokens"}
}

// Config describes one model endpoint (one `models.<name>` entry of
// agentd.yaml). Zero values take the documented defaults.
type Config struct {
	// BaseURL is the OpenAI-compatible API root, e.g.
	// "https://api.openai.com/v1" (the default when empty) or
	// "http://vllm:8000/v1".
	BaseURL string
	// APIKey is sent as a bearer token; empty sends no Authorization header.
	APIKey string
	// Model is the provider's model name. Required.
	Model string
	// ContextWindow is the model's context size in tokens; 0 means unknown.
	// The adapter only reports it; summarization uses it.
	ContextWindow int
	// MaxOutputTokens is sent as max_completion_tokens when a Request does
	// not set MaxTokens; 0 sends nothing.
	MaxOutputTokens int
	// Temperature is sent when non-nil and a Request does not override it.
	// go-openai omits a temperature of exactly 0, so 0 means the provider
	// default.
	Temperature *float32
	// ParallelToolCalls is sent as parallel_tool_calls when non-nil and the
	// request offers tools; nil leaves the provider default.
	ParallelToolCalls *bool
	// StreamUsage asks for a final usage chunk (stream_options.include_usage).
	// nil means true.
	StreamUsage *bool
	// FirstByteTimeout bounds the wait for the first byte of a response;
	// exceeding it is a retryable transport failure. Default 60s.
	FirstByteTimeout time.Duration
	// RequestTimeout bounds one attempt from request to the end of the
	// stream; exceeding it is a retryable transport failure. Default 10m.
	RequestTimeout time.Duration
	// Retry controls retries of transient failures.
	Retry RetryConfig
	// OverflowPatterns are matched case-insensitively against the message
	// of 400/413 responses to detect a context overflow. nil means
	// DefaultOverflowPatterns; an empty non-nil slice disables matching (the
	// context_length_exceeded code is still recognized).
	OverflowPatterns []string
	// ExtraHeaders are added to every request. The X-Plumb-* headers derived
	// from model.Metadata take precedence over them.
	ExtraHeaders map[string]string
}

// RetryConfig controls retries of one model call (docs/agent-core.md §9).
type RetryConfig struct {
	// MaxAttempts counts all attempts, the first included. Default 4; 1
	// disables retries.
	MaxAttempts int
	// InitialBackoff is the base delay before the second attempt; it doubles
	// for each further attempt. Default 1s.
	InitialBackoff time.Duration
	// MaxBackoff caps the base delay. Default 30s.
	MaxBackoff time.Duration
	// MaxRetryAfter is the longest Retry-After the adapter will wait; a
	// longer one fails the call at once with the retryable error. Default
	// 60s.
	MaxRetryAfter time.Duration
	// RetryAfterPartial allows a retry after text, reasoning or tool-call
	// deltas were already streamed; the new attempt's deltas carry a higher
	// Delta.Attempt. nil means true.
	RetryAfterPartial *bool
}

// withDefaults validates c and fills in defaults.
func (c Config) withDefaults() (Config, error) {
	var errs []error
	if strings.TrimSpace(c.Model) == "" {
		errs = append(errs, errors.New("model is required"))
	}
	if c.BaseURL == "" {
		c.BaseURL = "https://api.openai.com/v1"
	}
	if c.ContextWindow < 0 || c.MaxOutputTokens < 0 {
		errs = append(errs, errors.New("context window and max output tokens must not be negative"))
	}
	if c.StreamUsage == nil {
		c.StreamUsage = ptr(true)
	}
	durations := []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"first byte timeout", &c.FirstByteTimeout, DefaultFirstByteTimeout},
		{"request timeout", &c.RequestTimeout, DefaultRequestTimeout},
		{"retry initial backoff", &c.Retry.InitialBackoff, DefaultInitialBackoff},
		{"retry max backoff", &c.Retry.MaxBackoff, DefaultMaxBackoff},
		{"retry max retry-after", &c.Retry.MaxRetryAfter, DefaultMaxRetryAfter},
	}
	for _, d := range durations {
		switch {
		case *d.v < 0:
			errs = append(errs, fmt.Errorf("%s must be positive, got %v", d.name, *d.v))
		case *d.v == 0:
			*d.v = d.def
		}
	}
	switch {
	case c.Retry.MaxAttempts < 0:
		errs = append(errs, fmt.Errorf("retry max attempts must be positive, got %d", c.Retry.MaxAttempts))
	case c.Retry.MaxAttempts == 0:
		c.Retry.MaxAttempts = DefaultMaxAttempts
	}
	if c.Retry.RetryAfterPartial == nil {
		c.Retry.RetryAfterPartial = ptr(true)
	}
	if c.OverflowPatterns == nil {
		c.OverflowPatterns = DefaultOverflowPatterns()
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("model config: %w", err)
	}
	return c, nil
}

func ptr[T any](v T) *T { return &v }
