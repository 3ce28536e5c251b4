// Package hooks implements the tool hooks of docs/agent-core.md §3.5: configured
// pre hooks that block calls (optionally matching an argument by JSON
// pointer and RE2 regex) and post hooks that redact results, plus hooks
// registered from Go. It sits in the user slot of the stack, outside
// hitl, so a blocked call never reaches a human, and an edited call is
// checked again on Resume.
package hooks
