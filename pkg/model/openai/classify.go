package openai

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/plumbhq/plumb/pkg/model"
)

// Causes of an attempt's own context ending (the caller's context is
// checked separately).
var (
	errFirstByteTimeout = errors.New("no first byte within the first-byte timeout")
	errRequestTimeout   = errors.New("request timed out")
	errStreamTruncated  = errors.New("stream_truncated: stream ended without [DONE] or finish_reason")
)

// classifier turns attempt failures into model.Errors (docs/agent-core.md §9 table).
type classifier struct {
	overflowPatterns []string // lower case
	firstByteTimeout time.Duration
	requestTimeout   time.Duration
}

func newClassifier(cfg Config) classifier {
	c := classifier{firstByteTimeout: cfg.FirstByteTimeout, requestTimeout: cfg.RequestTimeout}
	for _, p := range cfg.OverflowPatterns {
		if p = strings.ToLower(strings.TrimSpace(p)); p != "" {
			c.overflowPatterns = append(c.overflowPatterns, p)
		}
	}
	return c
}

func codeRetryable(code model.ErrorCode) bool {
	return code == model.CodeRateLimited || code == model.CodeUnavailable
}

func newError(code model.ErrorCode, status int, msg string, err error) *model.Error {
	return &model.Error{Code: code, Message: msg, Retryable: codeRetryable(code), StatusCode: status, Err: err}
}

// classify explains err, returned by go-openai during one attempt. cause is
// the cause of the attempt context's end, if it ended. The caller handles
// cancellation of its own context before asking.
func (c classifier) classify(err, cause error, st *attemptState) *model.Error {
	var (
		apiErr *goopenai.APIError
		reqErr *goopenai.RequestError
	)
	switch {
	case errors.Is(cause, errFirstByteTimeout):
		return newError(model.CodeUnavailable, 0, fmt.Sprintf("no first byte within %v", c.firstByteTimeout), errFirstByteTimeout)
	case errors.Is(cause, errRequestTimeout):
		return newError(model.CodeUnavailable, 0, fmt.Sprintf("request exceeded %v", c.requestTimeout), errRequestTimeout)
	case errors.As(err, &apiErr) && apiErr.HTTPStatusCode == 0:
		return c.midStream(apiErr)
	case errors.As(err, &apiErr):
		return c.status(apiErr.HTTPStatusCode, codeString(apiErr.Code), apiErr.Message, err)
	case errors.As(err, &reqErr) && reqErr.HTTPStatusCode != 0:
		return c.status(reqErr.HTTPStatusCode, "", string(reqErr.Body), err)
	case st.status != 0 && !success(st.status):
		// A failure status whose body could not be read.
		return c.status(st.status, "", err.Error(), err)
	case errors.Is(err, errStreamTruncated):
		return newError(model.CodeUnavailable, 0, "stream truncated: it ended without [DONE] or finish_reason", err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newError(model.CodeUnavailable, 0, "stream truncated: connection closed mid-response", err)
	case errors.Is(err, goopenai.ErrTooManyEmptyStreamMessages):
		return newError(model.CodeUnavailable, 0, "stream sent too many empty messages", err)
	case !st.sent:
		// go-openai refused the request before sending it (unknown model for
		// the endpoint, parameters a reasoning model rejects, bad JSON).
		return newError(model.CodeBadRequest, 0, "request rejected before sending: "+err.Error(), err)
	default:
		// Dial, reset, TLS, an unparsable chunk: all transport.
		return newError(model.CodeUnavailable, 0, "transport error: "+err.Error(), err)
	}
}

// status classifies an HTTP error response.
func (c classifier) status(status int, code, message string, err error) *model.Error {
	msg := fmt.Sprintf("HTTP %d", status)
	if m := strings.TrimSpace(message); m != "" {
		msg += ": " + truncate(m, 500)
	}
	return newError(c.statusCode(status, code, message), status, msg, err)
}

// statusCode maps an HTTP error status, the provider's error code and its
// message to an error code.
func (c classifier) statusCode(status int, code, message string) model.ErrorCode {
	switch {
	case code == "context_length_exceeded",
		(status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge) && c.overflows(message):
		return model.CodeContextOverflow
	case status == http.StatusTooManyRequests:
		return model.CodeRateLimited
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return model.CodeAuth
	case status == http.StatusRequestTimeout || status >= 500:
		// 500, 502, 503, 504 and 529 per docs/agent-core.md §9; other 5xx and 408 are
		// treated the same way, as the endpoint's momentary trouble.
		return model.CodeUnavailable
	default:
		// 400, 404, 422 and every other client error.
		return model.CodeBadRequest
	}
}

// midStream classifies an {"error": …} object received inside a 200 stream.
func (c classifier) midStream(e *goopenai.APIError) *model.Error {
	code := codeString(e.Code)
	msg := "error in stream"
	if e.Type != "" {
		msg += " (" + e.Type + ")"
	}
	if m := strings.TrimSpace(e.Message); m != "" {
		msg += ": " + truncate(m, 500)
	}
	// vLLM and similar servers put the HTTP status they meant in "code".
	if n, ok := e.Code.(int); ok && n >= 400 && n < 600 {
		return newError(c.statusCode(n, "", e.Message), 0, msg, e)
	}
	typ := strings.ToLower(e.Type)
	switch {
	case code == "context_length_exceeded" || c.overflows(e.Message):
		return newError(model.CodeContextOverflow, 0, msg, e)
	case strings.Contains(typ, "rate_limit") || code == "rate_limit_exceeded":
		return newError(model.CodeRateLimited, 0, msg, e)
	case strings.Contains(typ, "invalid_request"):
		return newError(model.CodeBadRequest, 0, msg, e)
	default:
		// server_error per docs/agent-core.md §9; unknown types too, since the request
		// was accepted and generation then failed.
		return newError(model.CodeUnavailable, 0, msg, e)
	}
}

func (c classifier) overflows(message string) bool {
	m := strings.ToLower(message)
	for _, p := range c.overflowPatterns {
		if strings.Contains(m, p) {
			return true
		}
	}
	return false
}

// codeString renders APIError.Code, which is a string, a number or absent.
func codeString(code any) string {
	switch v := code.(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}

func success(status int) bool { return status >= 200 && status < 400 }

// truncate shortens s to at most n bytes without splitting a rune.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// retryAfter reads the delay a response asked for: retry-after-ms
// (milliseconds, OpenAI's precise variant) or Retry-After (seconds or an
// HTTP date).
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return scale(ms, time.Millisecond), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return scale(s, time.Second), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// scale converts v units to a Duration, saturating instead of overflowing
// (a huge Retry-After must still compare as huge).
func scale(v float64, unit time.Duration) time.Duration {
	if d := v * float64(unit); d < float64(math.MaxInt64) {
		return time.Duration(d)
	}
	return time.Duration(math.MaxInt64)
}
