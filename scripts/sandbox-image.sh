#!/usr/bin/env bash
# Builds plumb's Python sandbox image without a registry: a Debian bookworm
# root made with debootstrap (python3, git, ripgrep, ca-certificates, procps,
# file), an unprivileged user 1000 that owns /workspace (as in
# deploy/images/sandbox/Dockerfile), imported with `docker import`.
#
# The image is tagged by a hash of this file, the recipe: it is built only
# when no image with that tag exists, so a rebuild happens when the recipe
# changes. Progress goes to stderr; the image reference is the only line on
# stdout. Used by `make sandbox-image`, `make run` and the end-to-end test
# that runs Python in it.
#
# With --if-present it only prints the reference of an existing image, or
# exits 3 when there is none.
#
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

repo=plumb-sandbox-python
suite=bookworm
packages=python3,git,ripgrep,ca-certificates,procps,file
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

self=$(readlink -f "${BASH_SOURCE[0]}")
hash=$(sha256sum "$self" | cut -c1-12)
ref=$repo:$hash

say() { echo "sandbox-image: $*" >&2; }

if docker image inspect "$ref" >/dev/null 2>&1; then
	echo "$ref"
	exit 0
fi
if [ "${1:-}" = --if-present ]; then
	say "$ref is not built (make sandbox-image builds it)"
	exit 3
fi

# One build at a time on this machine (make run and a test may race).
exec 9>"${TMPDIR:-/tmp}/plumb-sandbox-image.lock"
flock 9
if docker image inspect "$ref" >/dev/null 2>&1; then
	echo "$ref"
	exit 0
fi

sudo=""
if [ "$(id -u)" != 0 ]; then
	command -v sudo >/dev/null || { say "debootstrap and chroot need root (or sudo)"; exit 1; }
	sudo=sudo
fi
if ! command -v debootstrap >/dev/null && [ ! -x /usr/sbin/debootstrap ]; then
	say "installing debootstrap with apt-get"
	$sudo apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq debootstrap >/dev/null
fi
PATH=$PATH:/usr/sbin:/sbin

work=$(mktemp -d "${TMPDIR:-/tmp}/plumb-sandbox-image.XXXXXX")
root=$work/rootfs
cleanup() {
	# debootstrap may leave /proc or /sys mounted in the root after a failure.
	for m in proc sys dev/pts dev; do
		$sudo umount -l "$root/$m" 2>/dev/null || true
	done
	$sudo rm -rf "$work"
}
trap cleanup EXIT

start=$(date +%s)
say "building $ref: Debian $suite with $packages from $mirror (about 1-2 minutes, once)"
$sudo debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" 2>&1 |
	while IFS= read -r line; do
		case $line in
		I:\ Retrieving* | I:\ Validating*) ;; # one line per package: too chatty
		*) say "$line" ;;
		esac
	done
test "${PIPESTATUS[0]}" = 0

say "adding the sandbox user (1000:1000) and /workspace; trimming apt lists and docs"
$sudo chroot "$root" /usr/bin/apt-get clean
$sudo rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/doc/* \
	"$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/log/*.log "$root"/var/log/apt/*
echo 'sandbox:x:1000:1000:sandbox:/workspace:/bin/bash' | $sudo tee -a "$root/etc/passwd" >/dev/null
echo 'sandbox:x:1000:' | $sudo tee -a "$root/etc/group" >/dev/null
echo 'sandbox:!:19000:0:99999:7:::' | $sudo tee -a "$root/etc/shadow" >/dev/null
$sudo mkdir -p "$root/workspace"
$sudo chown 1000:1000 "$root/workspace"

say "importing into Docker"
$sudo tar --numeric-owner -C "$root" -c . |
	docker import \
		--change 'USER 1000:1000' \
		--change 'WORKDIR /workspace' \
		--change 'ENV LANG=C.UTF-8' \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'CMD ["/bin/bash"]' \
		--change "LABEL plumb.recipe=$hash" \
		--message "plumb Python sandbox (Debian $suite, recipe $hash)" \
		- "$ref" >/dev/null
# Images of earlier recipes are dead weight (~400 MB each); one still in
# use by a container stays.
docker image ls --format '{{.Repository}}:{{.Tag}}' "$repo" | grep -vx "$ref" | xargs -r docker rmi >/dev/null 2>&1 || true
size=$(docker image inspect --format '{{.Size}}' "$ref")
say "built $ref in $(($(date +%s) - start))s, $((size / 1000000)) MB"
echo "$ref"
