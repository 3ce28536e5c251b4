package agentd

import (
	"testing"

	"github.com/plumbhq/plumb/pkg/agent/profile"
)

// TestDemoOnlyWithoutAModel: the demo model is chosen only when no model
// is configured at all, and then gates execute unless the config does.
func TestDemoOnlyWithoutAModel(t *testing.T) {
	env := func(kv map[string]string) Env { return func(k string) string { return kv[k] } }
	for _, tc := range []struct {
		name string
		cfg  Config
		env  map[string]string
		want bool
	}{
		{"nothing configured", Config{}, nil, true},
		{"a models section", Config{Models: map[string]ModelConfig{"m": {BaseURL: "http://x/v1"}}}, nil, false},
		{"OPENAI_BASE_URL", Config{}, map[string]string{"OPENAI_BASE_URL": "http://x/v1"}, false},
		{"OPENAI_API_KEY", Config{}, map[string]string{"OPENAI_API_KEY": "k"}, false},
		{"only OPENAI_MODEL", Config{}, map[string]string{"OPENAI_MODEL": "m"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := demoApplies(&tc.cfg, env(tc.env)); got != tc.want {
				t.Fatalf("demoApplies = %v, want %v", got, tc.want)
			}
		})
	}

	var cfg Config
	useDemo(&cfg, "http://127.0.0.1:1/v1")
	if cfg.Defaults.Model != DemoModelKey || cfg.Models[DemoModelKey].BaseURL != "http://127.0.0.1:1/v1" || len(cfg.Models) != 1 {
		t.Fatalf("models %+v, default %q", cfg.Models, cfg.Defaults.Model)
	}
	gate, ok := (*cfg.Agents[profile.Main].InterruptOn)["execute"]
	if !ok || gate.Off {
		t.Fatalf("execute is not gated: %+v", cfg.Agents[profile.Main])
	}

	own := map[string]InterruptOn{"write_file": {}}
	cfg = Config{Agents: map[string]ProfileConfig{profile.Main: {InterruptOn: &own, Description: "mine"}}}
	useDemo(&cfg, "http://127.0.0.1:1/v1")
	if m := cfg.Agents[profile.Main]; m.Description != "mine" || len(*m.InterruptOn) != 1 {
		t.Fatalf("the config's own gates were changed: %+v", m)
	}
}
