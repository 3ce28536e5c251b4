// Package agent is plumb's executor: the run loop of docs/agent-core.md §2 for one
// agent context (the root agent of a thread, or one subagent invocation),
// the middleware contract of docs/agent-core.md §3.1, the tool-call contract of §4.3, the
// domain event stream of docs/agent-core.md §8, and the persistence interface the executor
// writes checkpoints through (docs/agent-core.md §2.3).
//
// The pieces:
//
//   - State holds one agent context's message log (append-only), summary,
//     todos, private middleware state and the pending step.
//   - Middleware wraps the model and tool endpoints and hooks the run
//     (BaseMiddleware gives no-ops to embed). Built-in middleware lives in
//     the middleware subpackages; this package knows none of them.
//   - Tool is a callable with a JSON Schema; the executor resolves, parses
//     and validates calls before they reach the WrapTool chain.
//   - Runner runs and resumes root agents against a Store and streams
//     Events to a Sink; RunSubagent runs a nested context from inside a tool.
//   - MemoryStore is the ephemeral Store; other implementations must pass
//     the storetest conformance suite.
//
// Tracing: a Runner given a TracerProvider (WithTracerProvider; default the
// OpenTelemetry global) makes one agent.run span per run segment, with
// agent.step spans below it and agent.model_call, agent.tool_call and
// agent.subagent spans below those (trace.go). Spans carry ids, names,
// token counts and outcomes, never message or file contents. Only the
// OpenTelemetry API is imported; the SDK and exporters belong to the
// daemons.
//
// The package must not import gRPC, protobuf or any provider SDK: events
// are plain Go values that a transport adapter converts 1:1, and the model
// is reached only through model.ChatModel. It never logs prompts, tool
// arguments or file contents above debug level.
package agent
