// Package memory implements the memory middleware (docs/agent-core.md §3.2 #7): it
// loads the configured memory files through the thread's backend once per
// Run and per Resume, and appends them as the memory section of the
// system prompt of every model call.
package memory
