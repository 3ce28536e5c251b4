#!/usr/bin/env bash
# End to end on a real single-node Kubernetes (scripts/k8s/cluster.sh): builds
# what is missing (scripts/k8s/build.sh, cached; make build; the agentd and
# sandboxd images), brings the cluster up, imports the images, applies
# deploy/k8s/overlays/example through a test overlay, waits for agentd and
# sandboxd to be Ready, and checks them like a user from outside the
# cluster: agentctl health through agentd's Service and a sandboxd pod,
# /metrics, and a command that runs in a sandbox on the worker. The trap
# tears everything down (cluster, PostgreSQL, temporary files), also on
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
TAG=${VERSION:-k8s-e2e-$(git rev-parse --short HEAD)}
WORK=$(mktemp -d /tmp/plumb-k8s-e2e.XXXXXX)
export KUBECONFIG=$RUN/kubeconfig
t0=$SECONDS

log() { echo "== k8s e2e [$((SECONDS - t0))s]: $*" >&2; }

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
	[ -z "$ids" ] || docker rm -f -v $ids >/dev/null 2>&1 || true
	"$K8S/cluster.sh" down || true
	if [ -f "$WORK/pg/postmaster.pid" ]; then
		runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$WORK/pg" -m immediate stop >/dev/null 2>&1 || true
	fi
	rm -rf "$WORK"
	docker rmi "plumb-agentd:$TAG" "plumb-sandboxd:$TAG" >/dev/null 2>&1 || true
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

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
  - target: {kind: Deployment, name: agentd}
    patch: |
      - op: remove
        path: /spec/template/spec/initContainers
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
"$ACTL" --agentd "$AGENTD:7070" --sandboxd "$SANDBOXD:7071" --token "$AGENTD_TOKEN" health 2>&1 | awk '$1 == "agentd" && $3 == "SERVING" {ok = 1} END {exit !ok}' ||
	{ "$ACTL" --agentd "$AGENTD:7070" --token "$AGENTD_TOKEN" health >&2 || true; echo "agentd not SERVING through its Service" >&2; exit 1; }
"$ACTL" --agentd "$AGENTD:7070" --sandboxd "$SANDBOXD:7071" --token "$SANDBOXD_TOKEN" health 2>&1 | awk '$1 == "sandboxd" && $3 == "SERVING" {ok = 1} END {exit !ok}' ||
	{ echo "sandboxd not SERVING on its pod" >&2; exit 1; }
curl -sf "http://$AGENTD:9070/metrics" | grep -q '^# HELP' || { echo "agentd /metrics through the Service failed" >&2; exit 1; }
curl -sf "http://$SANDBOXD:9071/metrics" | grep -q '^# HELP' || { echo "sandboxd /metrics failed" >&2; exit 1; }

log "checks: a command runs in a sandbox on the worker"
export AGENTCTL_TOKEN=$SANDBOXD_TOKEN
ID=$("$ACTL" --sandboxd "$SANDBOXD:7071" --timeout 120s sandbox create --image "$SANDBOX_IMAGE" --label "plumb-k8s-e2e=$TAG" | tail -n 1)
out=$("$ACTL" --sandboxd "$SANDBOXD:7071" sandbox exec "$ID" -- echo hello-from-k8s)
"$ACTL" --sandboxd "$SANDBOXD:7071" --timeout 120s sandbox rm "$ID" >/dev/null
[ "$out" = hello-from-k8s ] || { echo "sandbox exec printed \"$out\"" >&2; exit 1; }

log "PASS"
