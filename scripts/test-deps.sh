#!/usr/bin/env bash
# Makes sure what the tests need beyond Go is installed: Debian's
# busybox-static, from which the sandbox test image is built. As root it
# installs it with apt-get; otherwise it names the package and stops.
set -euo pipefail
dpkg -s busybox-static >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	echo "make test needs Debian's busybox-static: sudo apt-get install busybox-static" >&2
	exit 1
fi
echo "installing busybox-static (the sandbox test image is built from it)" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null
