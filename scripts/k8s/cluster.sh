#!/usr/bin/env bash
# A real single-node Kubernetes on this machine, for the end-to-end suite
# (scripts/k8s/e2e.sh): a private containerd with CRI (Debian's containerd,
# its own root, state and socket; Docker's containerd untouched), the Debian
# CNI bridge, etcd and kube-apiserver on loopback, kube-controller-manager,
# kube-scheduler, one kubelet (node name = hostname), kube-proxy (iptables)
# and CoreDNS (a host process serving cluster.local on the bridge's
# gateway address, the kubelet's clusterDNS). Binaries come from
# scripts/k8s/build.sh (cached per version). Everything lives under $K8S_RUN
# and is listed in $K8S_RUN/made so `down` removes exactly what `up` made:
# processes, pods and their mounts, network namespaces, the bridge, iptables
# chains and the FORWARD rule that lets pods reach each other, cgroups, loop
# devices backed by files under $K8S_RUN (dind workers' workspaces) and
# host directories.
#
#   scripts/k8s/cluster.sh up      # prints `export KUBECONFIG=...`
#   scripts/k8s/cluster.sh import IMAGE...   # docker save | ctr import
#   scripts/k8s/cluster.sh down    # idempotent; safe after a failed up
set -euo pipefail
KUBE_VERSION=${KUBE_VERSION:-1.31.4}
K8S_CACHE=${K8S_CACHE:-$HOME/.cache/plumb/k8s-$KUBE_VERSION}
BIN=$K8S_CACHE/bin
RUN=${K8S_RUN:-/tmp/plumb-k8s}
BRIDGE=plumb-k8s0
POD_CIDR=10.227.0.0/24
GATEWAY=10.227.0.1
SERVICE_CIDR=10.228.0.0/24
API_PORT=27443
ETCD_PORT=27379
export KUBECONFIG=$RUN/kubeconfig
NODE=$(hostname)
PAUSE_IMAGE=localhost/plumb-k8s/pause:v$KUBE_VERSION
CTR=(ctr -a "$RUN/containerd/containerd.sock" -n k8s.io)

log() { echo "k8s cluster: $*" >&2; }
# made records what up created, for down.
made() { echo "$*" >>"$RUN/made"; }

# wait_for WHAT TRIES CMD...: polls CMD every second.
wait_for() {
	local what=$1 tries=$2; shift 2
	for _ in $(seq "$tries"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
	log "$what did not come up; last log lines:"; tail -n 30 "$RUN/logs/$what.log" >&2 || true
	return 1
}

# daemon NAME CMD...: starts CMD in the background, logging to logs/NAME.log.
daemon() {
	local name=$1; shift
	"$@" >"$RUN/logs/$name.log" 2>&1 &
	echo $! >"$RUN/pids/$name"
	made "pid $name"
}

configs() {
	mkdir -p "$RUN"/{logs,pids,cni/net.d,cni/ipam,kubelet,pki}
	cat >"$RUN/containerd.toml" <<TOML
version = 2
root = "$RUN/containerd/root"
state = "$RUN/containerd/state"
[grpc]
  address = "$RUN/containerd/containerd.sock"
[ttrpc]
  address = "$RUN/containerd/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "27907"
  enable_selinux = false
  # Without CAP_SYS_RESOURCE runc cannot set a negative OOM score.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$RUN/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
TOML
	cat >"$RUN/cni/net.d/10-plumb-k8s.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "plumb-k8s", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$GATEWAY"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$RUN/cni/ipam"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
	cat >"$RUN/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 27905
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 27906
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$RUN/containerd/containerd.sock
failSwapOn: false
resolvConf: /etc/resolv.conf
clusterDNS: [$GATEWAY]
clusterDomain: cluster.local
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard: {}
registerNode: true
podLogsDir: $RUN/kubelet/pod-logs
YAML
	cat >"$RUN/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $KUBECONFIG}
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:27910
metricsBindAddress: 127.0.0.1:27911
# Leave the host's sysctls alone: no conntrack sizing, no route_localnet.
conntrack: {maxPerCore: 0}
iptables: {localhostNodePorts: false}
YAML
	cat >"$RUN/Corefile" <<COREFILE
.:53 {
    bind $GATEWAY
    errors
    ready 127.0.0.1:27913
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $KUBECONFIG
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
    cache 5
}
COREFILE
	[ -f "$RUN/pki/sa.key" ] || { openssl genrsa -out "$RUN/pki/sa.key" 2048 2>/dev/null; openssl rsa -in "$RUN/pki/sa.key" -pubout -out "$RUN/pki/sa.pub" 2>/dev/null; }
	echo "admin-token,admin,admin,system:masters" >"$RUN/pki/tokens.csv"
	cat >"$KUBECONFIG" <<KC
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://127.0.0.1:$API_PORT", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: admin-token}}]
contexts: [{name: local, context: {cluster: local, user: admin}}]
current-context: local
KC
}

up() {
	local t0=$SECONDS b
	for b in kube-apiserver kubelet kube-controller-manager kube-scheduler kube-proxy coredns pause; do
		[ -x "$BIN/$b" ] || { log "$BIN/$b missing: run scripts/k8s/build.sh"; exit 1; }
	done
	for b in containerd ctr runc etcd kubectl docker iptables ip; do
		command -v "$b" >/dev/null || { log "$b missing (apt-get install containerd etcd-server kubernetes-client iptables iproute2)"; exit 1; }
	done
	[ -x /usr/lib/cni/bridge ] || { log "/usr/lib/cni/bridge missing (apt-get install containernetworking-plugins)"; exit 1; }
	[ ! -e "$RUN/made" ] || { log "$RUN/made exists: a cluster is up (or was not torn down); run down first"; exit 1; }
	mkdir -p "$RUN"; chmod 700 "$RUN"; : >"$RUN/made"
	# Host paths the kubelet and containerd use outside their own
	# directories: removed by down only when up created them.
	local p
	for p in /var/lib/kubelet /var/log/pods /var/log/containers /var/lib/cni /run/containerd/runc/k8s.io; do
		[ -e "$p" ] || made "hostdir $p"
	done
	# Shared with the system containerd (Docker's): removed only if empty.
	for p in /run/containerd/runc /run/containerd/fifo /run/containerd/s /run/containerd; do
		[ -e "$p" ] || made "emptydir $p"
	done
	configs

	# The bridge exists before the first pod, so CoreDNS can bind its
	# gateway address; the CNI bridge plugin adopts it.
	ip link add "$BRIDGE" type bridge && made "bridge $BRIDGE"
	ip addr add "$GATEWAY/24" dev "$BRIDGE"; ip link set "$BRIDGE" up

	docker build -q -t "$PAUSE_IMAGE" -f - "$BIN" >/dev/null <<'DOCKERFILE'
FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
DOCKERFILE
	made "dockerimage $PAUSE_IMAGE"

	daemon containerd containerd --config "$RUN/containerd.toml"
	wait_for containerd 60 "${CTR[@]}" version
	import "$PAUSE_IMAGE"

	daemon etcd etcd --data-dir "$RUN/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))"
	daemon kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address 127.0.0.1 --advertise-address "$GATEWAY" --secure-port "$API_PORT" --cert-dir "$RUN/pki/apiserver" \
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$RUN/pki/sa.pub" \
		--service-account-signing-key-file "$RUN/pki/sa.key" --token-auth-file "$RUN/pki/tokens.csv" \
		--authorization-mode Node,RBAC --service-cluster-ip-range "$SERVICE_CIDR" \
		--kubelet-preferred-address-types Hostname,InternalIP --allow-privileged=true
	wait_for kube-apiserver 300 kubectl get --raw /readyz
	daemon kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$KUBECONFIG" \
		--bind-address 127.0.0.1 --secure-port 27908 --leader-elect=false \
		--service-account-private-key-file "$RUN/pki/sa.key" --root-ca-file "$RUN/pki/apiserver/apiserver.crt" \
		--cluster-cidr "$POD_CIDR" --service-cluster-ip-range "$SERVICE_CIDR" --controllers '*,-nodeipam'
	daemon kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$KUBECONFIG" --bind-address 127.0.0.1 \
		--secure-port 27909 --leader-elect=false
	made "cgroups"
	# Docker sets the FORWARD policy to DROP, and with its br_netfilter
	# bridged frames pass FORWARD too: pod to pod on the bridge (a Service
	# included, after kube-proxy's DNAT) needs accepting.
	made "forward"
	iptables -I FORWARD 1 -i "$BRIDGE" -o "$BRIDGE" -m comment --comment plumb-k8s -j ACCEPT
	daemon kubelet "$BIN/kubelet" --config "$RUN/kubelet.yaml" --kubeconfig "$KUBECONFIG" \
		--root-dir "$RUN/kubelet/root" --cert-dir "$RUN/pki/kubelet"
	wait_for kubelet 300 sh -c "kubectl get node '$NODE' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
	made "iptables"
	daemon kube-proxy "$BIN/kube-proxy" --config "$RUN/kube-proxy.yaml"
	daemon coredns "$BIN/coredns" -conf "$RUN/Corefile"
	wait_for kube-proxy 120 curl -sf http://127.0.0.1:27910/healthz
	wait_for coredns 120 curl -sf http://127.0.0.1:27913/ready
	log "up in $((SECONDS - t0))s (node $NODE)"
	echo "export KUBECONFIG=$KUBECONFIG"
}

# import IMAGE...: copies images from the Docker Engine into the node.
import() {
	local img
	for img in "$@"; do
		docker save "$img" | "${CTR[@]}" images import --all-platforms - >/dev/null
	done
}

stop_pid() {
	local f=$RUN/pids/$1 pid
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$f"
}

# detach_loops: detaches the loop devices backed by a workspace image under
# the run directory. A dind worker's boxes have their workspaces on loop
# devices (the node's, shared by every engine) backed by files on the
# worker's docker-data volume; an engine that dies with its pod leaves them
# attached, and only a sandboxd started on the same volume would detach
# them. Matched by device and inode, so no other loop device is touched.
detach_loops() {
	local f dev majmin ino
	local -A ours=()
	while IFS= read -r f; do
		ours["$(stat -c '%Hd:%Ld %i' "$f")"]=1
	done < <(find "$RUN" -xdev -type f -name '*.img' 2>/dev/null)
	[ ${#ours[@]} -gt 0 ] || return 0
	while read -r dev majmin ino; do
		[ -z "${ours["$majmin $ino"]:-}" ] || losetup -d "$dev" 2>/dev/null
	done < <(losetup -ln -O NAME,BACK-MAJ:MIN,BACK-INO 2>/dev/null)
}

down() {
	[ -e "$RUN/made" ] || { rm -rf "$RUN"; return 0; }
	set +e
	local t0=$SECONDS
	# Pods first, while the kubelet and containerd still run: every pod's
	# containers, mounts, netns and CNI address go with it.
	if [ -S "$RUN/containerd/containerd.sock" ]; then
		# The kubelet stops each pod sandbox through CRI, so CNI releases
		# its address, iptables rules and netns.
		if [ -f "$RUN/pids/kubelet" ] && kubectl get --raw /readyz >/dev/null 2>&1; then
			# No controller may replace a deleted pod meanwhile.
			stop_pid kube-controller-manager
			stop_pid kube-scheduler
			kubectl delete pods --all -A --force --grace-period=0 --wait=false >/dev/null 2>&1
			for _ in $(seq 90); do
				[ -z "$("${CTR[@]}" tasks ls -q 2>/dev/null)" ] && break
				sleep 1
			done
		fi
		stop_pid kubelet
		local c
		# Whatever is left: kill it without CNI (cleaned below).
		for c in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks kill -s KILL "$c" >/dev/null 2>&1; done
		sleep 1
		for c in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks delete -f "$c" >/dev/null 2>&1; done
		for c in $("${CTR[@]}" containers ls -q 2>/dev/null); do "${CTR[@]}" containers delete "$c" >/dev/null 2>&1; done
	fi
	local p
	for p in coredns kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do stop_pid "$p"; done
	# The containerd-shims of pods (their own process group, -namespace k8s.io).
	for p in $(pgrep -f -- "-address $RUN/containerd/containerd.sock" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
	if grep -qx iptables "$RUN/made"; then "$BIN/kube-proxy" --cleanup >/dev/null 2>&1; fi
	if grep -qx forward "$RUN/made"; then
		while iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment plumb-k8s -j ACCEPT 2>/dev/null; do :; done
	fi
	# Network namespaces CNI made for pods (named cni-<uuid>, listed in the
	# IPAM results of this cluster's network).
	local ns
	for ns in $(grep -rhoa 'cni-[0-9a-f-]\{36\}' "$RUN/cni/ipam" /var/lib/cni/results 2>/dev/null | sort -u); do
		umount "/var/run/netns/$ns" 2>/dev/null; rm -f "/var/run/netns/$ns"
	done
	rm -f /var/lib/cni/results/plumb-k8s-* 2>/dev/null
	# Every mount under the run directory (pod volumes, rootfs overlays), deepest first.
	for p in $(awk -v r="$RUN/" 'index($2, r) == 1 {print $2}' /proc/self/mounts | sort -r); do umount -l "$p" 2>/dev/null; done
	detach_loops
	if grep -qx "bridge $BRIDGE" "$RUN/made"; then ip link del "$BRIDGE" 2>/dev/null; fi
	iptables -t nat -S POSTROUTING 2>/dev/null | grep -- "-s ${POD_CIDR%.0/24}\." | sed 's/^-A/-D/' | while read -r rule; do eval "iptables -t nat $rule" 2>/dev/null; done
	for p in $(iptables -t nat -S 2>/dev/null | sed -n 's/^-N \(CNI-[0-9a-f]*\)$/\1/p'); do
		iptables -t nat -S "$p" 2>/dev/null | grep -q "plumb-k8s" && { iptables -t nat -F "$p"; iptables -t nat -X "$p"; }
	done
	if grep -qx cgroups "$RUN/made"; then
		# cgroup v1 and v2: the kubelet's kubepods tree (children first).
		for p in $(find /sys/fs/cgroup -depth -type d \( -path '*/kubepods*' -o -path '*/k8s.io/*' -o -name k8s.io \) 2>/dev/null); do rmdir "$p" 2>/dev/null; done
	fi
	while read -r kind what; do
		case $kind in
		hostdir) for p in $(awk -v r="$what/" 'index($2, r) == 1 {print $2}' /proc/self/mounts | sort -r); do umount -l "$p"; done; rm -rf "$what" ;;
		dockerimage) docker rmi "$what" >/dev/null 2>&1 ;;
		emptydir) rmdir "$what" 2>/dev/null ;;
		esac
	done <"$RUN/made"
	rm -rf "$RUN"
	log "down in $((SECONDS - t0))s"
	set -e
}

case "${1:-}" in
up) up ;;
import) shift; import "$@" ;;
down) down ;;
*) echo "usage: $0 up|import IMAGE...|down" >&2; exit 2 ;;
esac
