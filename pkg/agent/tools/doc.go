// Package tools is the tool registry of agentd: named tools and tool
// groups registered from Go (and enabled from YAML by agentd), allow-list
// expansion with the @read/@write/@exec/@all groups of docs/agent-core.md §5.1, the
// permission presets, and the test_kit tools used by the conformance
// scenarios (sleep, echo, counter, big, fail, panic).
//
// The package builds agent.Tool values; it must not know the executor's
// internals or any transport.
package tools
