# overlays/example (host-docker: sandboxd on the node's Docker Engine) on
# the cluster of scripts/k8s/e2e.sh, which sources this file with its
# variables and helpers; see there for what it checks.

log "example: apply overlays/example (test overlay in $WORK/overlay)"
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
A=("$ACTL" --agentd "$AGENTD:7070" --token "$AGENTD_TOKEN")
check_health

log "checks: a command runs in a sandbox on the worker"
ID=$("${S[@]}" --sandboxd "$SANDBOXD:7071" --timeout 120s sandbox create --image "$SANDBOX_IMAGE" --label "plumb-k8s-e2e=$TAG" | tail -n 1)
out=$("${S[@]}" --sandboxd "$SANDBOXD:7071" sandbox exec "$ID" -- echo hello-from-k8s)
"${S[@]}" --sandboxd "$SANDBOXD:7071" --timeout 120s sandbox rm "$ID" >/dev/null
[ "$out" = hello-from-k8s ] || { echo "sandbox exec printed \"$out\"" >&2; exit 1; }

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
wait_until "thread $THREAD's sandbox" 120 find_box
worker=$(box_worker "$box")
pod="" ip=""
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
for p in $(kubectl -n plumb get pods -l app.kubernetes.io/name=agentd -o name); do
	wait_until "$p to dial the new $worker pod ($ip)" 180 dials "$p"
done
read -r RUN _ < <(detach 'run: cat kept.txt' --thread "$THREAD")
IFS=$'\t' read -r st text < <(wait_run "$RUN")
[ "$st" = RUN_STATUS_COMPLETED ] && grep -q kept <<<"$text" || { echo "the thread's next run ($st) did not find its file: $text" >&2; exit 1; }

check_agentd_disruptions

