// Package prompt composes agent system prompts from ordered sections
// (docs/agent-core.md §5.4): identity, tool_usage, task_management, delegation,
// agent, environment and memory. Each section can be replaced by text or
// disabled in configuration. Compose is a pure function of its input, so
// the prompt is byte-stable within a run as long as the input is (the date
// is the run's start date, not the time of the call).
//
// The package must not read files or call models; the memory section's
// content comes from the memory middleware.
package prompt
