// Package agentd turns agentd's YAML configuration (docs/agent-core.md §5.6) into a
// running agent core: it loads and strictly validates the file, builds
// the model clients, profiles, middleware settings and limits for
// pkg/agent/deep, and assembles each thread's file backend (State,
// filesystem, Store and sandbox routes under one Composite, with sandboxes
// created on first use and replaced, with a notice for the model, when
// they are gone). cmd/agentd only parses flags and calls it.
package agentd
