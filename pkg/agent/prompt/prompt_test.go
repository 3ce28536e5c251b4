package prompt

import (
	"strings"
	"testing"
	"time"
)

func TestCompose(t *testing.T) {
	date := time.Date(2026, 11, 22, 23, 30, 0, 0, time.FixedZone("x", -5*3600))
	in := Input{Tools: []string{"ls", "task", "write_todos"}, AgentPrompt: "Be brief.", Env: Env{WorkingDir: "/workspace", Sandbox: true, Shell: true, Date: date, Model: "m1"}}
	got := Compose(Config{}, in)
	parts := strings.Split(got, "\n\n")
	if !strings.HasPrefix(parts[0], "You are a capable agent") || !strings.HasPrefix(parts[1], "# Using tools") ||
		!strings.HasPrefix(parts[2], "# Task management") || !strings.HasPrefix(parts[3], "# Delegation") || parts[4] != "Be brief." {
		t.Fatalf("sections:\n%s", got)
	}
	env := parts[5]
	for _, want := range []string{"Working directory: /workspace", "Platform: linux sandbox", "Shell available: yes", "Today's date: 2026-11-23", "Model: m1"} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %q: %s", want, env)
		}
	}
	if Compose(Config{}, in) != got {
		t.Error("not byte-stable")
	}
	sub := Compose(Config{Sections: map[string]Override{ToolUsage: {Disabled: true}, Identity: {Text: "CUSTOM"}}}, Input{Subagent: true, Tools: []string{"ls"}})
	if !strings.HasPrefix(sub, "CUSTOM\n\n<env>") || strings.Contains(sub, "Task management") || !strings.Contains(sub, "Platform: virtual filesystem") {
		t.Errorf("overrides:\n%s", sub)
	}
	if !strings.Contains(Compose(Config{}, Input{Subagent: true}), "your final message is your whole report") {
		t.Error("subagent identity")
	}
	if err := (Config{Sections: map[string]Override{"nope": {}}}).Validate(); err == nil {
		t.Error("unknown section validated")
	}
}

func TestMemorySection(t *testing.T) {
	if MemorySection("", nil) != "" || MemorySection("Notes.", nil) != "" {
		t.Error("empty memory section")
	}
	files := []MemoryFile{{Path: "/m/A.md", Content: "prefers tabs\n"}, {Path: "/m/B.md", Unavailable: true}}
	s := MemorySection("", files)
	if !strings.HasPrefix(s, "# Memory\n") || !strings.Contains(s, "<agent_memory path=\"/m/A.md\">\nprefers tabs\n</agent_memory>") ||
		!strings.HasSuffix(s, "<agent_memory path=\"/m/B.md\">\n(this memory file is unavailable right now)\n</agent_memory>") {
		t.Errorf("%s", s)
	}
	if got := MemorySection("  Notes.\n", files); !strings.HasPrefix(got, "Notes.\n\n<agent_memory path=\"/m/A.md\">") || strings.Contains(got, "# Memory") {
		t.Errorf("replaced guidance: %s", got)
	}
}
