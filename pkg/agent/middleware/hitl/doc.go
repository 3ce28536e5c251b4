// Package hitl implements the human-in-the-loop middleware (docs/agent-core.md §3.2
// #8, §6): calls of tools listed in the agent's interrupt_on pause the run
// with an APPROVAL interrupt (a key ending in "*", such as "mcp__github__*",
// gates every tool with that prefix; an exact key wins over patterns); on
// Resume, approve and edit let the call run and reject and respond answer
// it without running it.
//
// Gates are about capabilities, not names: a gate on a tool also gates
// every tool whose capabilities (agent.Capability) include all of the
// gated tool's, with the same rule, so that python or a stdio MCP server's
// tools cannot run code past a gate on execute, nor write files past a
// gate on write_file. The built-in tools that always had keys of their
// own (the file tools and execute) are decided by their own keys only,
// so a config means what it meant before capabilities. A `false` entry
// exempts a tool from patterns and from covering gates.
//
// It is the innermost middleware so that it sees the final tool set and
// runs after the hooks: a call a hook blocked never reaches a human.
// Client-declared tools are never gated here; they interrupt by
// themselves (agent.ClientTool). It must not decide by tool name alone.
package hitl
