package tools

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/plumbhq/plumb/pkg/agent"
)

// Tool groups usable in allow-lists (docs/agent-core.md §5.1).
const (
	GroupRead  = "@read"
	GroupWrite = "@write"
	GroupExec  = "@exec"
	GroupAll   = "@all"
)

// Read, write and exec tool names. ExecTools are the tools that run
// code: execute (a shell command) and python (the interpreter tool), so
// that presets without exec and read_only profiles exclude both.
var (
	ReadTools  = []string{"ls", "read_file", "glob", "grep"}
	WriteTools = []string{"write_file", "edit_file", "delete"}
	ExecTools  = []string{"execute", "python"}
)

// Config versions fix what the tool groups of an allow-list take, so that
// a tool that runs code never joins an existing agent's tools without its
// config saying so. Version 1 is the tool set before python: @exec is
// execute alone and @all takes every tool but python. Version 2 adds
// python to both. A tool that runs code and is added later gets the next
// version; older configs get it only by naming it.
const (
	Version1       = 1
	CurrentVersion = 2
)

// joinedIn is the config version from which a tool belongs to the groups
// (@all, @exec); tools not listed belong from version 1.
var joinedIn = map[string]int{"python": 2}

// InGroups reports whether name belongs to the tool groups of config
// version v (0 = CurrentVersion).
func InGroups(name string, v int) bool {
	if v == 0 {
		v = CurrentVersion
	}
	return joinedIn[name] <= v
}

// builtinCaps are the capabilities of the built-in tools. A shell and an
// interpreter run code in the sandbox, which can do anything there.
var builtinCaps = map[string]agent.Capability{
	"ls": agent.CapReadsFiles, "read_file": agent.CapReadsFiles, "glob": agent.CapReadsFiles, "grep": agent.CapReadsFiles,
	"write_file": agent.CapWritesFiles, "edit_file": agent.CapWritesFiles, "delete": agent.CapWritesFiles,
	"execute": agent.CapAll, "python": agent.CapAll,
}

// GatedByName reports whether name is one of the built-in tools that had
// interrupt_on keys of their own before gates followed capabilities (the
// read and write tools and execute). A config decides for each of them by
// name, so the gate on one never covers another: gating delete leaves
// write_file as the config says, and gating write_file leaves execute.
// Every other tool — python, MCP tools, anything added later — is covered
// by the gates whose capabilities it has, so it cannot slip past a gate
// that was written before it existed.
func GatedByName(name string) bool {
	return name == "execute" || slices.Contains(ReadTools, name) || slices.Contains(WriteTools, name)
}

// CapabilitiesOf returns what the tool called name can do: the built-in
// table's entry for a built-in, otherwise declared (the tool's own
// Capabilities, when t is not nil).
func CapabilitiesOf(name string, t *agent.Tool) agent.Capability {
	c := builtinCaps[name]
	if t != nil {
		c |= t.Capabilities
	}
	return c
}

// Registry maps names to tools. Tools can be registered in named groups
// (e.g. "test_kit") that configuration enables as a whole. It is safe for
// concurrent use.
type Registry struct {
	mu     sync.RWMutex
	tools  map[string]agent.Tool
	groups map[string][]string
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{tools: make(map[string]agent.Tool), groups: make(map[string][]string)}
}

// Register adds tools; a duplicate name is an error.
func (r *Registry) Register(ts ...agent.Tool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range ts {
		if t.Name == "" || t.Func == nil {
			return fmt.Errorf("register tool %q: name and function are required", t.Name)
		}
		if _, ok := r.tools[t.Name]; ok {
			return fmt.Errorf("register tool %q: already registered", t.Name)
		}
	}
	for _, t := range ts {
		r.tools[t.Name] = t
	}
	return nil
}

// RegisterGroup registers tools and remembers them as group name.
func (r *Registry) RegisterGroup(name string, ts ...agent.Tool) error {
	if err := r.Register(ts...); err != nil {
		return fmt.Errorf("group %s: %w", name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range ts {
		r.groups[name] = append(r.groups[name], t.Name)
	}
	return nil
}

// Get returns the tool called name.
func (r *Registry) Get(name string) (agent.Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.tools[name]
	return t, ok
}

// Names returns every registered name, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.tools))
	for n := range r.tools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Group returns the names registered under group name.
func (r *Registry) Group(name string) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.groups[name])
}

// Tools returns the tools of the given names (unknown names are skipped),
// or every tool when names is nil, sorted by name.
func (r *Registry) Tools(names []string) []agent.Tool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []agent.Tool
	if names == nil {
		for _, t := range r.tools {
			out = append(out, t)
		}
	} else {
		for _, n := range names {
			if t, ok := r.tools[n]; ok {
				out = append(out, t)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Preset is a permission preset (docs/agent-core.md §5.1).
type Preset string

// Permission presets.
const (
	PresetReadOnly Preset = "read-only"
	PresetEdit     Preset = "edit"
	PresetExec     Preset = "exec"
	PresetFull     Preset = "full"
)

// ParsePreset validates a preset name; "" is full.
func ParsePreset(s string) (Preset, error) {
	switch p := Preset(s); p {
	case "":
		return PresetFull, nil
	case PresetReadOnly, PresetEdit, PresetExec, PresetFull:
		return p, nil
	}
	return "", fmt.Errorf("unknown permission preset %q (want read-only, edit, exec or full)", s)
}

// AllowsWrite reports whether the preset permits write, edit and delete.
func (p Preset) AllowsWrite() bool { return p == PresetEdit || p == PresetFull || p == "" }

// AllowsExec reports whether the preset permits execute.
func (p Preset) AllowsExec() bool { return p == PresetExec || p == PresetFull || p == "" }

// Allows reports whether the preset permits tool name at all (read tools
// and non-file tools always pass).
func (p Preset) Allows(name string) bool {
	switch {
	case slices.Contains(WriteTools, name):
		return p.AllowsWrite()
	case slices.Contains(ExecTools, name):
		return p.AllowsExec()
	}
	return true
}

// AllowList is an expanded tool allow-list. Besides names and groups it
// holds name patterns: an entry ending in "*" ("mcp__github__*") allows
// every name with that prefix, for tools only known at run start (those
// of an MCP server). A bare "*" is not a pattern: write @all.
type AllowList struct {
	all      bool
	names    map[string]bool
	prefixes []string
	version  int // of the config: which tools @all takes
}

// IsPattern reports whether an allow-list entry is a name pattern.
func IsPattern(entry string) bool {
	return len(entry) > 1 && strings.HasSuffix(entry, "*") && !strings.HasPrefix(entry, "@")
}

// ParseAllowList expands names and groups as the current config version
// does (see ParseAllowListAt).
func ParseAllowList(entries []string) (AllowList, error) {
	return ParseAllowListAt(entries, CurrentVersion)
}

// ParseAllowListAt expands names and groups as config version v does (0 =
// CurrentVersion): @all and @exec leave out the tools that joined the
// groups after v. Unknown groups are errors; plain names are kept as
// given (whether they exist is checked where the tool set is known). A
// nil or empty list allows nothing; use []string{"@all"} for everything.
func ParseAllowListAt(entries []string, v int) (AllowList, error) {
	if v == 0 {
		v = CurrentVersion
	}
	a := AllowList{names: make(map[string]bool), version: v}
	for _, e := range entries {
		switch e {
		case GroupAll:
			a.all = true
		case GroupRead:
			addAll(a.names, ReadTools)
		case GroupWrite:
			addAll(a.names, WriteTools)
		case GroupExec:
			for _, n := range ExecTools {
				if InGroups(n, v) {
					a.names[n] = true
				}
			}
		default:
			if strings.HasPrefix(e, "@") {
				return AllowList{}, fmt.Errorf("unknown tool group %q (want @read, @write, @exec or @all)", e)
			}
			if strings.HasSuffix(e, "*") {
				prefix := strings.TrimSuffix(e, "*")
				if prefix == "" || strings.Contains(prefix, "*") {
					return AllowList{}, fmt.Errorf("tool pattern %q: only a trailing * after a name prefix is supported (\"mcp__github__*\"); use @all for everything", e)
				}
				a.prefixes = append(a.prefixes, prefix)
				continue
			}
			a.names[e] = true
		}
	}
	return a, nil
}

// AllowAll is the @all list of the current config version.
func AllowAll() AllowList { return AllowList{all: true, version: CurrentVersion} }

func addAll(m map[string]bool, names []string) {
	for _, n := range names {
		m[n] = true
	}
}

// Allows reports whether name is on the list.
func (a AllowList) Allows(name string) bool {
	if a.names[name] || a.all && InGroups(name, a.version) {
		return true
	}
	for _, p := range a.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// AllowsAny reports whether the list may allow some name that starts with
// prefix (so that a source of such tools is worth opening).
func (a AllowList) AllowsAny(prefix string) bool {
	if a.all {
		return true
	}
	for n := range a.names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	for _, p := range a.prefixes {
		if strings.HasPrefix(p, prefix) || strings.HasPrefix(prefix, p) {
			return true
		}
	}
	return false
}

// AllowsEvery reports whether the list allows every name that starts
// with prefix (@all, or a pattern that prefix extends).
func (a AllowList) AllowsEvery(prefix string) bool {
	if a.all {
		return true
	}
	for _, p := range a.prefixes {
		if strings.HasPrefix(prefix, p) {
			return true
		}
	}
	return false
}

// All reports whether the list holds @all.
func (a AllowList) All() bool { return a.all }

// Names returns the explicit names, sorted (without @all).
func (a AllowList) Names() []string {
	out := make([]string, 0, len(a.names))
	for n := range a.names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Intersect returns the names allowed by both lists.
func (a AllowList) Intersect(b AllowList) AllowList {
	switch {
	case a.all:
		c := b.clone()
		c.version = min(a.version, b.version)
		return c
	case b.all:
		c := a.clone()
		c.version = min(a.version, b.version)
		return c
	}
	out := AllowList{names: make(map[string]bool), version: min(a.version, b.version)}
	for n := range a.names {
		if b.Allows(n) {
			out.names[n] = true
		}
	}
	for n := range b.names {
		if a.Allows(n) {
			out.names[n] = true
		}
	}
	// Of two overlapping prefixes the longer one is their intersection.
	for _, p := range a.prefixes {
		for _, q := range b.prefixes {
			switch {
			case strings.HasPrefix(p, q):
				out.prefixes = append(out.prefixes, p)
			case strings.HasPrefix(q, p):
				out.prefixes = append(out.prefixes, q)
			}
		}
	}
	return out
}

func (a AllowList) clone() AllowList {
	c := AllowList{all: a.all, names: make(map[string]bool, len(a.names)), prefixes: slices.Clone(a.prefixes), version: a.version}
	for n := range a.names {
		c.names[n] = true
	}
	return c
}

// Without returns the list minus names (used by read_only: true). An @all
// list becomes "everything except names".
func (a AllowList) Without(names ...string) func(string) bool {
	return func(n string) bool { return a.Allows(n) && !slices.Contains(names, n) }
}
