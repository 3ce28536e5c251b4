package modeltest

import (
	"encoding/json"
	"net/http"
	"time"
	"unicode/utf8"
)

// Turn is one scripted answer. Exactly one of these shapes applies, checked
// in this order: Handler, Dynamic, an HTTP error (Status >= 400), a stream.
type Turn struct {
	// Handler, if set, answers the request by itself (the body is readable
	// again). Nothing else of the Turn applies.
	Handler http.HandlerFunc
	// Dynamic, if set, computes the Turn to play from the request.
	Dynamic func(Request) Turn

	// Status >= 400 makes the Turn an error response with Header and Body
	// (DefaultErrorBody(Status) when Body is empty).
	Status int
	// Header is added to the response, error or stream.
	Header http.Header
	// Body is the raw body of an error response.
	Body string

	// Reasoning is streamed first, one reasoning_content delta per element.
	Reasoning []string
	// Text is streamed next, one content delta per element.
	Text []string
	// Calls are streamed last, each as fragments (several = parallel calls).
	Calls []Call
	// NoIndex omits "index" from every tool-call fragment.
	NoIndex bool
	// Chunks, when set, replace the chunks generated from Reasoning, Text
	// and Calls.
	Chunks []Chunk

	// FinishReason is sent in its own chunk after the content; empty means
	// "tool_calls" when there are calls and "stop" otherwise.
	FinishReason string
	// NoFinishReason sends no finish_reason chunk.
	NoFinishReason bool
	// Usage is sent in a final choices-less chunk; nil sends none.
	Usage *Usage
	// NoDone omits the "data: [DONE]" terminator (the stream still ends
	// cleanly).
	NoDone bool
	// StreamError, if set, is sent as `data: {"error": …}` after the chunks,
	// instead of the finish reason, usage and [DONE].
	StreamError *ErrorObject

	// Drop closes the connection abruptly after DropAfter chunks (0 = before
	// the first), without finish_reason or [DONE].
	Drop bool
	// DropAfter is the number of chunks sent before a Drop.
	DropAfter int

	// FirstByteDelay is waited before anything is written, status included.
	FirstByteDelay time.Duration
	// ChunkDelay is waited between chunks.
	ChunkDelay time.Duration
}

// Call is one tool call of a Turn. It is streamed as a first fragment with
// the id and name, then Args in Fragments pieces (default 2).
type Call struct {
	// ID, Name and Args are the call as the model would send it; empty
	// values are sent empty (an empty ID tests id synthesis).
	ID, Name, Args string
	// Fragments is how many pieces Args is split into (default 2).
	Fragments int
}

// Chunk is one streamed chat.completion.chunk with a choice 0 delta.
type Chunk struct {
	// Text and Reasoning are the content and reasoning_content deltas.
	Text, Reasoning string
	// ToolCalls are the tool-call fragments of the delta.
	ToolCalls []Fragment
	// FinishReason, if set, is the choice's finish_reason.
	FinishReason string
	// Usage, if set, makes this a usage chunk.
	Usage *Usage
	// Raw, if set, is sent verbatim as the data payload instead.
	Raw string
}

// Fragment is one tool_calls element of a delta.
type Fragment struct {
	// Index is the fragment's "index", omitted when NoIndex is set.
	Index   int
	NoIndex bool
	// ID, Name and Args are sent when non-empty.
	ID, Name, Args string
}

// Usage is the usage a Turn reports.
type Usage struct {
	// Prompt, Completion, Cached and Reasoning are the reported token
	// counts; the total is Prompt + Completion.
	Prompt, Completion, Cached, Reasoning int
	// FromContent replaces Prompt and Completion with characters/4 of the
	// request's messages and of the turn's output, so usage grows with the
	// conversation as it would with a real model.
	FromContent bool
}

// ErrorObject is the OpenAI error object.
type ErrorObject struct {
	// Message, Type, Code and Param are the fields of OpenAI's error
	// object; Code may be a string or a number.
	Message string `json:"message"`
	Type    string `json:"type,omitempty"`
	Code    any    `json:"code,omitempty"`
	Param   string `json:"param,omitempty"`
}

// Text is the T"…" turn of docs/agent-core.md §11: s in 3 chunks, finish_reason stop,
// usage included.
func Text(s string) Turn {
	return Turn{Text: Split(s, 3), Usage: &Usage{FromContent: true}}
}

// Calls is the C(…) turn: the calls as indexed fragments (several calls are
// parallel), finish_reason tool_calls, usage included.
func Calls(calls ...Call) Turn {
	return Turn{Calls: calls, Usage: &Usage{FromContent: true}}
}

// HTTPError is the H(status,{hdr}) turn: an error response with an OpenAI
// error body (DefaultErrorBody when body is empty).
func HTTPError(status int, header http.Header, body string) Turn {
	return Turn{Status: status, Header: header, Body: body}
}

// RetryAfter returns a header with Retry-After set to v.
func RetryAfter(v string) http.Header {
	return http.Header{"Retry-After": {v}}
}

// Drop is the DROP(k) turn: t, with the connection closed after k chunks.
func Drop(k int, t Turn) Turn {
	t.Drop, t.DropAfter = true, k
	return t
}

// Dynamic is a turn computed from the request when it arrives.
func Dynamic(f func(Request) Turn) Turn { return Turn{Dynamic: f} }

// ErrorBody renders an OpenAI error response body.
func ErrorBody(typ string, code any, message string) string {
	b, _ := json.Marshal(map[string]ErrorObject{"error": {Message: message, Type: typ, Code: code}})
	return string(b)
}

// DefaultErrorBody is the body of an HTTPError turn without one.
func DefaultErrorBody(status int) string {
	typ := "invalid_request_error"
	switch {
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		typ = "authentication_error"
	case status >= 500:
		typ = "server_error"
	}
	return ErrorBody(typ, nil, http.StatusText(status))
}

// Split cuts s into at most n pieces of nearly equal rune counts, dropping
// empty ones, so that their concatenation is s.
func Split(s string, n int) []string {
	runes := utf8.RuneCountInString(s)
	if n < 1 || runes == 0 {
		if s == "" {
			return nil
		}
		return []string{s}
	}
	var parts []string
	rest := s
	for i := range n {
		size := (i+1)*runes/n - i*runes/n
		cut := 0
		for range size {
			_, w := utf8.DecodeRuneInString(rest[cut:])
			cut += w
		}
		if cut > 0 {
			parts = append(parts, rest[:cut])
		}
		rest = rest[cut:]
	}
	return parts
}
