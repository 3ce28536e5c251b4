// Package k8s holds plumb's Kubernetes manifests (kustomize base and
// overlays). Its test renders every overlay with kustomize itself
// (`kubectl kustomize`), decodes each object strictly into the real
// Kubernetes API types, so a typo in a field name or a wrong type fails,
// and checks plumb's security and availability rules on what is rendered:
// non-root hardened containers, no service-account tokens, agentd replicas
// with an HPA and a PodDisruptionBudget, a graceful drain, NetworkPolicies
// that let only agentd reach sandboxd's gRPC port, and no pprof port.
// `make k8s-check` applies the same overlays to a real API server.
package k8s

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const (
	namespace = "plumb"
	// shutdownGrace is the daemons' --shutdown-grace / server.shutdown_grace.
	shutdownGrace = 30
)

// overlays are the deployable overlays; example adds placeholder Secrets.
var overlays = []string{"host-docker", "dind", "example"}

// newObject returns an empty typed object for a manifest kind.
func newObject(kind string) (any, error) {
	switch kind {
	case "Namespace":
		return &corev1.Namespace{}, nil
	case "ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "Secret":
		return &corev1.Secret{}, nil
	case "Service":
		return &corev1.Service{}, nil
	case "Deployment":
		return &appsv1.Deployment{}, nil
	case "DaemonSet":
		return &appsv1.DaemonSet{}, nil
	case "StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, nil
	case "PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	}
	return nil, fmt.Errorf("unexpected kind %q", kind)
}

// kubectl returns the kubectl binary, failing under CI=true when it is
// missing (scripts/test-deps.sh installs Debian's kubernetes-client).
func kubectl(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("kubectl not found (install Debian's kubernetes-client: scripts/test-deps.sh): %v", err)
		}
		t.Skipf("kubectl not found (apt-get install kubernetes-client): %v", err)
	}
	return p
}

// objects is one rendered overlay, typed.
type objects struct {
	deployments  map[string]*appsv1.Deployment
	daemonSets   map[string]*appsv1.DaemonSet
	statefulSets map[string]*appsv1.StatefulSet
	services     map[string]*corev1.Service
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	pdbs         []*policyv1.PodDisruptionBudget
	policies     []*networkingv1.NetworkPolicy
	secrets      []*corev1.Secret
}

// render builds an overlay with `kubectl kustomize` and strictly decodes
// every object.
func render(t *testing.T, bin, overlay string) *objects {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "kustomize", filepath.Join("overlays", overlay))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl kustomize overlays/%s: %v: %s", overlay, err, stderr.String())
	}
	o := &objects{
		deployments:  map[string]*appsv1.Deployment{},
		daemonSets:   map[string]*appsv1.DaemonSet{},
		statefulSets: map[string]*appsv1.StatefulSet{},
		services:     map[string]*corev1.Service{},
	}
	for i, d := range bytes.Split(stdout.Bytes(), []byte("\n---\n")) {
		if len(bytes.TrimSpace(d)) == 0 {
			continue
		}
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(d, &meta); err != nil {
			t.Fatalf("%s object %d: %v", overlay, i, err)
		}
		obj, err := newObject(meta.Kind)
		if err != nil {
			t.Fatalf("%s object %d: %v", overlay, i, err)
		}
		if err := yaml.UnmarshalStrict(d, obj); err != nil {
			t.Fatalf("%s object %d (%s): %v", overlay, i, meta.Kind, err)
		}
		if meta.Kind != "Namespace" && meta.Metadata.Namespace != namespace {
			t.Errorf("%s object %d (%s): namespace %q, want %q", overlay, i, meta.Kind, meta.Metadata.Namespace, namespace)
		}
		switch x := obj.(type) {
		case *appsv1.Deployment:
			o.deployments[x.Name] = x
		case *appsv1.DaemonSet:
			o.daemonSets[x.Name] = x
		case *appsv1.StatefulSet:
			o.statefulSets[x.Name] = x
		case *corev1.Service:
			o.services[x.Name] = x
		case *autoscalingv2.HorizontalPodAutoscaler:
			o.hpas = append(o.hpas, x)
		case *policyv1.PodDisruptionBudget:
			o.pdbs = append(o.pdbs, x)
		case *networkingv1.NetworkPolicy:
			o.policies = append(o.policies, x)
		case *corev1.Secret:
			o.secrets = append(o.secrets, x)
		}
	}
	return o
}

// pod is one workload's pod template.
type pod struct {
	kind, name string
	labels     map[string]string
	spec       *corev1.PodSpec
}

func (o *objects) pods() []pod {
	var out []pod
	for _, d := range o.deployments {
		out = append(out, pod{"Deployment", d.Name, d.Spec.Template.Labels, &d.Spec.Template.Spec})
	}
	for _, d := range o.daemonSets {
		out = append(out, pod{"DaemonSet", d.Name, d.Spec.Template.Labels, &d.Spec.Template.Spec})
	}
	for _, s := range o.statefulSets {
		out = append(out, pod{"StatefulSet", s.Name, s.Spec.Template.Labels, &s.Spec.Template.Spec})
	}
	slices.SortFunc(out, func(a, b pod) int { return strings.Compare(a.name, b.name) })
	return out
}

func TestOverlays(t *testing.T) {
	bin := kubectl(t)
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			o := render(t, bin, overlay)
			var pods []pod
			var names []string
			for _, p := range o.pods() {
				checkImages(t, overlay, p)
				if p.name == "postgres" {
					checkPostgres(t, overlay, o, p)
					continue
				}
				pods = append(pods, p)
				names = append(names, p.kind+"/"+p.name)
				checkPod(t, overlay, p)
			}
			wantSandboxd := map[string]string{"host-docker": "DaemonSet", "example": "DaemonSet", "dind": "StatefulSet"}[overlay]
			if !slices.Equal(names, []string{"Deployment/agentd", wantSandboxd + "/sandboxd"}) {
				t.Fatalf("workloads %v, want Deployment/agentd and %s/sandboxd", names, wantSandboxd)
			}
			checkAgentd(t, o)
			checkSandboxdService(t, o)
			checkNetworkPolicies(t, o, pods)
			checkNoPprof(t, o)
			if overlay != "example" && len(o.secrets) > 0 {
				t.Errorf("overlays/%s ships a Secret: only overlays/example may (placeholders)", overlay)
			}
		})
	}
}

// checkPod: hardened containers, no host namespaces, no SA token, a
// graceful drain.
func checkPod(t *testing.T, overlay string, p pod) {
	t.Helper()
	ps := p.spec
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		t.Errorf("%s: host namespaces", p.name)
	}
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Errorf("%s/%s: automountServiceAccountToken must be false (no daemon talks to the Kubernetes API)", overlay, p.name)
	}
	for _, v := range ps.Volumes {
		if v.HostPath == nil {
			continue
		}
		if overlay == "dind" || p.name != "sandboxd" || v.HostPath.Path != "/var/run/docker.sock" {
			t.Errorf("%s/%s: hostPath %s is not allowed", overlay, p.name, v.HostPath.Path)
		}
	}
	usesSocket := slices.ContainsFunc(ps.Volumes, func(v corev1.Volume) bool { return v.HostPath != nil })
	if usesSocket && (ps.SecurityContext == nil || len(ps.SecurityContext.SupplementalGroups) == 0) {
		t.Errorf("%s/%s: the Docker socket is reached by its group: set supplementalGroups", overlay, p.name)
	}
	for _, c := range ps.Containers {
		where := overlay + "/" + p.name + "/" + c.Name
		if c.Name == "dind" {
			// The Docker-in-Docker sidecar must be privileged to run an
			// engine; it is the only exception and only in that overlay.
			if overlay != "dind" {
				t.Errorf("%s: dind sidecar outside the dind overlay", where)
			}
			checkDind(t, where, ps, c)
			continue
		}
		if !slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--token-file=") }) {
			t.Errorf("%s: the daemon must require a bearer token (--token-file)", where)
		}
		if c.ReadinessProbe == nil || c.ReadinessProbe.GRPC == nil || c.LivenessProbe == nil || c.LivenessProbe.GRPC == nil {
			t.Errorf("%s: wants native gRPC readiness and liveness probes", where)
		}
		if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
			t.Errorf("%s: no memory limit", where)
		}
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Privileged != nil && *sc.Privileged || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
			len(sc.Capabilities.Add) > 0 || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: security context must drop ALL, add nothing, forbid escalation and use a read-only root", where)
		}
		if !nonRoot(ps.SecurityContext, sc) {
			t.Errorf("%s: must run as a non-root uid (runAsNonRoot and runAsUser != 0)", where)
		}
		// Drain: a preStop pause while the endpoint leaves the Services,
		// then SIGTERM and shutdown_grace, all inside the grace period.
		pre := 0
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds <= 0 {
			t.Errorf("%s: wants a preStop sleep (the image has no shell)", where)
		} else {
			pre = int(c.Lifecycle.PreStop.Sleep.Seconds)
		}
		if g := ps.TerminationGracePeriodSeconds; g == nil || int(*g) <= pre+shutdownGrace {
			t.Errorf("%s: terminationGracePeriodSeconds must exceed preStop (%ds) + shutdown grace (%ds)", where, pre, shutdownGrace)
		}
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--shutdown-grace="); ok && v != strconv.Itoa(shutdownGrace)+"s" {
				t.Errorf("%s: %s, the drain budget assumes %ds", where, a, shutdownGrace)
			}
		}
	}
}

// checkImages: every image names a version tag (or a digest), never
// latest or no tag, with an explicit pull policy that uses a node's copy:
// a node without a registry runs preloaded images, and a moving tag is no
// version.
func checkImages(t *testing.T, overlay string, p pod) {
	t.Helper()
	for _, c := range slices.Concat(p.spec.InitContainers, p.spec.Containers) {
		where := overlay + "/" + p.name + "/" + c.Name
		tag := ""
		if i := strings.LastIndex(c.Image, ":"); i > strings.LastIndex(c.Image, "/") {
			tag = c.Image[i+1:]
		}
		if !strings.Contains(c.Image, "@sha256:") && (tag == "" || tag == "latest") {
			t.Errorf("%s: image %q: want a version tag or a digest", where, c.Image)
		}
		if c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s: imagePullPolicy %q, want IfNotPresent", where, c.ImagePullPolicy)
		}
	}
}

// checkPostgres: only the example overlay ships PostgreSQL, on a volume
// claim, reachable by agentd only, and agentd waits for it.
func checkPostgres(t *testing.T, overlay string, o *objects, p pod) {
	t.Helper()
	if overlay != "example" {
		t.Errorf("%s: only overlays/example ships PostgreSQL", overlay)
		return
	}
	ss := o.statefulSets["postgres"]
	if ss == nil || len(ss.Spec.VolumeClaimTemplates) == 0 {
		t.Fatal("example: PostgreSQL wants a StatefulSet with a volume claim")
	}
	if !nonRoot(p.spec.SecurityContext, p.spec.Containers[0].SecurityContext) || ptrOr(p.spec.AutomountServiceAccountToken, true) {
		t.Error("example/postgres: wants a non-root uid and no service-account token")
	}
	d := o.deployments["agentd"]
	if !slices.ContainsFunc(d.Spec.Template.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == "wait-for-postgres" }) {
		t.Error("example: agentd wants an init container that waits for PostgreSQL")
	}
	admitted := false
	for _, np := range o.policies {
		if !selects(np.Spec.PodSelector.MatchLabels, p.labels) || len(np.Spec.PodSelector.MatchLabels) == 0 {
			continue
		}
		for _, r := range np.Spec.Ingress {
			for _, f := range r.From {
				if f.PodSelector == nil || f.NamespaceSelector != nil || f.IPBlock != nil || f.PodSelector.MatchLabels["app.kubernetes.io/name"] != "agentd" {
					t.Errorf("NetworkPolicy %s: PostgreSQL admits %+v, want agentd pods only", np.Name, f)
				}
				admitted = true
			}
			if len(r.From) == 0 {
				t.Errorf("NetworkPolicy %s: PostgreSQL open to every source", np.Name)
			}
		}
	}
	if !admitted {
		t.Error("example: no NetworkPolicy lets agentd reach PostgreSQL")
	}
}

// nonRoot reports whether a container runs as a non-root uid, with the
// container's settings taking precedence over the pod's.
func nonRoot(psc *corev1.PodSecurityContext, sc *corev1.SecurityContext) bool {
	var nr *bool
	var uid *int64
	if psc != nil {
		nr, uid = psc.RunAsNonRoot, psc.RunAsUser
	}
	if sc != nil && sc.RunAsNonRoot != nil {
		nr = sc.RunAsNonRoot
	}
	if sc != nil && sc.RunAsUser != nil {
		uid = sc.RunAsUser
	}
	return nr != nil && *nr && uid != nil && *uid != 0
}

// checkAgentd: replicas, HPA, PDB, the DSN from a Secret, workers by DNS.
func checkAgentd(t *testing.T, o *objects) {
	t.Helper()
	d := o.deployments["agentd"]
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("agentd: replicas %d, want >= 2", ptrOr(d.Spec.Replicas, 0))
	}
	var hpa *autoscalingv2.HorizontalPodAutoscaler
	for _, h := range o.hpas {
		if h.Spec.ScaleTargetRef.Kind == "Deployment" && h.Spec.ScaleTargetRef.Name == "agentd" {
			hpa = h
		}
	}
	if hpa == nil {
		t.Error("agentd: no HorizontalPodAutoscaler")
	} else if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 2 || hpa.Spec.MaxReplicas < *hpa.Spec.MinReplicas {
		t.Errorf("agentd HPA: min %d max %d, want 2 <= min <= max", ptrOr(hpa.Spec.MinReplicas, 0), hpa.Spec.MaxReplicas)
	}
	var pdb *policyv1.PodDisruptionBudget
	for _, p := range o.pdbs {
		if p.Spec.Selector != nil && len(p.Spec.Selector.MatchLabels) > 0 && selects(p.Spec.Selector.MatchLabels, d.Spec.Template.Labels) && len(p.Spec.Selector.MatchExpressions) == 0 {
			pdb = p
		}
	}
	if pdb == nil {
		t.Error("agentd: no PodDisruptionBudget selects its pods")
	} else if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 {
		t.Errorf("agentd PDB: minAvailable %v, want >= 1", pdb.Spec.MinAvailable)
	}
	c := d.Spec.Template.Spec.Containers[0]
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "AGENTD_POSTGRES_DSN" })
	if i < 0 || c.Env[i].Value != "" || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil ||
		ptrOr(c.Env[i].ValueFrom.SecretKeyRef.Optional, false) {
		t.Error("agentd: AGENTD_POSTGRES_DSN must come from a required Secret key (secretKeyRef)")
	}
	if slices.ContainsFunc(c.Args, func(a string) bool {
		return strings.HasPrefix(a, "--postgres-dsn") || strings.HasPrefix(a, "--sqlite-path")
	}) {
		t.Error("agentd: the DSN belongs in the Secret, and replicas cannot share SQLite")
	}
	port := servicePort(o.services["sandboxd"], "grpc")
	want := fmt.Sprintf("--sandboxd=dns:///sandboxd.%s.svc.cluster.local:%d", namespace, port)
	if !slices.Contains(c.Args, want) {
		t.Errorf("agentd args %q, want %s", c.Args, want)
	}
}

// checkSandboxdService: headless, ready pods only, selecting the workers.
func checkSandboxdService(t *testing.T, o *objects) {
	t.Helper()
	s := o.services["sandboxd"]
	if s == nil {
		t.Fatal("no sandboxd Service")
	}
	if s.Spec.ClusterIP != corev1.ClusterIPNone || s.Spec.PublishNotReadyAddresses {
		t.Errorf("sandboxd Service: clusterIP %q publishNotReadyAddresses %v, want headless with ready pods only (a draining worker leaves DNS)", s.Spec.ClusterIP, s.Spec.PublishNotReadyAddresses)
	}
	for _, p := range o.pods() {
		if p.name == "sandboxd" && !selects(s.Spec.Selector, p.labels) {
			t.Errorf("sandboxd Service selector %v misses the worker pods %v", s.Spec.Selector, p.labels)
		}
	}
	if ss := o.statefulSets["sandboxd"]; ss != nil && ss.Spec.ServiceName != "sandboxd" {
		t.Errorf("sandboxd StatefulSet: serviceName %q, want sandboxd", ss.Spec.ServiceName)
	}
}

func servicePort(s *corev1.Service, name string) int32 {
	if s != nil {
		for _, p := range s.Spec.Ports {
			if p.Name == name {
				return p.Port
			}
		}
	}
	return 0
}

// selects reports whether a matchLabels selector selects labels (an empty
// selector selects everything).
func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// checkNetworkPolicies: a default deny, and every rule that opens
// sandboxd's gRPC port admits only agentd pods of this namespace.
func checkNetworkPolicies(t *testing.T, o *objects, pods []pod) {
	t.Helper()
	if !slices.ContainsFunc(o.policies, func(p *networkingv1.NetworkPolicy) bool {
		return len(p.Spec.PodSelector.MatchLabels) == 0 && len(p.Spec.PodSelector.MatchExpressions) == 0 &&
			slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) && len(p.Spec.Ingress) == 0
	}) {
		t.Error("no default-deny ingress NetworkPolicy")
	}
	var agentdLabels, sandboxdLabels map[string]string
	for _, p := range pods {
		switch p.name {
		case "agentd":
			agentdLabels = p.labels
		case "sandboxd":
			sandboxdLabels = p.labels
		}
	}
	grpc := servicePort(o.services["sandboxd"], "grpc")
	opened := false
	for _, np := range o.policies {
		if len(np.Spec.PodSelector.MatchExpressions) > 0 {
			t.Errorf("NetworkPolicy %s: matchExpressions are not checked here; use matchLabels", np.Name)
		}
		if !selects(np.Spec.PodSelector.MatchLabels, sandboxdLabels) {
			continue
		}
		for _, r := range np.Spec.Ingress {
			if !opensPort(r.Ports, grpc) {
				continue
			}
			opened = true
			if len(r.From) == 0 {
				t.Errorf("NetworkPolicy %s: sandboxd port %d open to every source", np.Name, grpc)
			}
			for _, f := range r.From {
				if f.IPBlock != nil || f.NamespaceSelector != nil || f.PodSelector == nil || len(f.PodSelector.MatchLabels) == 0 ||
					len(f.PodSelector.MatchExpressions) > 0 || !selects(f.PodSelector.MatchLabels, agentdLabels) || selects(f.PodSelector.MatchLabels, sandboxdLabels) {
					t.Errorf("NetworkPolicy %s: sandboxd port %d admits %+v, want agentd pods only", np.Name, grpc, f)
				}
			}
		}
	}
	if !opened {
		t.Errorf("no NetworkPolicy lets agentd reach sandboxd port %d", grpc)
	}
}

// opensPort reports whether a rule's port list admits TCP port p (a
// named port counts when it is sandboxd's "grpc").
func opensPort(ports []networkingv1.NetworkPolicyPort, p int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, np := range ports {
		if np.Protocol != nil && *np.Protocol != corev1.ProtocolTCP {
			continue
		}
		if np.Port == nil || np.Port.StrVal == "grpc" {
			return true
		}
		if np.Port.StrVal != "" {
			continue
		}
		lo, hi := np.Port.IntVal, np.Port.IntVal
		if np.EndPort != nil {
			hi = *np.EndPort
		}
		if lo <= p && p <= hi {
			return true
		}
	}
	return false
}

// checkNoPprof: pprof is never a container or Service port, and a
// --pprof-addr, if any, stays on loopback.
func checkNoPprof(t *testing.T, o *objects) {
	t.Helper()
	const pprofDefault = 6060
	isPprof := func(name string, port int32) bool {
		n := strings.ToLower(name)
		return strings.Contains(n, "pprof") || strings.Contains(n, "debug") || port == pprofDefault
	}
	for _, s := range o.services {
		for _, p := range s.Spec.Ports {
			if isPprof(p.Name, p.Port) || isPprof(p.TargetPort.StrVal, p.TargetPort.IntVal) {
				t.Errorf("Service %s: port %s/%d looks like pprof", s.Name, p.Name, p.Port)
			}
		}
	}
	for _, p := range o.pods() {
		for _, c := range slices.Concat(p.spec.InitContainers, p.spec.Containers) {
			for _, cp := range c.Ports {
				if isPprof(cp.Name, cp.ContainerPort) {
					t.Errorf("%s/%s: container port %s/%d looks like pprof", p.name, c.Name, cp.Name, cp.ContainerPort)
				}
			}
			for i, a := range c.Args {
				v, ok := strings.CutPrefix(a, "--pprof-addr=")
				if !ok && a == "--pprof-addr" && i+1 < len(c.Args) {
					v, ok = c.Args[i+1], true
				}
				if !ok || v == "" {
					continue
				}
				host, _, err := net.SplitHostPort(v)
				if ip := net.ParseIP(host); err != nil || host != "" && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
					t.Errorf("%s/%s: %s: pprof must stay on loopback", p.name, c.Name, a)
				}
			}
		}
	}
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// checkDind: the Docker-in-Docker sidecar keeps the engine's data on a
// volume (overlay2 on the container's own overlay fails), shares its
// socket with sandboxd through an emptyDir (never a host path), is Ready
// only when its engine is, and outlives sandboxd's drain.
func checkDind(t *testing.T, where string, ps *corev1.PodSpec, c corev1.Container) {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range ps.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]string{} // mount path -> volume
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	if _, ok := mounts["/var/lib/docker"]; !ok {
		t.Errorf("%s: /var/lib/docker must be a volume (a claim or an emptyDir), not the container's overlay", where)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	sock := env["PLUMB_DIND_SOCKET"]
	vol, ok := mounts[filepath.Dir(sock)]
	if sock == "" || !ok || vols[vol].EmptyDir == nil {
		t.Errorf("%s: PLUMB_DIND_SOCKET %q must be in an emptyDir the sidecar mounts", where, sock)
	}
	for _, name := range []string{"PLUMB_SANDBOX_IMAGES", "PLUMB_DIND_PULL"} {
		if _, ok := env[name]; !ok {
			t.Errorf("%s: %s unset (a parameter of the overlay: sandbox-images.yaml)", where, name)
		}
	}
	sandboxdSees := false
	for _, other := range ps.Containers {
		if other.Name != "sandboxd" {
			continue
		}
		for _, e := range other.Env {
			if e.Name == "DOCKER_HOST" && e.Value == "unix://"+sock {
				sandboxdSees = true
			}
		}
		for _, m := range other.VolumeMounts {
			if m.Name == vol && m.MountPath != filepath.Dir(sock) {
				sandboxdSees = false
			}
		}
	}
	if !sandboxdSees {
		t.Errorf("%s: sandboxd's DOCKER_HOST must be unix://%s, in the same emptyDir at the same path", where, sock)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.Exec == nil {
		t.Errorf("%s: wants an exec readiness probe (the engine answers and holds the sandbox images)", where)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
		t.Errorf("%s: wants a preStop that waits for sandboxd to exit (its drain needs the engine)", where)
	}
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("%s: an engine needs a privileged container", where)
	}
}
