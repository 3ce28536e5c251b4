// Package middleware is the home of agentd's built-in middleware, one
// subpackage each (docs/agent-core.md §3.2): todos, filesystem, subagents,
// summarization, patchcalls (patch_tool_calls), hooks, memory and hitl.
// Each implements agent.Middleware, is built per agent context, and
// injects its own tools. This package itself holds nothing but this
// overview.
package middleware
