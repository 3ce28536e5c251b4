#!/usr/bin/env bash
# Makes sure what the tests need beyond Go is installed: Debian's
# busybox-static, from which the sandbox test image is built, and
# postgresql, whose binaries the PostgreSQL thread-store tests run their
# own throwaway servers with. As root it installs them with apt-get;
# otherwise it names the packages and stops.
set -euo pipefail
missing=()
for pkg in busybox-static postgresql; do
	dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} = 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	echo "make test needs Debian's ${missing[*]}: sudo apt-get install ${missing[*]}" >&2
	exit 1
fi
echo "installing ${missing[*]} (the sandbox test image is built from busybox-static; the thread-store tests run PostgreSQL servers of their own)" >&2
# The tests create their own clusters: the package need not create (and
# start) a system one.
mkdir -p /etc/postgresql-common/createcluster.d
echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/plumb-tests.conf
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
