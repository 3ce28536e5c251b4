package agentd

import (
	"fmt"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// TestVolumeConfig: sandbox.template.volumes is checked when agentd starts.
func TestVolumeConfig(t *testing.T) {
	for name, tc := range map[string]struct{ mounts, err string }{
		"ok":          {mounts: `{name: data, mount_path: /data}, {name: vol-w1-abc, mount_path: /ref, read_only: true}`},
		"no name":     {mounts: `{mount_path: /data}`, err: "volumes[0].name"},
		"twice":       {mounts: `{name: data, mount_path: /a}, {name: data, mount_path: /b}`, err: "volumes[1].name"},
		"relative":    {mounts: `{name: data, mount_path: data}`, err: "volumes[0].mount_path"},
		"dot dot":     {mounts: `{name: data, mount_path: /data/../etc}`, err: "volumes[0].mount_path"},
		"root":        {mounts: `{name: data, mount_path: /}`, err: "volumes[0].mount_path"},
		"unknown key": {mounts: `{name: data, mount_path: /data, size: 1}`, err: "size"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := Parse([]byte(fmt.Sprintf("sandbox: {template: {volumes: [%s]}}\n", tc.mounts)))
			if err == nil {
				err = validate(cfg)
			}
			if tc.err == "" && err != nil && !strings.Contains(err.Error(), "defaults.model") || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

// TestThreadBoxesShareAVolume: two threads of one tenant, whose agentd
// template mounts the tenant's volume, see each other's files there; their
// workspaces stay their own.
func TestThreadBoxesShareAVolume(t *testing.T) {
	w := sandboxsvctest.StartWorker(t, sandbox.Config{})
	if _, err := w.Manager.CreateVolume(t.Context(), "acme", "shared", 8<<20); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, nil, fmt.Sprintf(`sandbox:
  address: %s
  template:
    memory: 256Mi
    ttl: 30m
    volumes: [{name: shared, mount_path: /shared}]
backends: {default: sandbox}
`, w.Addr))
	s.tenant = "acme"
	s.model.Script("main", modeltest.Calls(mcall("e1", "execute", `{"command":"echo from-one > /shared/note; echo mine > /workspace/own; echo ok"}`)), modeltest.Text("ok"))
	_, results := s.mustRun(input("", "Write the note."))
	wantResult(t, results, "e1", false, "ok")
	s.model.Script("main", modeltest.Calls(mcall("e2", "execute", `{"command":"cat /shared/note; ls /workspace/own 2>/dev/null || echo no-own"}`)), modeltest.Text("ok"))
	_, results = s.mustRun(input("", "Read the note."))
	wantResult(t, results, "e2", false, "from-one")
	wantResult(t, results, "e2", false, "no-own")
}
