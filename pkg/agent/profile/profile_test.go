package profile

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/tools"
)

var opts = Options{DefaultModel: "smart", Models: []string{"fast", "smart"},
	KnownTools: []string{"ls", "read_file", "glob", "grep", "write_file", "edit_file", "delete", "execute", "write_todos", "task", "echo"}}

func allowed(c *Context) []string {
	var out []string
	for _, n := range opts.KnownTools {
		if c.Allow(n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func TestNewSetErrors(t *testing.T) {
	cases := []struct {
		agents, subs map[string]Profile
		want         string
	}{
		{map[string]Profile{"main": {Model: "nope"}}, nil, "agents.main.model: unknown model"},
		{nil, map[string]Profile{"r": {}}, "subagents.r.description: required"},
		{map[string]Profile{"main": {Subagents: []string{"ghost"}}}, nil, `agents.main.subagents: unknown subagent "ghost"`},
		{map[string]Profile{"main": {Permissions: "root"}}, nil, "agents.main.permissions"},
		{map[string]Profile{"main": {Tools: []string{"@nope"}}}, nil, "agents.main.tools"},
		{map[string]Profile{"main": {Tools: []string{"frobnicate"}}}, nil, `unknown tool "frobnicate"`},
		{map[string]Profile{"explore": {}}, nil, "agents.explore: the name is a subagent"},
		{map[string]Profile{"main": {InterruptOn: map[string]InterruptRule{"execute": {Allowed: []agent.DecisionType{"maybe"}}}}}, nil, "interrupt_on.execute.allowed"},
		{map[string]Profile{"main": {InterruptOn: map[string]InterruptRule{"exceute": {}}}}, nil, `agents.main.interrupt_on.exceute: unknown tool "exceute"`},
		{map[string]Profile{"plan": {InterruptOn: map[string]InterruptRule{"execute": {}}}}, nil, "agents.plan.interrupt_on.execute: agent plan cannot call execute"},
		{map[string]Profile{"main": {Tools: []string{"@read"}, InterruptOn: map[string]InterruptRule{"echo": {}}}}, nil, "agents.main.interrupt_on.echo: agent main cannot call echo"},
		{nil, map[string]Profile{"bash": {InterruptOn: map[string]InterruptRule{"write_file": {}}}}, "subagents.bash.interrupt_on.write_file: subagent bash cannot call write_file"},
		{nil, map[string]Profile{"w": {Description: "w", ReadOnly: true, InterruptOn: map[string]InterruptRule{"delete": {}}}}, "subagents.w.interrupt_on.delete: subagent w cannot call delete"},
	}
	for _, c := range cases {
		if _, err := NewSet(c.agents, c.subs, opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
}

func TestResolve(t *testing.T) {
	s, err := NewSet(map[string]Profile{
		"main": {InterruptOn: map[string]InterruptRule{"execute": {}}},
	}, map[string]Profile{
		"researcher": {Description: "r", Tools: []string{"@read", "task"}, Subagents: []string{"explore"}, Model: "fast", ReadOnly: true, InterruptOn: map[string]InterruptRule{}},
		"writer":     {Description: "w"},
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	main, err := s.ResolvePrimary("", "")
	if err != nil {
		t.Fatal(err)
	}
	if main.Name != "main" || main.Model != "smart" || len(allowed(main)) != len(opts.KnownTools) || !slices.Equal(main.Subagents, []string{"bash", "explore", "general-purpose", "researcher", "writer"}) {
		t.Errorf("main %+v tools %v", main, allowed(main))
	}
	if _, err := s.ResolvePrimary("ghost", ""); !errors.Is(err, agent.ErrInvalidInput) {
		t.Errorf("unknown agent: %v", err)
	}
	plan, _ := s.ResolvePrimary("plan", "fast")
	if got := allowed(plan); !slices.Equal(got, []string{"glob", "grep", "ls", "read_file", "task", "write_todos"}) || plan.Model != "fast" || plan.MaxSteps != 100 {
		t.Errorf("plan %v %+v", got, plan)
	}

	gp, _ := s.ResolveSubagent("general-purpose", main)
	if len(allowed(gp)) != len(opts.KnownTools) || !slices.Equal(gp.Subagents, main.Subagents) || gp.Model != "smart" || gp.Depth != 1 {
		t.Errorf("general-purpose inherits: %+v", gp)
	}
	if _, ok := gp.InterruptOn["execute"]; !ok {
		t.Error("general-purpose does not inherit interrupt_on")
	}
	explore, _ := s.ResolveSubagent("explore", main)
	if got := allowed(explore); !slices.Equal(got, []string{"glob", "grep", "ls", "read_file"}) || explore.MaxSteps != 50 || len(explore.Subagents) != 0 {
		t.Errorf("explore %v %+v", got, explore)
	}
	bash, _ := s.ResolveSubagent("bash", main)
	if got := allowed(bash); !slices.Equal(got, []string{"execute", "ls", "read_file"}) || bash.Preset != tools.PresetExec {
		t.Errorf("bash %v", got)
	}
	r, _ := s.ResolveSubagent("researcher", main)
	if got := allowed(r); !slices.Equal(got, []string{"glob", "grep", "ls", "read_file", "task"}) || r.Model != "fast" || len(r.InterruptOn) != 0 {
		t.Errorf("researcher %v %+v", got, r)
	}
	// A custom subagent without tools gets its parent's (here: explore's).
	w, _ := s.ResolveSubagent("writer", explore)
	if got := allowed(w); !slices.Equal(got, []string{"glob", "grep", "ls", "read_file"}) || w.Preset != tools.PresetReadOnly || w.MaxSteps != DefaultSubagentMaxSteps {
		t.Errorf("writer under explore %v %+v", got, w)
	}
}

func TestGeneralPurposeDisabled(t *testing.T) {
	off := false
	o := opts
	o.GeneralPurpose = &off
	s, err := NewSet(nil, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(s.Subagents(), GeneralPurpose) {
		t.Error("general-purpose still enabled")
	}
	main, _ := s.ResolvePrimary("", "")
	if slices.Contains(main.Subagents, GeneralPurpose) {
		t.Error("main may still delegate to general-purpose")
	}
}

// TestSubagentCappedByParent: a subagent gets at most its caller's tools
// and permission preset, unless its profile sets cap_by_parent: false.
func TestSubagentCappedByParent(t *testing.T) {
	off := false
	s, err := NewSet(map[string]Profile{
		"plan": {Subagents: []string{"explore", "bash", "general-purpose", "writer", "shell"}},
	}, map[string]Profile{
		"writer": {Description: "w", Tools: []string{"@read", "@write"}, Permissions: "edit"},
		"shell":  {Description: "s", Tools: []string{"execute", "ls"}, Permissions: "exec", CapByParent: &off},
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	main, _ := s.ResolvePrimary("main", "")
	plan, _ := s.ResolvePrimary("plan", "")
	planGP, _ := s.ResolveSubagent("general-purpose", plan)
	cases := []struct {
		sub       string
		parent    *Context
		wantTools []string
		want      tools.Preset
	}{
		{"bash", main, []string{"execute", "ls", "read_file"}, tools.PresetExec},
		{"bash", plan, []string{"ls", "read_file"}, tools.PresetReadOnly},
		{"bash", planGP, []string{"ls", "read_file"}, tools.PresetReadOnly},
		{"writer", main, []string{"delete", "edit_file", "glob", "grep", "ls", "read_file", "write_file"}, tools.PresetEdit},
		{"writer", plan, []string{"glob", "grep", "ls", "read_file"}, tools.PresetReadOnly},
		{"explore", plan, []string{"glob", "grep", "ls", "read_file"}, tools.PresetReadOnly},
		{"general-purpose", plan, []string{"glob", "grep", "ls", "read_file", "task", "write_todos"}, tools.PresetReadOnly},
		// The explicit opt-out keeps the subagent's own tools and preset.
		{"shell", plan, []string{"execute", "ls"}, tools.PresetExec},
	}
	for _, c := range cases {
		t.Run(c.sub+" under "+c.parent.Name, func(t *testing.T) {
			sc, err := s.ResolveSubagent(c.sub, c.parent)
			if err != nil {
				t.Fatal(err)
			}
			if got := allowed(sc); !slices.Equal(got, c.wantTools) || sc.Preset != c.want {
				t.Errorf("tools %v preset %s; want %v %s", got, sc.Preset, c.wantTools, c.want)
			}
		})
	}
	if _, err := NewSet(map[string]Profile{"main": {CapByParent: &off}}, nil, opts); err == nil || !strings.Contains(err.Error(), "agents.main.cap_by_parent") {
		t.Errorf("cap_by_parent on a primary: %v", err)
	}
}

// TestRunTimeToolPrefixes: with "mcp__gh__" among the run-time prefixes,
// allow-lists and interrupt_on accept that server's names and patterns
// and reject other servers'; AllowsAny follows the allow-list through
// inheritance and the parent cap.
func TestRunTimeToolPrefixes(t *testing.T) {
	o := opts
	o.ToolPrefixes = []string{"mcp__gh__"}
	for _, tc := range []struct {
		name   string
		agents map[string]Profile
		want   string // "" = accepted
	}{
		{"pattern", map[string]Profile{"main": {Tools: []string{"@read", "mcp__gh__*"}}}, ""},
		{"name", map[string]Profile{"main": {Tools: []string{"mcp__gh__issues"}, InterruptOn: map[string]InterruptRule{"mcp__gh__issues": {}}}}, ""},
		{"gate pattern", map[string]Profile{"main": {InterruptOn: map[string]InterruptRule{"mcp__gh__*": {}}}}, ""},
		{"other server", map[string]Profile{"main": {Tools: []string{"mcp__db__*"}}}, `agents.main.tools: unknown tool "mcp__db__*"`},
		{"other gate", map[string]Profile{"main": {InterruptOn: map[string]InterruptRule{"mcp__db__q": {}}}}, `unknown tool "mcp__db__q"`},
		{"gate not allowed", map[string]Profile{"main": {Tools: []string{"@read"}, InterruptOn: map[string]InterruptRule{"mcp__gh__x": {}}}}, "agent main cannot call mcp__gh__x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewSet(tc.agents, nil, o)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	s, err := NewSet(map[string]Profile{"main": {Tools: []string{"@read", "task", "mcp__gh__*"}}},
		map[string]Profile{"free": {Description: "f", Tools: []string{"@all"}, CapByParent: new(false)}}, o)
	if err != nil {
		t.Fatal(err)
	}
	main, _ := s.ResolvePrimary("", "")
	gp, _ := s.ResolveSubagent(GeneralPurpose, main)
	ex, _ := s.ResolveSubagent(Explore, main)
	free, _ := s.ResolveSubagent("free", ex)
	for _, c := range []struct {
		ctx  *Context
		want bool
	}{{main, true}, {gp, true}, {ex, false}, {free, true}} {
		if got := c.ctx.AllowsAny("mcp__gh__"); got != c.want {
			t.Errorf("%s: AllowsAny(mcp__gh__) = %v", c.ctx.Name, got)
		}
		if got := c.ctx.Allow("mcp__gh__issues"); got != c.want {
			t.Errorf("%s: Allow(mcp__gh__issues) = %v", c.ctx.Name, got)
		}
	}
}

// TestListToolNames: ListAgents' tool names follow the config version's
// groups (a version 1 @all has no python; naming python adds it), the
// preset, and list run-time (MCP) tools as the names or the patterns the
// allow-list takes.
func TestListToolNames(t *testing.T) {
	o := opts
	o.KnownTools = append(slices.Clone(o.KnownTools), "python")
	o.ToolPrefixes = []string{"mcp__box__", "mcp__gh__"}
	agents := map[string]Profile{
		"issues": {Description: "i", Tools: []string{"@read", "mcp__gh__get_issue"}},
		"py":     {Description: "p", Tools: []string{"@all", "python"}},
	}
	names := func(v int) map[string][]string {
		o.Version = v
		s, err := NewSet(agents, nil, o)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, info := range s.List() {
			out[info.Name] = info.ToolNames
		}
		return out
	}
	all := []string{"delete", "echo", "edit_file", "execute", "glob", "grep", "ls", "mcp__box__*", "mcp__gh__*", "read_file", "task", "write_file", "write_todos"}
	v1 := names(tools.Version1)
	for name, want := range map[string][]string{
		"main":    all,
		"py":      append(slices.Clone(all[:9]), "python", "read_file", "task", "write_file", "write_todos"),
		"issues":  {"glob", "grep", "ls", "mcp__gh__get_issue", "read_file"},
		"plan":    {"glob", "grep", "ls", "read_file", "task", "write_todos"},
		"explore": {"glob", "grep", "ls", "read_file"},
	} {
		if !slices.Equal(v1[name], want) {
			t.Errorf("version 1 %s: %v, want %v", name, v1[name], want)
		}
	}
	if v2 := names(tools.CurrentVersion); !slices.Contains(v2["main"], "python") || !slices.Contains(v2["general-purpose"], "python") {
		t.Errorf("version 2 main %v, general-purpose %v: want python", v2["main"], v2["general-purpose"])
	}
}
