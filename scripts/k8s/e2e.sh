#!/usr/bin/env bash
# End to end on a real single-node Kubernetes (scripts/k8s/cluster.sh): builds
# what is missing (scripts/k8s/build.sh, cached; make build; the agentd and
# sandboxd images; the dind image, scripts/dind-image.sh, cached), brings the
# cluster up once, imports the images, starts PostgreSQL and a scripted
# model on the host (internal/tools/scriptmodel), and runs each overlay of
# $K8S_OVERLAYS (default "example dind") in turn in namespace plumb, checking
# it like a user from outside the cluster (agentctl through the Services
# and pods; kubectl for what only the cluster knows):
#
# example (e2e-example.sh; overlays/example, host-docker: sandboxd on the
# node's Docker Engine): agentctl health through agentd's Service and a
# sandboxd pod, /metrics, a command that runs in a sandbox on the worker; a
# second node-local worker that every agentd replica discovers, an agent
# run through the Service that executes in a sandbox, a sandboxd pod
# deleted mid-command (the run's tool result names the worker, the new pod
# re-adopts the box with its files), `kubectl rollout restart` of agentd
# mid-run, the PDB and the HPA (check_agentd_disruptions, below).
#
# dind (e2e-dind.sh; overlays/dind: a StatefulSet of two workers, each with
# its own Docker Engine in a privileged sidecar, docker-data on a
# PersistentVolume): the sandbox image loaded into each worker's engine (the
# sidecar is Ready only then), health and /metrics, both workers discovered
# by every agentd replica, an agent run through the Service whose box runs
# in a worker's own engine (not the node's), and a worker pod deleted
# mid-command: the run's tool result names the worker; the pod comes back
# under its name on its volume, its sandboxd removes what is left of the box
# (its engine died with the pod), and the thread's next run gets a fresh
# workspace with the reset notice (docs/deploy.md, "The dind overlay").
#
# Both: check_agentd_disruptions (the rolling restart mid-run, the PDB, the
# HPA; agentd's manifests are the base's in each overlay).
#
# The trap tears everything down (boxes, cluster, PostgreSQL, the model,
# temporary files), also on failure. `make k8s-e2e` runs it; K8S_KEEP=1
# leaves the cluster up.
#
# The test overlays differ from the shipped ones in what a node without a
# registry needs: the plumb images carry this build's tag (imported, never
# pulled); PostgreSQL is Debian's, on the bridge's gateway address (the
# example's StatefulSet needs the postgres image from a registry and a
# StorageClass), so the example drops postgres.yaml and the init container;
# the Docker socket's gid is read from this machine; dind's claims bind to
# hostPath PersistentVolumes under the cluster's run directory (there is no
# StorageClass), its sidecars request less CPU (two fit on two cores), and
# they are loaded with the sandbox image instead of pulling it.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
K8S=$ROOT/scripts/k8s
# The cluster's run directory (cluster.sh's K8S_RUN). Not RUN: the checks use that for run ids.
CLUSTER_DIR=${K8S_RUN:-/tmp/plumb-k8s}
GATEWAY=10.227.0.1
PG_PORT=27915
# The workers' names: unique to this suite, so its cleanup removes exactly
# their boxes and volumes from the host's engine.
WORKER=k8se2e-$(hostname)
MODEL_PORT=27916
TAG=${VERSION:-k8s-e2e-$(git rev-parse --short HEAD)}
WORK=$(mktemp -d /tmp/plumb-k8s-e2e.XXXXXX)
# Overlays to run, in this order (e2e-<overlay>.sh each).
OVERLAYS=${K8S_OVERLAYS:-example dind}
export KUBECONFIG=$CLUSTER_DIR/kubeconfig
ACTL=$ROOT/bin/agentctl
AGENTD_TOKEN=$(python3 -c "import secrets; print(secrets.token_hex(32))")
SANDBOXD_TOKEN=$(python3 -c "import secrets; print(secrets.token_hex(32))")
t0=$SECONDS

log() { echo "== k8s e2e [$((SECONDS - t0))s]: $*" >&2; }

# wait_until WHAT SECONDS CMD...: polls CMD every 2 s (a hang guard, not a
# performance bound).
wait_until() {
	local what=$1 tries=$(($2 / 2)); shift 2
	for _ in $(seq "$tries"); do "$@" >/dev/null 2>&1 && return 0; sleep 2; done
	echo "timed out waiting for: $what" >&2
	return 1
}

# remove_boxes: every sandbox the workers of namespace plumb hold, removed
# through their sandboxd (which also detaches a box's workspace loop
# device). Quiet and best effort: it also runs on the failure path.
remove_boxes() {
	local ip id
	for ip in $(kubectl --request-timeout=20s -n plumb get pods -l app.kubernetes.io/name=sandboxd -o jsonpath='{.items[*].status.podIP}' 2>/dev/null); do
		for id in $("$ACTL" --token "$SANDBOXD_TOKEN" --sandboxd "$ip:7071" sandbox ls 2>/dev/null | awk 'NR > 1 {print $1}'); do
			"$ACTL" --token "$SANDBOXD_TOKEN" --sandboxd "$ip:7071" --timeout 120s sandbox rm "$id" >/dev/null 2>&1 || true
		done
	done
}

cleanup() {
	local rc=$?
	if [ "$rc" -ne 0 ] && [ -f "$KUBECONFIG" ]; then
		log "FAILED ($rc); cluster state:"
		kubectl get pods -A -o wide >&2 2>/dev/null || true
		kubectl -n plumb get events --sort-by=.lastTimestamp 2>/dev/null | tail -n 30 >&2 || true
		for p in $(kubectl -n plumb get pods -o name 2>/dev/null); do
			echo "--- $p" >&2; kubectl -n plumb logs --all-containers --tail=20 "$p" >&2 2>/dev/null || true
		done
	fi
	if [ "${K8S_KEEP:-}" = 1 ]; then log "K8S_KEEP=1: cluster left up ($K8S/cluster.sh down removes it)"; return; fi
	[ ! -f "$KUBECONFIG" ] || remove_boxes
	# Sandboxes a failed check left on the host's engine (the worker pod is
	# gone with the cluster; its boxes would stay).
	local ids
	ids=$(docker ps -aq --filter "label=plumb.label.plumb-k8s-e2e=$TAG" 2>/dev/null || true)
	for w in "$WORKER" "$WORKER-b"; do
		ids="$ids $(docker ps -aq --filter "label=plumb.worker=$w" 2>/dev/null || true)"
	done
	[ -z "${ids// /}" ] || docker rm -f -v $ids >/dev/null 2>&1 || true
	for w in "$WORKER" "$WORKER-b"; do
		docker volume ls -q --filter "label=plumb.worker=$w" | xargs -r docker volume rm -f >/dev/null 2>&1 || true
	done
	"$K8S/cluster.sh" down || true
	[ ! -f "$WORK/model.pid" ] || kill "$(cat "$WORK/model.pid")" 2>/dev/null || true
	if [ -f "$WORK/pg/postmaster.pid" ]; then
		runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$WORK/pg" -m immediate stop >/dev/null 2>&1 || true
	fi
	rm -rf "$WORK"
	docker rmi "plumb-agentd:$TAG" "plumb-sandboxd:$TAG" >/dev/null 2>&1 || true
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# What the cluster needs from Debian, installed when missing (as root).
need=()
for p in containerd containernetworking-plugins iptables iproute2 etcd-server postgresql openssl; do
	dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
command -v kubectl >/dev/null || need+=(kubernetes-client)
if [ ${#need[@]} -gt 0 ]; then
	log "installing ${need[*]}"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -x "$PG_BIN/initdb" ] || { echo "PostgreSQL missing: apt-get install postgresql" >&2; exit 1; }

log "build (cached after the first run)"
"$K8S/build.sh"
make -s build VERSION="$TAG" >/dev/null
make -s images VERSION="$TAG" >/dev/null
SANDBOX_IMAGE=$(go run ./internal/tools/sandboximage)
images=("plumb-agentd:$TAG" "plumb-sandboxd:$TAG")
if [[ " $OVERLAYS " == *" dind "* ]]; then
	DIND_IMAGE=$(scripts/dind-image.sh)
	images+=("$DIND_IMAGE")
fi

log "cluster up"
"$K8S/cluster.sh" up >/dev/null
"$K8S/cluster.sh" import "${images[@]}"
kubectl label node "$(hostname)" plumb.dev/docker=true >/dev/null
log "cluster ready"

log "PostgreSQL on $GATEWAY:$PG_PORT"
mkdir -p "$WORK/pg" && chown postgres "$WORK" "$WORK/pg" && chmod 700 "$WORK/pg"
PG_PASSWORD=$(openssl rand -hex 16)
echo "$PG_PASSWORD" >"$WORK/pgpass" && chown postgres "$WORK/pgpass"
runuser -u postgres -- "$PG_BIN/initdb" -D "$WORK/pg" -U agentd --pwfile "$WORK/pgpass" -A scram-sha-256 >/dev/null
echo "host all agentd 10.227.0.0/24 scram-sha-256" >>"$WORK/pg/pg_hba.conf"
runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$WORK/pg" -l "$WORK/pg.log" -w \
	-o "-c listen_addresses=$GATEWAY -p $PG_PORT -k $WORK/pg" start >/dev/null
PGPASSWORD=$PG_PASSWORD "$PG_BIN/psql" -h "$GATEWAY" -p "$PG_PORT" -U agentd -d postgres -qc 'CREATE DATABASE plumb' >/dev/null

log "scripted model on $GATEWAY:$MODEL_PORT"
go build -o "$WORK/scriptmodel" ./internal/tools/scriptmodel
"$WORK/scriptmodel" --addr "$GATEWAY:$MODEL_PORT" >"$WORK/model.log" 2>&1 &
echo $! >"$WORK/model.pid"

S=("$ACTL" --token "$SANDBOXD_TOKEN")
# Set by each overlay's file: agentd's Service address, a sandboxd pod's,
# and agentctl for agentd.
AGENTD="" SANDBOXD="" A=()

# check_health: agentd through its Service and the sandboxd pod $SANDBOXD
# answer health and /metrics. The Service's endpoints and kube-proxy's
# rules follow readiness by a moment: the first calls may find no endpoint
# yet.
check_health() {
	log "checks: health through the agentd Service ($AGENTD:7070) and the sandboxd pod ($SANDBOXD:7071)"
	wait_until "agentd SERVING through its Service" 120 agentd_serving ||
		{ "$ACTL" --agentd "$AGENTD:7070" --token "$AGENTD_TOKEN" health >&2 || true; exit 1; }
	wait_until "sandboxd SERVING on its pod" 120 sandboxd_serving || exit 1
	wait_until "agentd /metrics through the Service" 60 metrics "$AGENTD:9070" || exit 1
	wait_until "sandboxd /metrics on its pod" 60 metrics "$SANDBOXD:9071" || exit 1
}
# serving NAME TOKEN: agentctl health (which asks both daemons and exits 1
# unless both answer) says NAME is SERVING.
serving() {
	local out
	out=$("$ACTL" --agentd "$AGENTD:7070" --sandboxd "$SANDBOXD:7071" --token "$2" health 2>&1 || true)
	awk -v d="$1" '$1 == d && $3 == "SERVING" {ok = 1} END {exit !ok}' <<<"$out"
}
agentd_serving() { serving agentd "$AGENTD_TOKEN"; }
sandboxd_serving() { serving sandboxd "$SANDBOXD_TOKEN"; }
metrics() { curl -sf "http://$1/metrics" | grep -q '^# HELP'; }

# detach PROMPT [ARGS...]: starts a detached run; prints "RUN THREAD".
detach() {
	"${A[@]}" run --detach --json "${@:2}" "$1" | head -n 1 |
		python3 -c 'import json, sys; e = json.load(sys.stdin); print(e["runId"], e["threadId"])'
}
# run_field RUN KEY: a field of the run record (GetRun).
# (Asked again when it lands on a stopping replica, as wait_run is.)
run_field() {
	local out
	for _ in $(seq 20); do
		if out=$("${A[@]}" runs get "$1" --json 2>/dev/null); then
			python3 -c 'import json, sys; print(json.load(sys.stdin)["run"].get(sys.argv[1], ""))' "$2" <<<"$out"
			return
		fi
		sleep 2
	done
	return 1
}
# wait_run RUN: waits for RUN to end; prints its status, a tab, and its
# final text and error on one line. A call that lands on a replica that is
# stopping (a rollout, an eviction) ends UNAVAILABLE: it is asked again, as
# a client would.
wait_run() {
	local out
	for _ in $(seq 20); do
		if out=$("${A[@]}" --timeout 330s runs wait "$1" --wait 300s --json 2>/dev/null); then
			python3 -c '
import json, sys
r = json.load(sys.stdin)["run"]
print(r["status"] + "\t" + " ".join((r.get("finalText", "") + " " + json.dumps(r.get("error", ""))).split()))' <<<"$out"
			return
		fi
		sleep 2
	done
	echo "WaitRun $1 failed 20 times" >&2
	return 1
}
# worker_pod WORKER: the running pod of sandboxd worker WORKER and its IP.
worker_pod() {
	kubectl -n plumb get pods -l app.kubernetes.io/name=sandboxd -o json | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    if p["metadata"].get("deletionTimestamp") or not p["status"].get("podIP"): continue
    args = [a for c in p["spec"]["containers"] if c["name"] == "sandboxd" for a in c.get("args", [])]
    w = [a.split("=", 1)[1] for a in args if a.startswith("--worker=")][0]
    w = w.replace("$(NODE_NAME)", p["spec"]["nodeName"]).replace("$(POD_NAME)", p["metadata"]["name"])
    if w == sys.argv[1]: print(p["metadata"]["name"], p["status"]["podIP"])' "$1"
}
# pod_of WORKER [NOT]: sets pod and ip to WORKER's pod, other than NOT.
pod_of() { read -r pod ip < <(worker_pod "$1") && [ "$pod" != "${2:-}" ]; }
# joined POD: POD dials both workers' pods ip_a and ip_b (the headless
# Service's two addresses).
joined() {
	local logs
	logs=$(kubectl -n plumb logs "$1" 2>/dev/null | grep 'sandboxd worker address added') || return 1
	grep -q "\"$ip_a:7071\"" <<<"$logs" && grep -q "\"$ip_b:7071\"" <<<"$logs"
}
# dials POD: POD dials the worker pod at $ip.
dials() { kubectl -n plumb logs "$1" 2>/dev/null | grep 'sandboxd worker address added' | grep -q "\"$ip:7071\""; }
# find_box: sets box to thread $THREAD's sandbox id.
find_box() {
	box=$("${A[@]}" threads show "$THREAD" --json | python3 -c 'import json, sys; print(json.load(sys.stdin).get("sandboxId", ""))')
	[ -n "$box" ]
}
# box_worker BOX: the worker named in sandbox id BOX (sbx-<worker>-<random>).
box_worker() { local w=${1#sbx-}; echo "${w%-*}"; }

# check_agentd_disruptions: a run survives `kubectl rollout restart` of
# agentd (each of its 10 steps once), the PodDisruptionBudget refuses the
# second of two evictions, and the HPA is stored as written. Both overlays
# run it: agentd's manifests are the base's in each.
check_agentd_disruptions() {
	log "checks: kubectl rollout restart of agentd mid-run"
	read -r RUN THREAD < <(detach 'loop: 10: echo s >> steps.log; sleep 6; wc -l < steps.log')
	stepped() { [ "$(run_field "$RUN" steps)" -ge 1 ]; }
	wait_until "run $RUN's first step" 120 stepped
	holder=$(run_field "$RUN" holder)
	kubectl -n plumb rollout restart deployment/agentd >/dev/null
	kubectl -n plumb rollout status deployment/agentd --timeout=600s
	IFS=$'\t' read -r st text < <(wait_run "$RUN")
	[ "$st" = RUN_STATUS_COMPLETED ] && grep -Eq '^result: 10([^0-9]|$)' <<<"$text" ||
		{ echo "run $RUN across the restart ended $st with \"$text\" (want each of 10 steps once: result: 10)" >&2; exit 1; }
	log "the run (held by ${holder:-?} before the restart, by $(run_field "$RUN" holder) at the end) completed with each step once"

	log "checks: the PodDisruptionBudget refuses the second eviction"
	allowed() { [ "$(kubectl -n plumb get pdb agentd -o jsonpath='{.status.disruptionsAllowed}')" = 1 ]; }
	wait_until "the PDB to allow one disruption" 120 allowed
	evict() {
		kubectl create --raw "/api/v1/namespaces/plumb/pods/$1/eviction" -f - <<-JSON
	{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "$1", "namespace": "plumb"}}
	JSON
	}
	read -r p1 p2 < <(kubectl -n plumb get pods -l app.kubernetes.io/name=agentd -o json |
		python3 -c 'import json, sys; print(" ".join(p["metadata"]["name"] for p in json.load(sys.stdin)["items"] if not p["metadata"].get("deletionTimestamp")))')
	evict "$p1" >/dev/null
	if out=$(evict "$p2" 2>&1); then echo "the PDB let both agentd pods be evicted" >&2; exit 1; fi
	grep -qi 'disruption budget' <<<"$out" || { echo "the second eviction was refused for another reason: $out" >&2; exit 1; }
	kubectl -n plumb rollout status deployment/agentd --timeout=600s

	log "checks: the HPA as stored by the API server"
	[ "$(kubectl -n plumb get hpa agentd -o jsonpath='{.spec.scaleTargetRef.name}/{.spec.minReplicas}/{.spec.maxReplicas}')" = agentd/2/10 ] ||
		{ kubectl -n plumb get hpa agentd -o yaml >&2; exit 1; }
}

# next_overlay: removes what the previous overlay applied (its namespace;
# its boxes first, through their workers) before the next one starts.
next_overlay() {
	remove_boxes
	kubectl -n plumb delete daemonset,statefulset,deployment --all --wait=false >/dev/null 2>&1 || true
	kubectl -n plumb delete pods --all --grace-period=0 --force >/dev/null 2>&1 || true
	kubectl delete namespace plumb --timeout=300s >/dev/null
}

first=1
for overlay in $OVERLAYS; do
	[ -f "$K8S/e2e-$overlay.sh" ] || { echo "K8S_OVERLAYS: no overlay $overlay (scripts/k8s/e2e-$overlay.sh)" >&2; exit 2; }
	[ "$first" = 1 ] || next_overlay
	first=0
	ot=$SECONDS
	# shellcheck source=/dev/null
	. "$K8S/e2e-$overlay.sh"
	log "$overlay: passed in $((SECONDS - ot))s"
done

log "PASS"
