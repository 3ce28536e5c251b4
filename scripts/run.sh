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

# The default sandbox image is the Debian Python one (scripts/sandbox-image.sh,
# built without a registry the first time: a minute or two, with progress).
# SANDBOX_IMAGE=busybox picks the small offline busybox image instead, and
# any other value names an image present on this engine. A template or a
# request can still name any image present on the engine.
image=""
case "${SANDBOX_IMAGE:-python}" in
python)
	image=$(scripts/sandbox-image.sh) || {
		echo "plumb: could not build the Python sandbox image; falling back to busybox" >&2
		image=""
	}
	;;
busybox) ;;
*) image=$SANDBOX_IMAGE ;;
esac
if [ -z "$image" ]; then
	image=$(go run ./internal/tools/sandboximage) || {
		echo "plumb: could not import the busybox sandbox image (apt-get install busybox-static); sandboxes need an explicit image" >&2
		image=""
	}
fi
echo "plumb: sandbox image ${image:-(none)}" >&2
# A warm pool of 2 boxes for requests that name no template (agentd's
# threads) makes a new thread's sandbox ready in milliseconds; the pool's
# claims, and every sandbox's expiry, are kept in the state dir across
# restarts. PLUMB_POOL_SIZE=0 turns the pool off.
state_dir=${PLUMB_STATE_DIR:-.cache/run/sandboxd}
pool=()
if [ -n "$image" ]; then
	pool=(--pool-size "${PLUMB_POOL_SIZE:-2}")
fi
bin/sandboxd --log-format console ${image:+--default-image "$image"} --state-dir "$state_dir" "${pool[@]}" "$@" &
pids+=($!)
# Threads work in sandboxes by default under make run. Without any model
# configured (OPENAI_BASE_URL, OPENAI_API_KEY), agentd answers with its
# built-in scripted demo model (--demo-model), and says so loudly; a
# configured model always wins.
bin/agentd --log-format console --default-backend sandbox --demo-model &
pids+=($!)

echo "plumb: sandboxd on 127.0.0.1:7071, agentd on 127.0.0.1:7070 (Ctrl-C stops both)" >&2
echo "plumb: web console at http://127.0.0.1:9070/ui/ (no token needed on loopback)" >&2
if [ -z "${OPENAI_BASE_URL:-}${OPENAI_API_KEY:-}" ]; then
	echo "plumb: no model configured (OPENAI_BASE_URL, OPENAI_API_KEY): using the built-in DEMO model" >&2
fi
# Stop both as soon as either exits.
wait -n
