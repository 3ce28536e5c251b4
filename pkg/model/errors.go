package model

import (
	"errors"
	"time"
)

// ErrorCode classifies a failed model call. The values are the error codes
// of docs/agent-core.md §10.2 and appear verbatim in `error` events.
type ErrorCode string

// Error codes of a failed model call (docs/agent-core.md §9 retry table).
const (
	// CodeRateLimited: HTTP 429 after retries were exhausted or abandoned.
	// Retryable.
	CodeRateLimited ErrorCode = "MODEL_RATE_LIMITED"
	// CodeUnavailable: server errors (5xx, mid-stream server_error) and
	// transport failures (connection errors, first-byte timeout, truncated
	// stream). Retryable.
	CodeUnavailable ErrorCode = "MODEL_UNAVAILABLE"
	// CodeContextOverflow: the prompt does not fit the model's context
	// window. Not retried as is; the caller should compact and try again.
	CodeContextOverflow ErrorCode = "CONTEXT_OVERFLOW"
	// CodeAuth: HTTP 401 or 403. Not retryable.
	CodeAuth ErrorCode = "MODEL_AUTH"
	// CodeBadRequest: the provider rejected the request (other 4xx), or it
	// could not be built. Not retryable.
	CodeBadRequest ErrorCode = "MODEL_BAD_REQUEST"
	// CodeContentFiltered: the provider stopped with finish_reason
	// content_filter. Not retryable.
	CodeContentFiltered ErrorCode = "MODEL_CONTENT_FILTERED"
	// CodeNotConfigured: the model has neither an endpoint nor a key, so
	// no request was sent. Not retryable: only an operator can fix it.
	CodeNotConfigured ErrorCode = "MODEL_NOT_CONFIGURED"
)

// Error is a classified model failure. Every error a ChatModel returns,
// except cancellation of the caller's context, is an *Error.
type Error struct {
	// Code is the class of the failure.
	Code ErrorCode
	// Message is a self-contained, human-readable description (it already
	// includes what matters of Err); it never contains prompt contents.
	Message string
	// Retryable says whether running the same request again later may
	// succeed. It is true for CodeRateLimited and CodeUnavailable.
	Retryable bool
	// StatusCode is the HTTP error status of the last attempt; 0 when the
	// failure was not an HTTP error status (transport failures, errors and
	// filters inside a 200 stream).
	StatusCode int
	// RetryAfter is the delay the provider asked for on the last attempt, 0
	// if it sent none.
	RetryAfter time.Duration
	// Err is the underlying error, if any.
	Err error
}

// Error implements error as "CODE: Message", or "CODE: Err" when Message
// is empty.
func (e *Error) Error() string {
	switch {
	case e.Message != "":
		return string(e.Code) + ": " + e.Message
	case e.Err != nil:
		return string(e.Code) + ": " + e.Err.Error()
	}
	return string(e.Code)
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the code of the *Error in err's chain, or "" if there is
// none.
func CodeOf(err error) ErrorCode {
	var me *Error
	if errors.As(err, &me) {
		return me.Code
	}
	return ""
}

// IsContextOverflow reports whether err says the prompt exceeded the
// model's context window.
func IsContextOverflow(err error) bool {
	return CodeOf(err) == CodeContextOverflow
}
