// Package todos implements the todos middleware (docs/agent-core.md §3.2 #1, §4.1):
// the write_todos tool, its one-call-per-turn rule, the todos_updated
// event and the periodic todos reminder.
package todos
