// Package profile holds agent and subagent profiles (docs/agent-core.md §5): the
// built-in ones (main, plan, general-purpose, explore, bash), the
// configuration keys of docs/agent-core.md §5.5 as Go structs that agentd fills from YAML,
// merging of configured profiles over the built-ins, validation, and the
// resolution of one agent context's effective settings (model, tool
// allow-list intersected with the permission preset, subagents,
// interrupt_on, limits) including what a subagent inherits from its
// parent.
//
// The package is configuration logic only: it builds no middleware and
// runs nothing.
package profile
