// Package model holds plumb's provider-neutral view of a chat model: the
// message, tool and usage types the executor persists and emits, the small
// ChatModel interface the executor calls, and the classified Error every
// implementation returns.
//
// The package is deliberately free of any provider SDK. Implementations (such
// as package openai below it) translate to and from a wire format, assemble
// streamed output, and retry transient failures; callers only ever see the
// types defined here. This package must not import go-openai, gRPC or
// anything from the executor.
package model
