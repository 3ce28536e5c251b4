#!/usr/bin/env bash
# Makes sure what the tests need beyond Go is installed from Debian:
# busybox-static, from which the sandbox test image is built; postgresql,
# whose binaries the PostgreSQL thread-store tests run throwaway servers
# with; and what the Python client example needs (grpcio and protobuf for
# python3, protoc with the well-known types, and the gRPC Python plugin);
# and kubernetes-client, whose `kubectl kustomize` renders deploy/k8s.
# As root it installs them with apt-get; otherwise it names them and stops.
set -euo pipefail
pkgs=(busybox-static postgresql kubernetes-client python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc libprotobuf-dev)
missing=()
for p in "${pkgs[@]}"; do
	# Any kubectl with kustomize will do, however it was installed.
	[ "$p" = kubernetes-client ] && command -v kubectl >/dev/null && continue
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} = 0 ] && exit 0
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
