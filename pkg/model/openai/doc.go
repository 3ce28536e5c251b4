// Package openai implements model.ChatModel over any OpenAI-compatible
// chat-completions endpoint with github.com/sashabaranov/go-openai.
//
// It owns everything provider-shaped that the executor must not see:
// translating plumb's messages and tool definitions to the wire format,
// streaming with usage, assembling tool calls from stream fragments
// (docs/agent-core.md §9 "Assembly", including providers that omit or reuse the
// fragment index), classifying failures into model.Error codes, and retrying
// the transient ones with capped, jittered exponential backoff that honours
// Retry-After. Request metadata travels as X-Plumb-* headers through an HTTP
// wrapper that also records response statuses and Retry-After headers,
// which go-openai's errors do not expose.
//
// The package never logs prompt or completion contents, and it emits no
// events: retries are visible to callers only through Delta.Attempt and
// Response.Attempts.
package openai
