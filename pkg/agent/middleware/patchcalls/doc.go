// Package patchcalls implements the patch_tool_calls middleware (docs/agent-core.md
// §3.2 #5): before each Run or Resume it answers every assistant tool call
// that has no tool message with a synthetic error result
// (agent.DanglingCallResult) and persists it, so that the thread's log and
// transcripts show how the call ended. The executor pairs calls and results
// at the model boundary whether or not this middleware runs.
//
// The message log is append-only, so patches are appended at its end; the
// executor's effective view (agent.State.Effective) places each of them
// right after its assistant message, in call order. Calls of the pending
// step being resumed are left alone: Resume answers them.
package patchcalls
