// Package subagents implements the subagents middleware (docs/agent-core.md §3.2
// #3, §4.2, §5.3): the task tool, which runs a named subagent in a fresh
// agent context (agent.RunSubagent) and returns its final report. It knows
// no profiles: a Build function supplied by the assembly layer turns a
// subagent name into that subagent's Config (model, stack, tools, limits).
package subagents
