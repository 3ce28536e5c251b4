// Package k8s holds plumb's Kubernetes manifests (kustomize base and
// overlays). Its test decodes every manifest strictly into the real
// Kubernetes API types, so a typo in a field name or a wrong type fails CI
// even though no cluster runs here, and checks plumb's own rules: probes,
// limits and hardened security contexts on every container, and the Docker
// socket only where the host-docker profile needs it.
package k8s

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

// kustomization is the part of kustomize's config the test checks.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
	} `json:"labels,omitempty"`
}

// newObject returns an empty typed object for a manifest kind.
func newObject(kind string) (any, error) {
	switch kind {
	case "Namespace":
		return &corev1.Namespace{}, nil
	case "ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "Service":
		return &corev1.Service{}, nil
	case "PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}, nil
	case "Deployment":
		return &appsv1.Deployment{}, nil
	case "DaemonSet":
		return &appsv1.DaemonSet{}, nil
	case "StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, nil
	case "NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	}
	return nil, fmt.Errorf("unexpected kind %q", kind)
}

// docs splits a multi-document YAML file.
func docs(b []byte) [][]byte {
	var out [][]byte
	for _, d := range bytes.Split(b, []byte("\n---\n")) {
		if len(bytes.TrimSpace(d)) > 0 {
			out = append(out, d)
		}
	}
	return out
}

type manifest struct {
	file string
	obj  any
}

// load reads a kustomization directory recursively, like kustomize build
// does, and strictly decodes every resource.
func load(t *testing.T, dir string, seen map[string]bool) []manifest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(raw, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Fatalf("%s: not a Kustomization", dir)
	}
	var out []manifest
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: resource %s: %v", dir, r, err)
		}
		if st.IsDir() {
			out = append(out, load(t, p, seen)...)
			continue
		}
		seen[p] = true
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range docs(b) {
			var meta struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal(d, &meta); err != nil {
				t.Fatalf("%s doc %d: %v", p, i, err)
			}
			obj, err := newObject(meta.Kind)
			if err != nil {
				t.Fatalf("%s doc %d: %v", p, i, err)
			}
			if err := yaml.UnmarshalStrict(d, obj); err != nil {
				t.Fatalf("%s doc %d (%s): %v", p, i, meta.Kind, err)
			}
			out = append(out, manifest{file: p, obj: obj})
		}
	}
	return out
}

func podSpec(obj any) (string, *corev1.PodSpec) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return o.Name, &o.Spec.Template.Spec
	case *appsv1.DaemonSet:
		return o.Name, &o.Spec.Template.Spec
	case *appsv1.StatefulSet:
		return o.Name, &o.Spec.Template.Spec
	}
	return "", nil
}

func TestOverlays(t *testing.T) {
	seen := map[string]bool{}
	for _, overlay := range []string{"host-docker", "dind"} {
		t.Run(overlay, func(t *testing.T) {
			ms := load(t, filepath.Join("overlays", overlay), seen)
			workloads := map[string]bool{}
			for _, m := range ms {
				name, ps := podSpec(m.obj)
				if ps == nil {
					continue
				}
				workloads[name] = true
				checkPod(t, overlay, name, ps)
			}
			if !workloads["agentd"] || !workloads["sandboxd"] {
				t.Fatalf("workloads %v, want agentd and sandboxd", workloads)
			}
		})
	}
	// Every manifest file is used by some overlay.
	_ = filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".yaml") && filepath.Base(p) != "kustomization.yaml" && !seen[p] {
			t.Errorf("%s is not referenced by any kustomization", p)
		}
		return nil
	})
}

func checkPod(t *testing.T, overlay, workload string, ps *corev1.PodSpec) {
	t.Helper()
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		t.Errorf("%s: host namespaces", workload)
	}
	for _, v := range ps.Volumes {
		if v.HostPath == nil {
			continue
		}
		if !(overlay == "host-docker" && workload == "sandboxd" && v.HostPath.Path == "/var/run/docker.sock") {
			t.Errorf("%s/%s: hostPath %s is not allowed", overlay, workload, v.HostPath.Path)
		}
	}
	for _, c := range ps.Containers {
		where := overlay + "/" + workload + "/" + c.Name
		if c.Name == "dind" {
			// The Docker-in-Docker sidecar must be privileged to run an
			// engine; it is the only exception and only in that overlay.
			if overlay != "dind" {
				t.Errorf("%s: dind sidecar outside the dind overlay", where)
			}
			continue
		}
		if (c.Name == "agentd" || c.Name == "sandboxd") && !slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--token-file=") }) {
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
			sc.Privileged != nil && *sc.Privileged || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: security context must drop ALL, forbid escalation and use a read-only root", where)
		}
	}
}
