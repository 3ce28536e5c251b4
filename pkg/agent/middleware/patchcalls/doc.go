// Package patchcalls implements the patch_tool_calls middleware (agent.md
// §3.2 #5): before each Run or Resume it answers every assistant tool call
// that has no tool message with a synthetic error result, so that the
// model never sees a call without its result.
//
// The message log is append-only, so patches are appended at its end; the
// executor's effective view (agent.State.Effective) places each of them
// right after its assistant message, in call order. Calls of the pending
// step being resumed are left alone: Resume answers them.
package patchcalls
