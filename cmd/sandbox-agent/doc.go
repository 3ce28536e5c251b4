// Command sandbox-agent is the small static program sandboxd copies into
// every sandbox container (built with CGO_ENABLED=0). It has two jobs:
//
//	sandbox-agent init
//	    The container's PID 1. It only reaps zombies, so the orphaned
//	    background children of executes do not pile up, and exits on
//	    SIGTERM or SIGINT. It keeps a few spare OS threads, so a fork bomb
//	    that takes every pid cannot make it die for want of one.
//	sandbox-agent serve [--root /] [--workspace /workspace] [--writable DIRS] [--log-level info]
//	    The agent proper, started by sandboxd with one exec: it reads
//	    agentproto request frames on stdin and writes response frames on
//	    stdout (see package agent). Logs go to stderr.
//	sandbox-agent serve --pid1 [serve's flags]
//	    The agent as the container's PID 1 (sandbox.Config.Channel
//	    "stdio"): it serves the container's own stdio, which the worker
//	    attached before the start, and reaps every child through one
//	    boxagent.Reaper, handing the commands it started their statuses.
//	    When stdin ends it stops serving (killing its commands) and goes
//	    on reaping until SIGTERM or SIGINT.
//	sandbox-agent count DIR[:MAX]...
//	    Prints how many files, directories and links each DIR holds, one
//	    line each, stopping past MAX; the worker's disk watchdog runs it
//	    over read-only mounts of workspaces in a helper container.
//	sandbox-agent --version
//	    Prints the build version.
//
// File operations and commands run inside the container, never on the
// host.
//
// It is the one plumb binary that does not log with zap: its logs are
// JSON lines on stderr in log/slog's shape, written by package agentlog
// (--log-level debug, info, warn or error). Every box runs a copy, and
// zap links net/http, which costs each box memory for nothing the agent
// uses, and log/slog links encoding/json and reflection-heavy handlers
// that grow the binary; test/layering fails if the agent links net/http,
// zap or log/slog again.
package main
