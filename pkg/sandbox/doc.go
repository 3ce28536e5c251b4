// Package sandbox manages hardened Docker sandboxes on one worker: it
// creates containers with plumb's security defaults, talks to the sandbox
// agent inside each one over a single multiplexed stream (an exec of the
// agent; with Config.Channel "stdio", first the container's own stdio,
// its PID 1 being the agent), tracks
// lifecycles (TTL, idle reaping, quotas), and re-adopts its containers
// after a restart by their labels.
//
// It depends on a small DockerAPI interface (the Engine API calls it makes),
// never on gRPC: internal/server/sandboxsvc adapts it to SandboxService.
// It must never mount host paths or the Docker socket into a container, and
// never build shell strings from agent input: everything that crosses into
// a container is data in agentproto frames.
//
// Whatever comes back out of a container is hostile: the agent channel
// checks every frame (request ids, event kinds, per-operation budgets, one
// memory budget per worker, a frame-rate limit, write deadlines, its own
// execute deadline, re-checked results), resets on a violation, and fails
// a sandbox whose channel keeps violating (docs/security.md, "Channel").
package sandbox
