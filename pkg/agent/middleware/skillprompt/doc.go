// Package skillprompt is the Agent Skills middleware: it adds to the system
// prompt the names and descriptions of the skills a run may use, and
// where each skill's SKILL.md can be read, never the bodies. The agent
// reads a body on demand with read_file, through the thread's backend
// (the /skills/ route agentd mounts, or the thread's workspace), so no
// tool here reads files past the file engine.
//
// It discovers the skills of the thread's workspace through the backend
// too; it must not read host files or stores (agentd resolves the config
// and tenant skills, docs/skills.md).
package skillprompt
