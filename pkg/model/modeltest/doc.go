// Package modeltest is a scripted OpenAI-compatible chat-completions server
// for tests. It speaks POST /v1/chat/completions with real SSE streaming
// (and plain JSON when the request does not stream), so code under test
// runs its real client (go-openai) against real wire bytes.
//
// A script is a queue of Turns per route key. The key of a request comes
// from the X-Plumb-Agent-Path and X-Plumb-Parent-Tool-Call-Id headers (see
// Key); requests without them use DefaultKey. A Turn can stream text,
// reasoning and tool-call fragments, fail with an HTTP error or a
// mid-stream error, drop the connection, delay, or compute its answer from
// the request. Every request is recorded for assertions.
//
// The package is for tests only: it must not be imported by production
// code, and it knows nothing of plumb's executor.
package modeltest
