#!/usr/bin/env bash
# Makes sure what the tests need beyond Go is installed from Debian:
# busybox-static, from which the sandbox test image is built; postgresql,
# whose binaries the PostgreSQL thread-store tests run throwaway servers
# with; and what the Python client example needs (grpcio and protobuf for
# python3, protoc with the well-known types, and the gRPC Python plugin);
# kubernetes-client, whose `kubectl kustomize` renders deploy/k8s;
# curl, which the HTTP API's end-to-end test drives as a user would; and
# chromium, the headless browser the web console's test (test/browser)
# drives.
# runsc (gVisor) is registered with the Docker engine as the runtime "runsc"
# so the sandbox suites also run under it: a current gVisor built from the
# Go module proxy once and cached (see runsc_binary below), Debian's runsc
# (2022, ptrace platform) only when that build is impossible.
# As root it installs them with apt-get; otherwise it names them and stops.
set -euo pipefail

# RUNSC_VERSION is the gVisor the runsc legs run under (a Go pseudo-version
# of gvisor.dev/gvisor). Its binary is cached by version under RUNSC_CACHE,
# so a new version is built once and an old one is never reused for it.
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237
RUNSC_CACHE=${RUNSC_CACHE:-$HOME/.cache/plumb}
# The current gVisor runs boxes on the systrap platform (no /dev/kvm
# needed; ptrace is its slow legacy). Debian's 2022 runsc has no systrap.
RUNSC_ARGS='["--platform=systrap", "--network=none"]'
RUNSC_DEBIAN_ARGS='["--platform=ptrace", "--network=none"]'

# runsc_binary prints the path of the runsc to register and the runtimeArgs
# that go with it (two lines). It builds the current gVisor into
# $RUNSC_CACHE/runsc-$RUNSC_VERSION/runsc unless that binary is already
# there (a cold build takes 10-20 minutes on 2 cores; concurrent callers wait
# for one build under a lock). Only when the build fails does it fall back to
# Debian's runsc, loudly.
runsc_binary() {
	local dir=$RUNSC_CACHE/runsc-$RUNSC_VERSION tmp
	if [ ! -x "$dir/runsc" ]; then
		mkdir -p "$RUNSC_CACHE"
		exec 9>"$RUNSC_CACHE/runsc.lock"
		flock 9
		if [ ! -x "$dir/runsc" ]; then
			echo "building gVisor runsc $RUNSC_VERSION into $dir (once per version; 10-20 minutes on 2 cores)" >&2
			tmp=$(mktemp -d "$RUNSC_CACHE/runsc-build.XXXXXX")
			if (cd "$tmp" && CGO_ENABLED=0 GOBIN="$tmp/bin" GOFLAGS=-buildvcs=false \
				go install -trimpath "gvisor.dev/gvisor/runsc@$RUNSC_VERSION") >&2 &&
				"$tmp/bin/runsc" --version >/dev/null 2>&1; then
				rm -rf "$dir"
				mv "$tmp/bin" "$dir"
			fi
			rm -rf "$tmp"
		fi
		flock -u 9
		exec 9>&-
	fi
	if [ -x "$dir/runsc" ]; then
		printf '%s\n%s\n' "$dir/runsc" "$RUNSC_ARGS"
		return 0
	fi
	echo "!! could not build gVisor runsc $RUNSC_VERSION: FALLING BACK to Debian's runsc (release 20221219, --platform=ptrace), which is slow and has the crashes docs/security.md lists" >&2
	if [ ! -x /usr/bin/runsc ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null || true
	fi
	[ -x /usr/bin/runsc ] || { echo "no runsc at all: neither the build nor Debian's package (apt-get install runsc)" >&2; return 1; }
	printf '%s\n%s\n' /usr/bin/runsc "$RUNSC_DEBIAN_ARGS"
}

# register_runsc makes the engine's runtime "runsc" the binary runsc_binary
# gives, with its runtimeArgs: it merges that entry into the engine's
# daemon.json (every other key is kept), reloads dockerd with SIGHUP and
# waits until `docker info` lists runsc with that path. It does nothing
# when the engine already has exactly that runtime, so it is idempotent; a
# runsc registered before (Debian's, say) is replaced, never removed.
register_runsc() {
	command -v docker >/dev/null || return 0
	local bin args want f=/etc/docker/daemon.json tmp
	{ read -r bin && read -r args; } < <(runsc_binary) || return 1
	want=$(python3 -c 'import json, sys; print(json.dumps({"path": sys.argv[1], "runtimeArgs": json.loads(sys.argv[2])}))' "$bin" "$args")
	runsc_registered "$want" && return 0
	if [ "$(id -u)" != 0 ]; then
		echo "register runsc with the engine: add \"runtimes\": {\"runsc\": $want} to $f and reload dockerd (kill -HUP \$(pidof dockerd))" >&2
		return 1
	fi
	mkdir -p /etc/docker
	[ -s "$f" ] || echo '{}' >"$f"
	tmp=$(mktemp "$f.XXXXXX")
	python3 - "$f" "$want" >"$tmp" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d.setdefault("runtimes", {})["runsc"] = json.loads(sys.argv[2])
json.dump(d, sys.stdout, indent=2)
PY
	chmod 644 "$tmp"
	mv "$tmp" "$f"
	echo "registered runsc ($bin) in $f; reloading dockerd" >&2
	kill -HUP $(pidof dockerd)
	for _ in $(seq 1 60); do
		runsc_registered "$want" && return 0
		sleep 1
	done
	echo "dockerd did not list runsc as $want 60 s after SIGHUP" >&2
	return 1
}

# runsc_registered says whether the engine's runtime "runsc" is exactly
# $1 (its path and runtimeArgs, as JSON).
runsc_registered() {
	local have
	have=$(docker info --format '{{json .Runtimes}}' 2>/dev/null) || return 1
	python3 -c 'import json, sys; sys.exit(json.loads(sys.argv[1]).get("runsc") != json.loads(sys.argv[2]))' "$have" "$1"
}

# WEED_VERSION is the SeaweedFS `weed` the S3 snapshot store tests run as a
# real S3-compatible server (pkg/snapshot/s3store/weedtest names the same
# version). Its module has a replace directive, so `go install pkg@version`
# refuses it: it is built inside a throwaway module that repeats the
# replace, once per version, and cached as $RUNSC_CACHE/weed-$WEED_VERSION/weed.
WEED_VERSION=v0.0.0-20261109003541-7506e5f91cd6
weed_binary() {
	local dir=$RUNSC_CACHE/weed-$WEED_VERSION tmp
	[ -x "$dir/weed" ] && return 0
	mkdir -p "$RUNSC_CACHE"
	exec 8>"$RUNSC_CACHE/weed.lock"
	flock 8
	[ -x "$dir/weed" ] && return 0
	echo "building SeaweedFS weed $WEED_VERSION into $dir (once per version; several minutes on 2 cores)" >&2
	tmp=$(mktemp -d "$RUNSC_CACHE/weed-build.XXXXXX")
	if (cd "$tmp" &&
		printf 'module plumbweed\n\ngo 1.26\n\nreplace github.com/tyler-smith/go-bip39 => github.com/cosmos/go-bip39 v1.0.0\n' >go.mod &&
		go get "github.com/seaweedfs/seaweedfs/weed@$WEED_VERSION" &&
		go build -trimpath -o "$tmp/weed" github.com/seaweedfs/seaweedfs/weed) >&2 &&
		"$tmp/weed" version >/dev/null 2>&1; then
		mkdir -p "$dir" && mv "$tmp/weed" "$dir/weed"
	else
		echo "!! could not build SeaweedFS weed $WEED_VERSION: the S3 snapshot store tests fail under CI=true" >&2
	fi
	rm -rf "$tmp"
}

# `--builds` only builds (or finds cached) the binaries above, weed and runsc
# side by side, and installs and registers nothing: .ci/run starts it in the
# background first, so the cold builds overlap the tool installs; the
# `make test` that follows waits for them under their locks.
if [ "${1:-}" = --builds ]; then
	weed_binary &
	weed=$!
	runsc_binary >/dev/null || true
	wait "$weed"
	exit 0
fi

pkgs=(busybox-static postgresql kubernetes-client python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc libprotobuf-dev curl chromium)
missing=()
for p in "${pkgs[@]}"; do
	# Any kubectl with kustomize will do, however it was installed.
	[ "$p" = kubernetes-client ] && command -v kubectl >/dev/null && continue
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} = 0 ]; then
	weed_binary
	register_runsc
	exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	echo "make test needs Debian's ${missing[*]}: sudo apt-get install ${missing[*]}" >&2
	exit 1
fi
echo "installing ${missing[*]} (the test sandbox image, the PostgreSQL store tests, the Kubernetes manifest test, the Python client example, the HTTP API test and the console's browser test need them)" >&2
# The tests create their own PostgreSQL clusters: the package need not
# create (and start) a system one.
mkdir -p /etc/postgresql-common/createcluster.d
echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/plumb-tests.conf
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
weed_binary
register_runsc
