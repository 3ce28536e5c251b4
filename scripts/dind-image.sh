#!/usr/bin/env bash
# Builds the Docker-in-Docker image of deploy/k8s/overlays/dind without a
# registry: a Debian bookworm root made with debootstrap (docker.io with its
# containerd, runc, tini and iptables; ca-certificates for pulls;
# fuse-overlayfs as a storage driver fallback) and the entrypoint
# deploy/images/dind/plumb-dind, imported with `docker import`.
#
# The root file system is cached as a tarball in
# $HOME/.cache/plumb/dind-<rootfs hash>/ (hash: the suite, the packages and
# rootfs_version below), built under a lock in a temporary directory renamed
# into place, so it is built once per machine; `docker import` makes it the
# base image, and a second layer adds the entrypoint. The image is tagged
# plumb-dind:<hash> (hash: this file and the entrypoint, the whole recipe);
# that reference is the only line on stdout (progress goes to stderr). Push
# it to your registry for a real cluster.
#
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
cd "$(dirname "$0")/.."

repo=plumb-dind
suite=bookworm
packages=docker.io,ca-certificates,fuse-overlayfs,iproute2,procps
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
entry=deploy/images/dind/plumb-dind

# rootfs_version changes whenever the root file system's recipe below does.
rootfs_version=1
hash=$(cat "$(readlink -f "${BASH_SOURCE[0]}")" "$entry" | sha256sum | cut -c1-12)
ref=$repo:$hash
rootfs=$(echo "$suite $packages $rootfs_version" | sha256sum | cut -c1-12)
base=$repo-base:$rootfs
cache=$HOME/.cache/plumb/dind-$rootfs
tarball=$cache/rootfs.tar

say() { echo "dind-image: $*" >&2; }

if docker image inspect "$ref" >/dev/null 2>&1; then
	echo "$ref"
	exit 0
fi
[ "$(id -u)" = 0 ] || { say "debootstrap and chroot need root"; exit 1; }

mkdir -p "$HOME/.cache/plumb"
exec 9>"$HOME/.cache/plumb/dind.lock"
flock 9
if [ ! -f "$tarball" ]; then
	if ! command -v debootstrap >/dev/null && [ ! -x /usr/sbin/debootstrap ]; then
		say "installing debootstrap with apt-get"
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
	fi
	PATH=$PATH:/usr/sbin:/sbin
	work=$(mktemp -d "$HOME/.cache/plumb/dind-$rootfs.tmp.XXXXXX")
	root=$work/rootfs
	cleanup() {
		# debootstrap may leave /proc or /sys mounted in the root after a failure.
		for m in proc sys dev/pts dev; do umount -l "$root/$m" 2>/dev/null || true; done
		rm -rf "$work"
	}
	trap cleanup EXIT
	start=$SECONDS
	say "building the root file system of $base: Debian $suite with $packages from $mirror (a few minutes, once)"
	debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" 2>&1 |
		while IFS= read -r line; do
			case $line in
			I:\ Retrieving* | I:\ Validating* | I:\ Unpacking* | I:\ Configuring* | I:\ Extracting*) ;;
			*) say "$line" ;;
			esac
		done
	test "${PIPESTATUS[0]}" = 0
	chroot "$root" /usr/bin/apt-get clean
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/doc/* \
		"$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/log/*.log "$root"/var/log/apt/*
	mkdir -p "$work/out"
	tar --numeric-owner -C "$root" -cf "$work/out/rootfs.tar" .
	rm -rf "$cache"
	mv "$work/out" "$cache"
	say "built the root file system in $((SECONDS - start))s: $tarball"
fi
if ! docker image inspect "$base" >/dev/null 2>&1; then
	docker import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--message "plumb dind base (Debian $suite: $packages)" \
		- "$base" <"$tarball" >/dev/null
fi
out=$(docker build -q -t "$ref" -f - "$(dirname "$entry")" 2>&1 <<DOCKERFILE
FROM $base
COPY plumb-dind /usr/local/bin/plumb-dind
VOLUME /var/lib/docker
LABEL plumb.recipe=$hash
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/plumb-dind"]
DOCKERFILE
) || { echo "$out" >&2; exit 1; }
docker rmi "$base" >/dev/null 2>&1 || true # untagged; its layer stays under $ref
# Older recipes' images and caches are dead weight (one in use stays).
docker image ls --format '{{.Repository}}:{{.Tag}}' "$repo" | grep -vx "$ref" | xargs -r docker rmi >/dev/null 2>&1 || true
for d in "$HOME"/.cache/plumb/dind-*; do
	[ "$d" = "$cache" ] || [ ! -d "$d" ] || case $d in *.tmp.*) ;; *) rm -rf "$d" ;; esac
done
echo "$ref"
