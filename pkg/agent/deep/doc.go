// Package deep assembles plumb's deep agent: it turns configuration
// (models, profiles, middleware settings, hooks, prompt sections, tool
// registry, backend factory) into the per-context middleware stacks of
// docs/agent-core.md §3.2 and runs them with an agent.Runner. agentd fills a Config
// from YAML and serves a Runtime over gRPC; tests build one directly.
//
// The package wires; it implements no behavior of its own beyond choosing
// which middleware and tools each agent context gets. It must not import
// gRPC or protobuf.
package deep
