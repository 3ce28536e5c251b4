#!/usr/bin/env bash
# End to end on a real single-node Kubernetes (scripts/k8s/cluster.sh): builds
# what is missing (scripts/k8s/build.sh, cached; make build; the agentd and
# sandboxd images), brings the cluster up, imports the images, applies
# deploy/k8s/overlays/example through a test overlay, waits for agentd and
# sandboxd to be Ready, and checks them like a user from outside the
# cluster: agentctl health through agentd's Service and a sandboxd pod,
# /metrics, and a command that runs in a sandbox on the worker; then, with
# a scripted model on the host (internal/tools/scriptmodel): a second
# node-local worker that every agentd replica discovers, an agent run
# through the Service that executes in a sandbox, a sandboxd pod deleted
# mid-command (the run's tool result names the worker, the new pod
# re-adopts the box with its files), `kubectl rollout restart` of agentd
# mid-run (the run completes, every step once), the PDB refusing an
# eviction, and the HPA as the API server stored it. The trap tears
# everything down (cluster, PostgreSQL, the model, temporary files), also on
# failure. `make k8s-e2e` runs it; K8S_KEEP=1 leaves the cluster up.
#
# The test overlay differs from overlays/example in what a node without a
# registry needs: the plumb images carry this build's tag (imported, never
# pulled); PostgreSQL is Debian's, on the bridge's gateway address (the
# example's StatefulSet needs the postgres image from a registry and a
# StorageClass), so the overlay drops postgres.yaml and the init container;
# the Docker socket's gid is read from this machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
K8S=$ROOT/scripts/k8s
RUN=${K8S_RUN:-/tmp/plumb-k8s}
GATEWAY=10.227.0.1
PG_PORT=27915
# The workers' names: unique to this suite, so its cleanup removes exactly
# their boxes and volumes from the host's engine.
WORKER=k8se2e-$(hostname)
MODEL_PORT=27916
TAG=${VERSION:-k8s-e2e-$(git rev-parse --short HEAD)}
WORK=$(mktemp -d /tmp/plumb-k8s-e2e.XXXXXX)
export KUBECONFIG=$RUN/kubeconfig
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

log "cluster up"
"$K8S/cluster.sh" up >/dev/null
"$K8S/cluster.sh" import "plumb-agentd:$TAG" "plumb-sandboxd:$TAG"
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

log "apply overlays/example (test overlay in $WORK/overlay)"
AGENTD_TOKEN=$(openssl rand -hex 32)
SANDBOXD_TOKEN=$(openssl rand -hex 32)
DOCKER_GID=$(stat -c %g /var/run/docker.sock)
mkdir -p "$WORK/overlay"
cat >"$WORK/overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$ROOT/deploy/k8s/overlays/example" "$WORK/overlay")
images:
  - {name: plumb-agentd, newTag: "$TAG"}
  - {name: plumb-sandboxd, newTag: "$TAG"}
patches:
  - target: {kind: Secret, name: plumb-postgres}
    patch: |
      - op: replace
        path: /stringData
        value: {dsn: "postgres://agentd:$PG_PASSWORD@$GATEWAY:$PG_PORT/plumb?sslmode=disable"}
  - target: {kind: Secret, name: plumb-tokens}
    patch: |
      - op: replace
        path: /stringData
        value: {agentd: "$AGENTD_TOKEN", sandboxd: "$SANDBOXD_TOKEN"}
  - target: {kind: DaemonSet, name: sandboxd}
    patch: |
      - op: replace
        path: /spec/template/spec/securityContext/supplementalGroups
        value: [$DOCKER_GID]
      - op: replace
        path: /spec/template/spec/containers/0/args/0
        value: --worker=k8se2e-\$(NODE_NAME)
  - target: {kind: Deployment, name: agentd}
    patch: |
      - op: remove
        path: /spec/template/spec/initContainers
  - target: {kind: ConfigMap, name: agentd-config}
    patch: |
      - op: replace
        path: /data/agentd.yaml
        value: |
          version: 1
          server: {grpc_addr: 0.0.0.0:7070, http_addr: 0.0.0.0:9070, shutdown_grace: 30s}
          models:
            scripted: {base_url: "http://$GATEWAY:$MODEL_PORT/v1", model: scripted}
          defaults: {model: scripted}
          sandbox:
            template: {image: "$SANDBOX_IMAGE", memory: 256Mi}
          backends: {default: sandbox}
  - target: {kind: StatefulSet, name: postgres}
    patch: |
      \$patch: delete
      apiVersion: apps/v1
      kind: StatefulSet
      metadata: {name: postgres}
  - target: {kind: Service, name: postgres}
    patch: |
      \$patch: delete
      apiVersion: v1
      kind: Service
      metadata: {name: postgres}
YAML
kubectl kustomize "$WORK/overlay" >"$WORK/rendered.yaml"
kubectl apply -f "$WORK/rendered.yaml" >/dev/null
kubectl -n plumb rollout status daemonset/sandboxd --timeout=600s
kubectl -n plumb rollout status deployment/agentd --timeout=600s
log "agentd and sandboxd Ready"

AGENTD=$(kubectl -n plumb get service agentd -o jsonpath='{.spec.clusterIP}')
SANDBOXD=$(kubectl -n plumb get pods -l app.kubernetes.io/name=sandboxd -o jsonpath='{.items[0].status.podIP}')
ACTL=$ROOT/bin/agentctl

log "checks: health through the agentd Service ($AGENTD:7070) and the sandboxd pod ($SANDBOXD:7071)"
# The Service's endpoints and kube-proxy's rules follow readiness by a
# moment: the first calls may find no endpoint yet.
# serving NAME TOKEN: agentctl health (which asks both daemons and exits 1
# unless both answer) says NAME is SERVING.
serving() {
	local out
	out=$("$ACTL" --agentd "$AGENTD:7070" --sandboxd "$SANDBOXD:7071" --token "$2" health 2>&1 || true)
	awk -v d="$1" '$1 == d && $3 == "SERVING" {ok = 1} END {exit !ok}' <<<"$out"
}
agentd_serving() { serving agentd "$AGENTD_TOKEN"; }
sandboxd_serving() { serving sandboxd "$SANDBOXD_TOKEN"; }
wait_until "agentd SERVING through its Service" 120 agentd_serving ||
	{ "$ACTL" --agentd "$AGENTD:7070" --token "$AGENTD_TOKEN" health >&2 || true; exit 1; }
wait_until "sandboxd SERVING on its pod" 120 sandboxd_serving || exit 1
metrics() { curl -sf "http://$1/metrics" | grep -q '^# HELP'; }
wait_until "agentd /metrics through the Service" 60 metrics "$AGENTD:9070" || exit 1
wait_until "sandboxd /metrics on its pod" 60 metrics "$SANDBOXD:9071" || exit 1

log "checks: a command runs in a sandbox on the worker"
export AGENTCTL_TOKEN=$SANDBOXD_TOKEN
ID=$("$ACTL" --sandboxd "$SANDBOXD:7071" --timeout 120s sandbox create --image "$SANDBOX_IMAGE" --label "plumb-k8s-e2e=$TAG" | tail -n 1)
out=$("$ACTL" --sandboxd "$SANDBOXD:7071" sandbox exec "$ID" -- echo hello-from-k8s)
"$ACTL" --sandboxd "$SANDBOXD:7071" --timeout 120s sandbox rm "$ID" >/dev/null
[ "$out" = hello-from-k8s ] || { echo "sandbox exec printed \"$out\"" >&2; exit 1; }

A=("$ACTL" --agentd "$AGENTD:7070" --token "$AGENTD_TOKEN")
S=("$ACTL" --token "$SANDBOXD_TOKEN")

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
    args = p["spec"]["containers"][0]["args"]
    w = [a.split("=", 1)[1] for a in args if a.startswith("--worker=")][0].replace("$(NODE_NAME)", p["spec"]["nodeName"])
    if w == sys.argv[1]: print(p["metadata"]["name"], p["status"]["podIP"])' "$1"
}

log "checks: a second node-local worker (sandboxd-b), discovered by every agentd replica"
kubectl -n plumb get daemonset sandboxd -o json | python3 -c '
import json, sys
d = json.load(sys.stdin)
md = d["metadata"]
d["metadata"] = {"name": "sandboxd-b", "namespace": md["namespace"], "labels": md.get("labels", {})}
d.pop("status", None)
sel = {"app.kubernetes.io/name": "sandboxd", "plumb.dev/worker-set": "b"}
d["spec"]["selector"] = {"matchLabels": sel}
d["spec"]["template"]["metadata"]["labels"].update(sel)
c = d["spec"]["template"]["spec"]["containers"][0]
c["args"] = [a + "-b" if a.startswith("--worker=") else a for a in c["args"]]
json.dump(d, sys.stdout)' | kubectl apply -f - >/dev/null
kubectl -n plumb rollout status daemonset/sandboxd-b --timeout=600s
read -r _ ip_a < <(worker_pod "$WORKER")
read -r _ ip_b < <(worker_pod "$WORKER-b")
joined() { # joined POD: POD dials both workers' pods (the headless Service's two addresses)
	local logs
	logs=$(kubectl -n plumb logs "$1" 2>/dev/null | grep 'sandboxd worker address added') || return 1
	grep -q "\"$ip_a:7071\"" <<<"$logs" && grep -q "\"$ip_b:7071\"" <<<"$logs"
}
for p in $(kubectl -n plumb get pods -l app.kubernetes.io/name=agentd -o name); do
	wait_until "$p to discover workers $WORKER ($ip_a) and $WORKER-b ($ip_b)" 180 joined "$p"
done

log "checks: an agent run through the agentd Service executes in a sandbox"
read -r RUN THREAD < <(detach 'run: echo run-in-k8s-$((6*7))')
IFS=$'\t' read -r st text < <(wait_run "$RUN")
[ "$st" = RUN_STATUS_COMPLETED ] && grep -q 'run-in-k8s-42' <<<"$text" ||
	{ echo "run $RUN ended $st: $text" >&2; exit 1; }

log "checks: a sandboxd pod deleted mid-command"
read -r RUN THREAD < <(detach 'run: echo kept > kept.txt; sleep 300; echo never')
box=""
find_box() {
	box=$("${A[@]}" threads show "$THREAD" --json | python3 -c 'import json, sys; print(json.load(sys.stdin).get("sandboxId", ""))')
	[ -n "$box" ]
}
wait_until "thread $THREAD's sandbox" 120 find_box
worker=${box#sbx-}
worker=${worker%-*}
pod="" ip=""
pod_of() { # pod_of WORKER [NOT]: sets pod and ip to WORKER's pod, other than NOT
	read -r pod ip < <(worker_pod "$1") && [ "$pod" != "${2:-}" ]
}
wait_until "worker $worker's pod" 60 pod_of "$worker"
# kept.txt is written just before the 300 s sleep begins.
running() { "${S[@]}" --sandboxd "$ip:7071" sandbox exec "$box" -- test -f kept.txt; }
wait_until "the command running in $box" 120 running
old=$pod
kubectl -n plumb delete pod "$old" --wait=false >/dev/null
IFS=$'\t' read -r st text < <(wait_run "$RUN")
grep -q "$worker" <<<"$text" || { echo "run $RUN ($st) after its worker's pod was deleted does not name worker $worker: $text" >&2; exit 1; }
log "the run ended $st: $text"
wait_until "a new pod of worker $worker" 300 pod_of "$worker" "$old"
readopted() { "${S[@]}" --sandboxd "$ip:7071" sandbox exec "$box" -- test -f kept.txt; }
wait_until "the new $worker pod to re-adopt $box" 180 readopted
dials() { kubectl -n plumb logs "$1" 2>/dev/null | grep 'sandboxd worker address added' | grep -q "\"$ip:7071\""; }
for p in $(kubectl -n plumb get pods -l app.kubernetes.io/name=agentd -o name); do
	wait_until "$p to dial the new $worker pod ($ip)" 180 dials "$p"
done
read -r RUN _ < <(detach 'run: cat kept.txt' --thread "$THREAD")
IFS=$'\t' read -r st text < <(wait_run "$RUN")
[ "$st" = RUN_STATUS_COMPLETED ] && grep -q kept <<<"$text" || { echo "the thread's next run ($st) did not find its file: $text" >&2; exit 1; }

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
	kubectl create --raw "/api/v1/namespaces/plumb/pods/$1/eviction" -f - <<JSON
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

log "PASS"
