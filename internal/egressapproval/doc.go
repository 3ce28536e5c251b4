// Package egressapproval is agentd's half of egress approved by a human
// (docs/security.md, "Egress approved by a human"): while a tool call of a
// thread whose config sets sandbox.template.egress_approval runs in its
// egress box, the replica running it watches the box's egress requests
// on the box's sandboxd worker (SandboxService.WatchEgressRequests) and
// turns each into a pending record in the thread store and an
// egress_request event of that call; Decide (any replica) checks the
// caller's tenant, records the decision and passes it to the worker
// (SandboxService.DecideEgress); stored THREAD and AGENT grants are given
// to boxes created later for the thread or the agent.
//
// It must not decide anything by itself beyond what a stored grant
// already allows, never widen another tenant's box, and never block a
// tool call on a worker that cannot watch: without a watch, the proxy
// refuses at once, as with approval off.
package egressapproval
