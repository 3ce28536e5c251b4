#!/usr/bin/env bash
# Builds, once per version, what the single-node cluster of cluster.sh runs
# that Debian does not ship: kube-apiserver, kubelet, kube-controller-manager,
# kube-scheduler and kube-proxy from the k8s.io/kubernetes module (Go module
# proxy; the module zip leaves out staging/, so the published v0.x staging
# modules replace it), the pause binary (build/pause/linux/pause.c from the
# same module, static) and CoreDNS (github.com/coredns/coredns from the proxy).
# Everything lands in $K8S_CACHE (default $HOME/.cache/plumb/k8s-<version>/);
# a present file is never rebuilt. Prints nothing but progress on stderr.
#
#   scripts/k8s/build.sh
set -euo pipefail
KUBE_VERSION=${KUBE_VERSION:-1.31.4}
COREDNS_VERSION=${COREDNS_VERSION:-1.11.3}
K8S_CACHE=${K8S_CACHE:-$HOME/.cache/plumb/k8s-$KUBE_VERSION}
BIN=$K8S_CACHE/bin
mkdir -p "$BIN"

log() { echo "k8s build: $*" >&2; }

# module_dir MODULE@VERSION: the read-only module directory in the module cache.
module_dir() {
	(cd "$K8S_CACHE" && go mod download -json "$1" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
}

kube() {
	local cmds=() c
	for c in kube-apiserver kubelet kube-controller-manager kube-scheduler kube-proxy; do
		[ -x "$BIN/$c" ] || cmds+=("./cmd/$c")
	done
	[ ${#cmds[@]} -gt 0 ] || return 0
	local mod src t0=$SECONDS
	mod=$(module_dir "k8s.io/kubernetes@v$KUBE_VERSION")
	src=$K8S_CACHE/src
	rm -rf "$src"; cp -r "$mod" "$src"; chmod -R u+w "$src"; rm -f "$src/go.work" "$src/go.work.sum"
	python3 - "$src/go.mod" "$KUBE_VERSION" <<'PY'
import re, sys
p, v = sys.argv[1], "v0." + sys.argv[2].split(".", 1)[1]
s = open(p).read()
s = re.sub(r'\n\t(k8s\.io/[\w\-]+) => \./staging/src/k8s\.io/[\w\-]+', '', s)
s = re.sub(r'(\tk8s\.io/[\w\-]+) v0\.0\.0\n', lambda m: m.group(1) + ' ' + v + '\n', s)
open(p, 'w').write(s)
PY
	log "building ${cmds[*]} v$KUBE_VERSION (once; tens of CPU-minutes)"
	(cd "$src" && go mod tidy -e >/dev/null 2>&1 &&
		CGO_ENABLED=0 go build -trimpath -o "$src/out/" \
			-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2)" \
			"${cmds[@]}")
	mv "$src"/out/* "$BIN/"
	rm -rf "$src"
	log "kubernetes binaries: $((SECONDS - t0))s"
}

pause() {
	[ -x "$BIN/pause" ] && return 0
	local mod
	mod=$(module_dir "k8s.io/kubernetes@v$KUBE_VERSION")
	gcc -Os -static -DVERSION="v$KUBE_VERSION-plumb" -o "$BIN/pause.tmp" "$mod/build/pause/linux/pause.c"
	mv "$BIN/pause.tmp" "$BIN/pause"
}

coredns() {
	[ -x "$BIN/coredns" ] && return 0
	local mod src t0=$SECONDS
	mod=$(module_dir "github.com/coredns/coredns@v$COREDNS_VERSION")
	src=$K8S_CACHE/coredns-src
	rm -rf "$src"; cp -r "$mod" "$src"; chmod -R u+w "$src"
	log "building coredns v$COREDNS_VERSION (once)"
	(cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/coredns" .)
	rm -rf "$src"
	log "coredns: $((SECONDS - t0))s"
}

command -v gcc >/dev/null || { echo "k8s build: gcc is needed for the static pause binary" >&2; exit 1; }
pause
kube
coredns
log "ready in $BIN"
