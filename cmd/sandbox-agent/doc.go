// Command sandbox-agent is the small static program sandboxd copies into
// every sandbox container (built with CGO_ENABLED=0). It has two jobs:
//
//	sandbox-agent init [serve FLAGS…]
//	    The container's PID 1. It reaps zombies, so the orphaned
//	    background children of executes do not pile up, and exits on
//	    SIGTERM or SIGINT. Given a serve command line, it first starts that
//	    agent on the container's own stdio: the sandbox's first channel,
//	    which sandboxd attached to before starting the container.
//	sandbox-agent serve [--root /] [--workspace /workspace] [--writable DIRS] [--log-level info]
//	    The agent proper: it reads agentproto request frames on stdin and
//	    writes response frames on stdout (see package agent). Logs go to
//	    stderr. sandboxd gets it from init for a new sandbox, and starts it
//	    with one exec for every later channel.
//	sandbox-agent --version
//	    Prints the build version.
//
// File operations and commands run inside the container, never on the
// host.
package main
