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

// TestAllowListPatterns: an entry ending in "*" allows every name with its
// prefix, AllowsAny tells whether a prefix's tools may be allowed at all,
// and malformed patterns are rejected.
func TestAllowListPatterns(t *testing.T) {
	cases := []struct {
		name    string
		entries []string
		allows  map[string]bool
		any     map[string]bool
		bad     bool
	}{
		{
			name:    "server pattern",
			entries: []string{"@read", "mcp__gh__*"},
			allows:  map[string]bool{"mcp__gh__issues": true, "mcp__ghx__a": false, "ls": true, "execute": false},
			any:     map[string]bool{"mcp__gh__": true, "mcp__": true, "mcp__db__": false},
		},
		{
			name:    "one tool",
			entries: []string{"mcp__db__query"},
			allows:  map[string]bool{"mcp__db__query": true, "mcp__db__drop": false},
			any:     map[string]bool{"mcp__db__": true, "mcp__gh__": false},
		},
		{
			name:    "all",
			entries: []string{"@all"},
			allows:  map[string]bool{"mcp__db__query": true},
			any:     map[string]bool{"mcp__db__": true},
		},
		{
			name:    "none",
			entries: []string{"@read"},
			allows:  map[string]bool{"mcp__db__query": false},
			any:     map[string]bool{"mcp__": false},
		},
		{name: "bare star", entries: []string{"*"}, bad: true},
		{name: "inner star", entries: []string{"mcp__*__x*"}, bad: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseAllowList(tc.entries)
			if tc.bad {
				if err == nil {
					t.Fatalf("%v accepted", tc.entries)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for n, want := range tc.allows {
				if a.Allows(n) != want {
					t.Errorf("Allows(%s) = %v", n, !want)
				}
			}
			for p, want := range tc.any {
				if a.AllowsAny(p) != want {
					t.Errorf("AllowsAny(%s) = %v", p, !want)
				}
			}
		})
	}
	a, _ := ParseAllowList([]string{"mcp__gh__*", "mcp__db__query"})
	b, _ := ParseAllowList([]string{"mcp__gh__issues", "mcp__db__*", "mcp__gh__pr_*"})
	i := a.Intersect(b)
	for n, want := range map[string]bool{"mcp__gh__issues": true, "mcp__gh__pr_list": true, "mcp__gh__repos": false, "mcp__db__query": true, "mcp__db__drop": false} {
		if i.Allows(n) != want {
			t.Errorf("intersection allows %s = %v", n, !want)
		}
	}
	if !IsPattern("mcp__gh__*") || IsPattern("*") || IsPattern("ls") {
		t.Error("IsPattern")
	}
}

// TestGroupsByConfigVersion: a version 1 config's @all and @exec keep the
// tools they had before python existed; python joins them from version
// 2 and is always allowed by name.
func TestGroupsByConfigVersion(t *testing.T) {
	cases := []struct {
		entries []string
		version int
		python  bool
	}{
		{[]string{GroupAll}, Version1, false},
		{[]string{GroupExec}, Version1, false},
		{[]string{GroupAll, "python"}, Version1, true},
		{[]string{GroupAll}, 2, true},
		{[]string{GroupExec}, 2, true},
		{[]string{GroupAll}, 0, true},
	}
	for _, c := range cases {
		al, err := ParseAllowListAt(c.entries, c.version)
		if err != nil {
			t.Fatal(err)
		}
		if got := al.Allows("python"); got != c.python {
			t.Errorf("%v at version %d allows python: %v, want %v", c.entries, c.version, got, c.python)
		}
		if !al.Allows("execute") {
			t.Errorf("%v at version %d lacks execute", c.entries, c.version)
		}
	}
	v1, _ := ParseAllowListAt([]string{GroupAll}, Version1)
	if cur := AllowAll(); !cur.Intersect(v1).Allows("execute") || cur.Intersect(v1).Allows("python") {
		t.Error("intersecting a version 1 @all with the current one keeps python")
	}
}
