// Package agentconv converts the agent core's types (pkg/agent, pkg/model,
// threads, events, decisions) to and from the plumb.v1 protobuf messages of
// AgentService: the agent half of pbconv, which only agentd links.
package agentconv
