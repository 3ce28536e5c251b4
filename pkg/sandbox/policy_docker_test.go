package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"go.uber.org/zap/zaptest"
)

// TestNewManagerRefusesConfigOverPolicy: templates or defaults that break
// the policy against the real host (its memory, its runtimes, the image
// allow-list) keep the manager from starting, naming the template and
// the limit.
func TestNewManagerRefusesConfigOverPolicy(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard
	defer cancel()
	info, err := e.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		policy    sandbox.Policy
		templates map[string]sandbox.Template
		want      string
	}{
		{"memory over the host", sandbox.Policy{}, map[string]sandbox.Template{"huge": {MemoryBytes: info.Info.MemTotal + 1<<30}}, `template "huge" breaks the worker policy: memory`},
		{"cpus over the host", sandbox.Policy{}, map[string]sandbox.Template{"wide": {CPUs: float64(info.Info.NCPU) + 1}}, "max_cpus"},
		{"unknown runtime", sandbox.Policy{}, map[string]sandbox.Template{"rt": {Runtime: "plumb-no-such-runtime"}}, `runtime "plumb-no-such-runtime" is not available`},
		{"image not allowed", sandbox.Policy{AllowedImages: []string{"python:*"}}, nil, "defaults breaks the worker policy: image"},
		{"malformed policy", sandbox.Policy{MaxPids: -1}, nil, "max_pids"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := e.cfg
			cfg.Policy, cfg.Templates = tt.policy, tt.templates
			m, err := sandbox.NewManager(ctx, e.cli, cfg, sandbox.WithLogger(zaptest.NewLogger(t)))
			if err == nil {
				m.Close()
				t.Fatal("manager started")
			}
			var ce *sandbox.ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one-line ConfigError mentioning %q", err, tt.want)
			}
		})
	}
}

// TestCreateImagePolicy: images are allowed by name pattern or by digest
// (the image's ID); any other image is refused before anything is created.
func TestCreateImagePolicy(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	img, err := e.cli.ImageInspect(ctx, e.image)
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.Policy = sandbox.Policy{AllowedImages: []string{img.ID, "allowed-by-name:*"}}
	m := e.manager(t)
	e.create(t, m, sandbox.CreateSpec{}) // the test image, allowed by its ID
	_, err = m.Create(ctx, sandbox.CreateSpec{Overrides: sandbox.Template{Image: "plumb-not-allowed:1"}})
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Code != sandbox.CodePolicy || se.Limit != "allowed_images" || !strings.Contains(err.Error(), "plumb-not-allowed:1") {
		t.Fatalf("create with an image not allowed: %v, want %s allowed_images", err, sandbox.CodePolicy)
	}
	if n, _ := m.Usage(); n != 1 {
		t.Fatalf("%d sandboxes, want 1", n)
	}
}
