package agentd

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
)

// TestSpecExampleLoadsAndBuilds proves the complete example of agent.md
// §5.6 is accepted as written and assembles into a runtime.
func TestSpecExampleLoadsAndBuilds(t *testing.T) {
	cfg, err := Load("testdata/spec-example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sandbox.Template.Memory != 1<<30 || cfg.Models["smart"].Retry.MaxAttempts != 4 ||
		(*cfg.Agents["main"].InterruptOn)["delete"].Off || len((*cfg.Agents["main"].InterruptOn)["execute"].Allowed) != 4 ||
		cfg.Prompt.Sections["identity"].Disabled || len(*cfg.Subagents["researcher"].InterruptOn) != 0 {
		t.Fatalf("decoded config is off: %+v", cfg)
	}
	cfg.Storage.SQLitePath = filepath.Join(t.TempDir(), "agentd.db")
	env := map[string]string{"OPENAI_API_KEY": "sk-test", "VLLM_API_KEY": "x"}
	a, err := Build(context.Background(), cfg, Options{Env: func(k string) string { return env[k] }, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	names := map[string]bool{}
	for _, info := range a.Runtime.ListAgents() {
		names[info.Name] = true
	}
	for _, want := range []string{"main", "plan", "explore", "researcher", "general-purpose"} {
		if !names[want] {
			t.Errorf("ListAgents lacks %s: %v", want, names)
		}
	}
}

func TestBadConfigsNameTheirPath(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"unknown key", "server:\n  grpc_adr: x\n", "grpc_adr"},
		{"bad version", "version: 3\n", "version 3"},
		{"bad duration", "limits:\n  run_timeout: soon\n", "line 2: cannot unmarshal !!str `soon`"},
		{"bad size", "sandbox:\n  template:\n    memory: lots\n", `size "lots"`},
		{"unknown default model", "models:\n  a: {model: m}\n  b: {model: n}\ndefaults: {model: c}\n", "defaults.model"},
		{"unknown profile model", "agents:\n  main: {model: nope}\n", "agents.main.model"},
		{"route without slash", "backends:\n  routes:\n    /memories: {type: state}\n", "backends.routes./memories"},
		{"route type", "backends:\n  routes:\n    /m/: {type: disk}\n", "backends.routes./m/.type"},
		{"store without namespace", "backends:\n  routes:\n    /m/: {type: store}\n", "namespace"},
		{"sandbox default without address", "backends: {default: sandbox}\n", "sandbox.address"},
		{"fraction", "middleware:\n  summarization: {trigger_fraction: 1.5}\n", "trigger_fraction"},
		{"decision", "agents:\n  main:\n    interrupt_on:\n      execute: {allowed: [maybe]}\n", "agents.main.interrupt_on.execute.allowed"},
		{"negative duration", "limits: {tool_timeout: -1s}\n", "limits.tool_timeout"},
		{"negative replay cap", "server: {replay_max_events: -1}\n", "server.replay_max_events"},
		{"unknown prompt section", "prompt:\n  sections: {preamble: false}\n", "preamble"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.yaml))
			if err == nil {
				cfg.Storage.SQLitePath = filepath.Join(t.TempDir(), "db")
				var a *Agentd
				a, err = Build(context.Background(), cfg, Options{Env: func(string) string { return "" }})
				if a != nil {
					a.Close()
				}
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to name %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
		})
	}
}

// The replay log caps of the server section (the bytes cap as a size).
func TestReplayCaps(t *testing.T) {
	cfg, err := Parse([]byte("server: {replay_max_events: 500, replay_max_bytes: 4Mi}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.ReplayMaxEvents != 500 || cfg.Server.ReplayMaxBytes != 4<<20 {
		t.Errorf("server %+v", cfg.Server)
	}
}

func TestParseQuantity(t *testing.T) {
	for in, want := range map[string]int64{"1Gi": 1 << 30, "512Mi": 512 << 20, "2G": 2e9, "1024": 1024, "1.5Gi": 3 << 29} {
		if got, err := ParseQuantity(in); err != nil || got != want {
			t.Errorf("ParseQuantity(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1Xi", "-1", "Gi"} {
		if _, err := ParseQuantity(bad); err == nil {
			t.Errorf("ParseQuantity(%q) accepted", bad)
		}
	}
}
