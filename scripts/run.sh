#!/usr/bin/env bash
# Starts sandboxd and agentd with their built-in defaults, logs to this
# terminal; Ctrl-C (or SIGTERM) stops both. Used by `make run`.
set -euo pipefail
cd "$(dirname "$0")/.."

pids=()
stop() {
	trap - INT TERM EXIT
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait
}
trap stop INT TERM EXIT

bin/sandboxd --log-format console "$@" &
pids+=($!)
bin/agentd --log-format console &
pids+=($!)

echo "plumb: sandboxd on 127.0.0.1:7071, agentd on 127.0.0.1:7070 (Ctrl-C stops both)" >&2
# Stop both as soon as either exits.
wait -n
