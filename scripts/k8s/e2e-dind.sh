# overlays/dind (sandboxd with a Docker Engine of its own in a privileged
# sidecar) on the cluster of scripts/k8s/e2e.sh, which sources this file
# with its variables and helpers; see there for what it checks.

log "dind: PersistentVolumes for the workers' docker-data claims (hostPath under $CLUSTER_DIR/pv)"
# The cluster has no StorageClass: each claim of the StatefulSet is bound
# in advance to a volume on the node's disk (a real file system, as
# overlay2 needs).
for i in 0 1; do
	cat <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: {name: plumb-e2e-docker-data-$i, labels: {plumb.test-run: k8s-e2e}}
spec:
  capacity: {storage: 50Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  claimRef: {namespace: plumb, name: docker-data-sandboxd-$i}
  hostPath: {path: $CLUSTER_DIR/pv/docker-data-$i, type: DirectoryOrCreate}
---
YAML
done | kubectl apply -f - >/dev/null
PGPASSWORD=$PG_PASSWORD "$PG_BIN/psql" -h "$GATEWAY" -p "$PG_PORT" -U agentd -d postgres -qc 'CREATE DATABASE plumb_dind' >/dev/null

log "dind: apply overlays/dind (test overlay in $WORK/dind)"
mkdir -p "$WORK/dind"
cat >"$WORK/dind/secrets.yaml" <<YAML
apiVersion: v1
kind: Secret
metadata: {name: plumb-postgres, namespace: plumb}
stringData: {dsn: "postgres://agentd:$PG_PASSWORD@$GATEWAY:$PG_PORT/plumb_dind?sslmode=disable"}
---
apiVersion: v1
kind: Secret
metadata: {name: plumb-tokens, namespace: plumb}
stringData: {agentd: "$AGENTD_TOKEN", sandboxd: "$SANDBOXD_TOKEN"}
YAML
cat >"$WORK/dind/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$ROOT/deploy/k8s/overlays/dind" "$WORK/dind")
  - secrets.yaml
images:
  - {name: plumb-agentd, newTag: "$TAG"}
  - {name: plumb-sandboxd, newTag: "$TAG"}
  - {name: plumb-dind, newTag: "${DIND_IMAGE#*:}"}
patches:
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
  - patch: |
      apiVersion: apps/v1
      kind: StatefulSet
      metadata: {name: sandboxd, namespace: plumb}
      spec:
        template:
          spec:
            containers:
              - name: dind
                env:
                  - {name: PLUMB_SANDBOX_IMAGES, value: "$SANDBOX_IMAGE"}
                  - {name: PLUMB_DIND_PULL, value: "false"}
                resources:
                  requests: {cpu: 100m, memory: 256Mi}
              # Every box gets a workspace file system of its own (a loop
              # device of the node, attached through the pod's engine).
              - name: sandboxd
                env:
                  - {name: SANDBOXD_POLICY_MAX_DISK_BYTES, value: "67108864"}
YAML
kubectl kustomize "$WORK/dind" >"$WORK/dind/rendered.yaml"
kubectl apply -f "$WORK/dind/rendered.yaml" >/dev/null

# Without a registry the sandbox image is loaded into each worker's engine
# (on its docker-data volume, so a restarted pod has it); the dind sidecar
# turns Ready only then.
engine_up() { kubectl -n plumb exec "$1" -c dind -- docker version; }
for i in 0 1; do
	wait_until "sandboxd-$i's engine" 600 engine_up "sandboxd-$i"
	docker save "$SANDBOX_IMAGE" | kubectl -n plumb exec -i "sandboxd-$i" -c dind -- docker load >/dev/null
done
kubectl -n plumb rollout status statefulset/sandboxd --timeout=600s
kubectl -n plumb rollout status deployment/agentd --timeout=600s
log "dind: agentd and both dind workers Ready"

AGENTD=$(kubectl -n plumb get service agentd -o jsonpath='{.spec.clusterIP}')
SANDBOXD=$(kubectl -n plumb get pod sandboxd-0 -o jsonpath='{.status.podIP}')
A=("$ACTL" --agentd "$AGENTD:7070" --token "$AGENTD_TOKEN")
check_health

log "checks: both dind workers discovered by every agentd replica"
read -r _ ip_a < <(worker_pod sandboxd-0)
read -r _ ip_b < <(worker_pod sandboxd-1)
for p in $(kubectl -n plumb get pods -l app.kubernetes.io/name=agentd -o name); do
	wait_until "$p to discover workers sandboxd-0 ($ip_a) and sandboxd-1 ($ip_b)" 180 joined "$p"
done

# in_engine WORKER BOX: WORKER's own engine runs BOX's container.
in_engine() { [ -n "$(kubectl -n plumb exec "$1" -c dind -- docker ps -q --filter "label=plumb.sandbox=$2")" ]; }
# gone_from_engine WORKER BOX: WORKER's engine has no container of BOX.
gone_from_engine() {
	local out
	out=$(kubectl -n plumb exec "$1" -c dind -- docker ps -aq --filter "label=plumb.sandbox=$2") && [ -z "$out" ]
}

log "checks: an agent run through the agentd Service executes in a box of a worker's own engine"
read -r RUN THREAD < <(detach 'run: echo run-in-dind-$((6*7)); df -P . | tail -n 1')
IFS=$'\t' read -r st text < <(wait_run "$RUN")
[ "$st" = RUN_STATUS_COMPLETED ] && grep -q 'run-in-dind-42' <<<"$text" && grep -q '/dev/loop' <<<"$text" ||
	{ echo "run $RUN ended $st (want run-in-dind-42 and a workspace on a loop device): $text" >&2; exit 1; }
box=""
wait_until "thread $THREAD's sandbox" 60 find_box
worker=$(box_worker "$box")
in_engine "$worker" "$box" || { echo "box $box is not in $worker's engine" >&2; exit 1; }
[ -z "$(docker ps -aq --filter "label=plumb.sandbox=$box")" ] || { echo "box $box runs on the node's engine" >&2; exit 1; }
log "the run's box $box ran in $worker's engine"

log "checks: a dind worker pod deleted mid-command"
read -r RUN THREAD < <(detach 'run: echo kept > kept.txt; sleep 300; echo never')
box=""
wait_until "thread $THREAD's sandbox" 120 find_box
worker=$(box_worker "$box")
pod="" ip=""
wait_until "worker $worker's pod" 60 pod_of "$worker"
running() { "${S[@]}" --sandboxd "$ip:7071" sandbox exec "$box" -- test -f kept.txt; }
wait_until "the command running in $box" 120 running
losetup -l -n -O BACK-FILE | grep -q "$box\.img" || { echo "no loop device holds $box's workspace" >&2; exit 1; }
uid=$(kubectl -n plumb get pod "$worker" -o jsonpath='{.metadata.uid}')
kubectl -n plumb delete pod "$worker" --wait=false >/dev/null
IFS=$'\t' read -r st text < <(wait_run "$RUN")
grep -q "$worker" <<<"$text" || { echo "run $RUN ($st) after its worker's pod was deleted does not name worker $worker: $text" >&2; exit 1; }
log "the run ended $st: $text"
# The StatefulSet brings the pod back under its name, on its claim: the
# engine finds its images again (Ready without a new load), and the box's
# container, stopped when the engine died, is removed by sandboxd.
back() {
	local s
	s=$(kubectl -n plumb get pod "$worker" -o jsonpath='{.metadata.uid} {.status.conditions[?(@.type=="Ready")].status}') &&
		[ "${s% *}" != "$uid" ] && [ "${s#* }" = True ]
}
wait_until "a new, Ready pod $worker" 300 back
read -r pod ip < <(worker_pod "$worker")
wait_until "the new $worker pod to remove the dead box $box" 120 gone_from_engine "$worker" "$box"
# ... and to detach its workspace's loop device, which the dead engine
# left attached on the node (found by the image file's inode).
detached() { ! losetup -l -n -O BACK-FILE | grep -q "$box\.img"; }
wait_until "the loop device of $box's workspace to be detached" 60 detached
for p in $(kubectl -n plumb get pods -l app.kubernetes.io/name=agentd -o name); do
	wait_until "$p to dial the new $worker pod ($ip)" 180 dials "$p"
done
read -r RUN _ < <(detach 'run: test -f kept.txt && echo kept-survived || echo fresh-workspace' --thread "$THREAD")
IFS=$'\t' read -r st text < <(wait_run "$RUN")
[ "$st" = RUN_STATUS_COMPLETED ] && grep -q fresh-workspace <<<"$text" && grep -q 'was reset' <<<"$text" ||
	{ echo "the thread's next run ($st) did not get a fresh workspace with the reset notice: $text" >&2; exit 1; }
old=$box
wait_until "thread $THREAD's new sandbox" 60 find_box
[ "$box" != "$old" ] || { echo "thread $THREAD still names sandbox $old" >&2; exit 1; }
log "the thread's next run got a fresh box $box with the reset notice"

check_agentd_disruptions

# Remove the boxes through their workers now (their loop devices with them).
remove_boxes
