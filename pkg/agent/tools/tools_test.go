package tools

import (
	"context"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
)

func TestAllowList(t *testing.T) {
	a, err := ParseAllowList([]string{"@read", "task"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"ls": true, "grep": true, "task": true, "write_file": false, "execute": false} {
		if a.Allows(name) != want {
			t.Errorf("%s: %v", name, !want)
		}
	}
	if _, err := ParseAllowList([]string{"@everything"}); err == nil {
		t.Error("unknown group accepted")
	}
	b, _ := ParseAllowList([]string{"ls", "execute"})
	if i := a.Intersect(b); !i.Allows("ls") || i.Allows("execute") || i.Allows("task") {
		t.Error("intersect")
	}
	if i := AllowAll().Intersect(b); !i.Allows("execute") || i.Allows("grep") {
		t.Error("intersect with @all")
	}
	if f := AllowAll().Without("write_file"); f("write_file") || !f("ls") {
		t.Error("without")
	}
}

func TestPresets(t *testing.T) {
	cases := map[Preset][4]bool{ // read, write, exec, other
		PresetReadOnly: {true, false, false, true},
		PresetEdit:     {true, true, false, true},
		PresetExec:     {true, false, true, true},
		PresetFull:     {true, true, true, true},
	}
	for p, want := range cases {
		got := [4]bool{p.Allows("read_file"), p.Allows("edit_file"), p.Allows("execute"), p.Allows("echo")}
		if got != want {
			t.Errorf("%s: %v, want %v", p, got, want)
		}
	}
	if _, err := ParsePreset("admin"); err == nil {
		t.Error("unknown preset accepted")
	}
}

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	kit := NewTestKit()
	if err := r.RegisterGroup(TestKitGroup, kit.Tools()...); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(agent.Tool{Name: "echo", Func: func(context.Context, *agent.ToolRequest) (agent.ToolResult, error) { return agent.ToolResult{}, nil }}); err == nil {
		t.Error("duplicate accepted")
	}
	if got := r.Group(TestKitGroup); len(got) != 6 {
		t.Errorf("group %v", got)
	}
	if BigText(3, 8) != "line 1 x\nline 2 x\nline 3 x" {
		t.Errorf("big %q", BigText(3, 8))
	}
}
