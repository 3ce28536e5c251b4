// Package skills parses and validates Agent Skills: folders with a
// SKILL.md (YAML front matter with a name and a description, then the
// instructions) and the scripts and files beside it, as Anthropic's Agent
// Skills and deepagents define them.
//
// It is pure: it reads host directories (LoadDir, for the skills agentd's
// config names) and byte maps (Parse, for uploads and a thread's
// workspace), and packs a skill's files into one archive for the stores.
// It must not reach a backend, a store or the network: agentd serves the
// skills to the agent through the file engine (docs/skills.md), and the
// agent middleware lists them in the system prompt.
package skills
