#!/usr/bin/env bash
# Makes sure what the tests need beyond Go is installed from Debian:
# busybox-static, from which the sandbox test image is built; postgresql,
# whose binaries the PostgreSQL thread-store tests run throwaway servers
# with; and what the Python client example needs (grpcio and protobuf for
# python3, protoc with the well-known types, and the gRPC Python plugin);
# and kubernetes-client, whose `kubectl kustomize` renders deploy/k8s.
# runsc (gVisor) is registered with the Docker engine as the runtime "runsc"
# so the sandbox suites also run under it (see register_runsc below).
# As root it installs them with apt-get; otherwise it names them and stops.
set -euo pipefail

# register_runsc merges a "runsc" entry into the engine's daemon.json
# (every other key is kept), reloads dockerd with SIGHUP and waits until
# `docker info` lists the runtime. It does nothing when the engine already
# has runsc, so it is idempotent.
register_runsc() {
	command -v docker >/dev/null || return 0
	docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"' && return 0
	[ -x /usr/bin/runsc ] || return 0
	if [ "$(id -u)" != 0 ]; then
		echo "register runsc with the engine: add \"runtimes\": {\"runsc\": {\"path\": \"/usr/bin/runsc\", \"runtimeArgs\": [\"--platform=ptrace\", \"--network=none\"]}} to /etc/docker/daemon.json and reload dockerd" >&2
		return 1
	fi
	local f=/etc/docker/daemon.json tmp
	mkdir -p /etc/docker
	[ -s "$f" ] || echo '{}' >"$f"
	tmp=$(mktemp "$f.XXXXXX")
	if command -v jq >/dev/null; then
		jq '.runtimes = ((.runtimes // {}) + {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace", "--network=none"]}})' "$f" >"$tmp"
	else
		python3 - "$f" >"$tmp" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d.setdefault("runtimes", {})["runsc"] = {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace", "--network=none"]}
json.dump(d, sys.stdout, indent=2)
PY
	fi
	chmod 644 "$tmp"
	mv "$tmp" "$f"
	echo "registered runsc in $f; reloading dockerd" >&2
	kill -HUP $(pidof dockerd)
	for _ in $(seq 1 60); do
		docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"' && return 0
		sleep 1
	done
	echo "dockerd did not list runsc 60 s after SIGHUP" >&2
	return 1
}

pkgs=(busybox-static runsc postgresql kubernetes-client python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc libprotobuf-dev)
missing=()
for p in "${pkgs[@]}"; do
	# Any kubectl with kustomize will do, however it was installed.
	[ "$p" = kubernetes-client ] && command -v kubectl >/dev/null && continue
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} = 0 ]; then
	register_runsc
	exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	echo "make test needs Debian's ${missing[*]}: sudo apt-get install ${missing[*]}" >&2
	exit 1
fi
echo "installing ${missing[*]} (the test sandbox image, the PostgreSQL store tests, the Kubernetes manifest test and the Python client example need them)" >&2
# The tests create their own PostgreSQL clusters: the package need not
# create (and start) a system one.
mkdir -p /etc/postgresql-common/createcluster.d
echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/plumb-tests.conf
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
register_runsc
