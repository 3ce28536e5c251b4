package profile

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/tools"
)

// Kind tells primary agents from subagents.
type Kind string

// Profile kinds.
const (
	Primary  Kind = "PRIMARY"
	Subagent Kind = "SUBAGENT"
)

// Built-in profile names.
const (
	Main           = "main"
	Plan           = "plan"
	GeneralPurpose = "general-purpose"
	Explore        = "explore"
	Bash           = "bash"
)

// Subagent defaults (docs/agent-core.md §5.5).
const (
	DefaultSubagentMaxSteps = 100
	DefaultSubagentTimeout  = 10 * time.Minute
)

// InterruptRule is one interrupt_on entry: `tool: true` is the zero rule
// (all four decisions, default description), `tool: false` one with Off.
type InterruptRule struct {
	// Allowed lists the accepted decisions; empty means all four.
	Allowed []agent.DecisionType
	// Description is shown with the request.
	Description string
	// Off exempts the tool: no pattern entry and no gate on a tool with
	// the same capabilities gates it.
	Off bool
}

// Profile is an `agents.<name>` or `subagents.<name>` entry. Zero values
// mean "not set": the built-in's value or the documented default applies.
type Profile struct {
	// Description is shown in the task tool; required for custom
	// subagents.
	Description string
	// SystemPrompt is the composer's agent section.
	SystemPrompt string
	// Model is a key of the models table.
	Model string
	// Tools are tool names and groups (@read, @write, @exec, @all); nil
	// means the default ([@all] for primaries, the parent's for
	// subagents).
	Tools []string
	// Subagents are the names the task tool may use; nil means the
	// default (all enabled subagents for primaries, none for subagents,
	// the parent's list for general-purpose).
	Subagents []string
	// Permissions is a preset name: read-only, edit, exec or full; ""
	// means full (primaries) or the parent's (subagents).
	Permissions string
	// ReadOnly equals the read-only preset and also removes @write and
	// @exec from the allow-list.
	ReadOnly bool
	// MaxSteps and Timeout limit each invocation.
	MaxSteps int
	Timeout  time.Duration
	// InterruptOn gates tools behind decisions. nil means unset (the
	// parent's for subagents); an empty non-nil map is explicit empty.
	InterruptOn map[string]InterruptRule
	// Memory turns the memory middleware on or off; nil means true.
	Memory *bool
	// Skills are the names of the config skills the profile sees (agentd
	// loads them from the profile's skill directories); nil means none
	// for primaries and the parent's for subagents. Tenant and workspace
	// skills are seen by every profile.
	Skills []string
	// Enabled turns a built-in off; nil means true.
	Enabled *bool
	// CapByParent (subagents only; nil means true) limits the subagent
	// to what its caller may do: its tools are intersected with the
	// caller's and its permission preset narrowed to the caller's. false
	// lets it keep its own tools and preset, so a read-only caller can
	// delegate to a subagent that writes or runs commands.
	CapByParent *bool
}

// Builtins returns the built-in primaries and subagents of docs/agent-core.md §5.1.
func Builtins() (primaries, subagents map[string]Profile) {
	primaries = map[string]Profile{
		Main: {
			Description: "The default agent: plans, works with files and the shell, and delegates to subagents.",
			Tools:       []string{tools.GroupAll},
			Permissions: string(tools.PresetFull),
		},
		Plan: {
			Description: "Investigates and plans without changing anything: reads files, keeps a todo list, and delegates exploration.",
			Tools:       []string{tools.GroupRead, "write_todos", "task"},
			Subagents:   []string{Explore},
			Permissions: string(tools.PresetReadOnly),
			MaxSteps:    100,
			Timeout:     15 * time.Minute,
		},
	}
	subagents = map[string]Profile{
		GeneralPurpose: {
			Description: "General-purpose agent for complex, multi-step tasks with the same tools as its caller. Use it to research questions, search code, and carry out independent pieces of work.",
			MaxSteps:    DefaultSubagentMaxSteps,
			Timeout:     DefaultSubagentTimeout,
		},
		Explore: {
			Description: "Fast read-only explorer: finds files, searches code and answers questions about the codebase. It cannot change anything.",
			Tools:       []string{tools.GroupRead},
			Permissions: string(tools.PresetReadOnly),
			MaxSteps:    50,
			Timeout:     5 * time.Minute,
		},
		Bash: {
			Description: "Runs shell commands (builds, tests, git) and reports their results.",
			Tools:       []string{"execute", "read_file", "ls"},
			Permissions: string(tools.PresetExec),
			MaxSteps:    50,
			Timeout:     10 * time.Minute,
		},
	}
	return primaries, subagents
}

// merge lays o over base: every set field of o wins.
func merge(base, o Profile) Profile {
	if o.Description != "" {
		base.Description = o.Description
	}
	if o.SystemPrompt != "" {
		base.SystemPrompt = o.SystemPrompt
	}
	if o.Model != "" {
		base.Model = o.Model
	}
	if o.Tools != nil {
		base.Tools = o.Tools
	}
	if o.Subagents != nil {
		base.Subagents = o.Subagents
	}
	if o.Permissions != "" {
		base.Permissions = o.Permissions
	}
	if o.ReadOnly {
		base.ReadOnly = true
	}
	if o.MaxSteps != 0 {
		base.MaxSteps = o.MaxSteps
	}
	if o.Timeout != 0 {
		base.Timeout = o.Timeout
	}
	if o.InterruptOn != nil {
		base.InterruptOn = o.InterruptOn
	}
	if o.Memory != nil {
		base.Memory = o.Memory
	}
	if o.Skills != nil {
		base.Skills = o.Skills
	}
	if o.Enabled != nil {
		base.Enabled = o.Enabled
	}
	if o.CapByParent != nil {
		base.CapByParent = o.CapByParent
	}
	return base
}

// Options are the settings outside the profiles that resolution needs.
type Options struct {
	// DefaultAgent is defaults.agent (default "main").
	DefaultAgent string
	// DefaultModel is defaults.model.
	DefaultModel string
	// Models are the configured model keys.
	Models []string
	// GeneralPurpose is middleware.subagents.general_purpose (nil = true).
	GeneralPurpose *bool
	// KnownTools are the names of every tool that can exist (file tools,
	// write_todos, task, registry tools); plain names in allow-lists must
	// be among them.
	KnownTools []string
	// ToolPrefixes are the name prefixes of tools only known at run start
	// ("mcp__github__" for an MCP server's tools): allow-list names and
	// interrupt_on keys with one of them are accepted, and so are
	// patterns ("mcp__github__*") that overlap one.
	ToolPrefixes []string
	// Version is the config's version: which tools the groups of
	// allow-lists take (tools.ParseAllowListAt; 0 = the current one).
	Version int
}

// knownTool reports whether an allow-list or interrupt_on entry can name
// a tool that exists.
func (o Options) knownTool(name string) bool {
	if o.KnownTools == nil || slices.Contains(o.KnownTools, name) {
		return true
	}
	if tools.IsPattern(name) {
		name = strings.TrimSuffix(name, "*")
		for _, p := range o.ToolPrefixes {
			if strings.HasPrefix(name, p) || strings.HasPrefix(p, name) {
				return true
			}
		}
		return false
	}
	for _, p := range o.ToolPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Set is a validated set of profiles.
type Set struct {
	opts       Options
	primaries  map[string]Profile
	subagents  map[string]Profile
	builtinSub map[string]bool
}

// NewSet merges configured profiles over the built-ins and validates the
// result; errors name the YAML path.
func NewSet(agents, subagents map[string]Profile, opts Options) (*Set, error) {
	if opts.DefaultAgent == "" {
		opts.DefaultAgent = Main
	}
	bp, bs := Builtins()
	s := &Set{opts: opts, primaries: bp, subagents: bs, builtinSub: make(map[string]bool)}
	for name := range bs {
		s.builtinSub[name] = true
	}
	for name, p := range agents {
		if _, clash := bs[name]; clash {
			return nil, fmt.Errorf("agents.%s: the name is a subagent", name)
		}
		s.primaries[name] = merge(bp[name], p)
	}
	for name, p := range subagents {
		if _, clash := bp[name]; clash {
			return nil, fmt.Errorf("subagents.%s: the name is a primary agent", name)
		}
		if _, builtin := bs[name]; !builtin && p.Description == "" {
			return nil, fmt.Errorf("subagents.%s.description: required for a custom subagent", name)
		}
		s.subagents[name] = merge(bs[name], p)
	}
	if gp := opts.GeneralPurpose; gp != nil && !*gp {
		p := s.subagents[GeneralPurpose]
		p.Enabled = gp
		s.subagents[GeneralPurpose] = p
	}
	if _, ok := s.primaries[opts.DefaultAgent]; !ok {
		return nil, fmt.Errorf("defaults.agent: unknown agent %q", opts.DefaultAgent)
	}
	check := func(where, kind, name string, p Profile) error {
		if p.Model != "" && !slices.Contains(opts.Models, p.Model) {
			return fmt.Errorf("%s.model: unknown model %q", where, p.Model)
		}
		preset, err := tools.ParsePreset(p.Permissions)
		if err != nil {
			return fmt.Errorf("%s.permissions: %v", where, err)
		}
		if _, err := tools.ParseAllowList(p.Tools); err != nil {
			return fmt.Errorf("%s.tools: %v", where, err)
		}
		for _, t := range p.Tools {
			if !strings.HasPrefix(t, "@") && !opts.knownTool(t) {
				return fmt.Errorf("%s.tools: unknown tool %q", where, t)
			}
		}
		for _, sub := range p.Subagents {
			if _, ok := s.subagents[sub]; !ok {
				return fmt.Errorf("%s.subagents: unknown subagent %q", where, sub)
			}
		}
		if p.MaxSteps < 0 || p.Timeout < 0 {
			return fmt.Errorf("%s: max_steps and timeout must be positive", where)
		}
		for _, tool := range sortedKeys(p.InterruptOn) {
			if err := s.checkGate(where, kind, name, p, preset, tool); err != nil {
				return err
			}
			for _, d := range p.InterruptOn[tool].Allowed {
				if !slices.Contains(agent.AllDecisions(), d) {
					return fmt.Errorf("%s.interrupt_on.%s.allowed: unknown decision %q", where, tool, d)
				}
			}
		}
		return nil
	}
	for _, name := range sortedKeys(s.primaries) {
		if err := check("agents."+name, "agent", name, s.primaries[name]); err != nil {
			return nil, err
		}
		if s.primaries[name].CapByParent != nil {
			return nil, fmt.Errorf("agents.%s.cap_by_parent: only subagents have a parent to be capped by", name)
		}
	}
	for _, name := range sortedKeys(s.subagents) {
		if err := check("subagents."+name, "subagent", name, s.subagents[name]); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// checkGate rejects an interrupt_on entry that could never gate anything:
// a tool that does not exist, or one outside the profile's own allow-list
// (so a typo or a stale entry cannot leave a call ungated while the
// config reads as if it were gated). A subagent without its own tools
// list may get any tool from its caller, so only its preset and read_only
// limit it here. The task tool counts as existing: it appears whenever the
// agent has subagents to delegate to.
func (s *Set) checkGate(where, kind, name string, p Profile, preset tools.Preset, tool string) error {
	if known := s.opts.KnownTools; !s.opts.knownTool(tool) {
		return fmt.Errorf("%s.interrupt_on.%s: unknown tool %q (known: %s)", where, tool, tool, strings.Join(slices.Sorted(slices.Values(known)), ", "))
	}
	if p.InterruptOn[tool].Off {
		// An exemption gates nothing, so it cannot leave a call ungated
		// by mistake.
		return nil
	}
	if p.ReadOnly {
		preset = tools.PresetReadOnly
	}
	allow := allowOf(p, preset, nil, s.opts.Version)
	if allow(tool) {
		return nil
	}
	var has []string
	for _, t := range s.opts.KnownTools {
		if allow(t) {
			has = append(has, t)
		}
	}
	slices.Sort(has)
	return fmt.Errorf("%s.interrupt_on.%s: %s %s cannot call %s, so the gate would never apply (its tools: %s)",
		where, tool, kind, name, tool, strings.Join(has, ", "))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func enabled(p Profile) bool { return p.Enabled == nil || *p.Enabled }

// DefaultAgent returns the default primary's name.
func (s *Set) DefaultAgent() string { return s.opts.DefaultAgent }

// Primaries returns the enabled primary names, sorted.
func (s *Set) Primaries() []string {
	var out []string
	for _, n := range sortedKeys(s.primaries) {
		if enabled(s.primaries[n]) {
			out = append(out, n)
		}
	}
	return out
}

// Subagents returns the enabled subagent names, sorted.
func (s *Set) Subagents() []string {
	var out []string
	for _, n := range sortedKeys(s.subagents) {
		if enabled(s.subagents[n]) {
			out = append(out, n)
		}
	}
	return out
}

// Primary returns a primary profile.
func (s *Set) Primary(name string) (Profile, bool) {
	p, ok := s.primaries[name]
	return p, ok && enabled(p)
}

// Subagent returns a subagent profile.
func (s *Set) Subagent(name string) (Profile, bool) {
	p, ok := s.subagents[name]
	return p, ok && enabled(p)
}

// Context is the effective setup of one agent context.
type Context struct {
	// Name is the profile name; Kind its kind.
	Name string
	Kind Kind
	// Description and SystemPrompt come from the profile.
	Description, SystemPrompt string
	// Model is the model key in use.
	Model string
	// Allow is the effective tool allow-list (preset applied).
	Allow func(name string) bool
	// AllowsAny reports whether Allow may accept some name with the given
	// prefix, so that a source of run-time tools (an MCP server's,
	// "mcp__github__") is only opened for contexts that may use it.
	AllowsAny func(prefix string) bool
	// Preset is the permission preset enforced at the tool layer.
	Preset tools.Preset
	// Subagents are the names the task tool may use (enabled only).
	Subagents []string
	// InterruptOn gates tools.
	InterruptOn map[string]InterruptRule
	// Memory turns the memory middleware on.
	Memory bool
	// Skills are the config skills the context sees, by name.
	Skills []string
	// MaxSteps and Timeout limit the context (0 = the configured run
	// limits, for primaries).
	MaxSteps int
	Timeout  time.Duration
	// Depth is 0 for the root.
	Depth int
}

func allowOf(p Profile, preset tools.Preset, inherited func(string) bool, version int) func(string) bool {
	var base func(string) bool
	if p.Tools == nil && inherited != nil {
		base = inherited
	} else {
		entries := p.Tools
		if entries == nil {
			entries = []string{tools.GroupAll}
		}
		al, _ := tools.ParseAllowListAt(entries, version)
		base = al.Allows
	}
	return func(name string) bool {
		if !base(name) || !preset.Allows(name) {
			return false
		}
		if p.ReadOnly && (slices.Contains(tools.WriteTools, name) || slices.Contains(tools.ExecTools, name)) {
			return false
		}
		return true
	}
}

// anyOf is allowOf's AllowsAny. Presets and read_only limit file tools
// only, so they do not narrow it.
func anyOf(p Profile, inherited func(string) bool, version int) func(string) bool {
	if p.Tools == nil && inherited != nil {
		return inherited
	}
	entries := p.Tools
	if entries == nil {
		entries = []string{tools.GroupAll}
	}
	al, _ := tools.ParseAllowListAt(entries, version)
	return al.AllowsAny
}

func (s *Set) enabledOnly(names []string) []string {
	var out []string
	for _, n := range names {
		if p, ok := s.subagents[n]; ok && enabled(p) {
			out = append(out, n)
		}
	}
	return out
}

// ResolvePrimary returns the root context of primary name ("" = default)
// with an optional model override.
func (s *Set) ResolvePrimary(name, model string) (*Context, error) {
	if name == "" {
		name = s.opts.DefaultAgent
	}
	p, ok := s.Primary(name)
	if !ok {
		return nil, fmt.Errorf("%w: unknown agent %q", agent.ErrInvalidInput, name)
	}
	if model != "" && !slices.Contains(s.opts.Models, model) {
		return nil, fmt.Errorf("%w: unknown model %q", agent.ErrInvalidInput, model)
	}
	preset, _ := tools.ParsePreset(p.Permissions)
	if p.ReadOnly {
		preset = tools.PresetReadOnly
	}
	c := &Context{
		Name: name, Kind: Primary, Description: p.Description, SystemPrompt: p.SystemPrompt,
		Model: firstNonEmpty(model, p.Model, s.opts.DefaultModel), Preset: preset,
		Allow:       allowOf(p, preset, nil, s.opts.Version),
		AllowsAny:   anyOf(p, nil, s.opts.Version),
		InterruptOn: maps.Clone(p.InterruptOn),
		Memory:      p.Memory == nil || *p.Memory,
		Skills:      p.Skills,
		MaxSteps:    p.MaxSteps, Timeout: p.Timeout,
	}
	if p.Subagents != nil {
		c.Subagents = s.enabledOnly(p.Subagents)
	} else {
		c.Subagents = s.Subagents()
	}
	if c.InterruptOn == nil {
		c.InterruptOn = map[string]InterruptRule{}
	}
	return c, nil
}

// ResolveSubagent returns the context of subagent name started from
// parent. Unless the profile sets CapByParent to false, the subagent's
// tools and preset never exceed the parent's.
func (s *Set) ResolveSubagent(name string, parent *Context) (*Context, error) {
	p, ok := s.Subagent(name)
	if !ok {
		return nil, fmt.Errorf("unknown subagent %q", name)
	}
	preset := parent.Preset
	if p.Permissions != "" {
		preset, _ = tools.ParsePreset(p.Permissions)
	}
	if p.ReadOnly {
		preset = tools.PresetReadOnly
	}
	capped := p.CapByParent == nil || *p.CapByParent
	if capped {
		preset = narrower(preset, parent.Preset)
	}
	allow := allowOf(p, preset, parent.Allow, s.opts.Version)
	allowsAny := anyOf(p, parent.AllowsAny, s.opts.Version)
	if capped {
		own, ownAny := allow, allowsAny
		allow = func(name string) bool { return own(name) && parent.Allow(name) }
		allowsAny = func(prefix string) bool { return ownAny(prefix) && parent.AllowsAny(prefix) }
	}
	c := &Context{
		Name: name, Kind: Subagent, Description: p.Description, SystemPrompt: p.SystemPrompt,
		Model: firstNonEmpty(p.Model, parent.Model), Preset: preset,
		Allow:     allow,
		AllowsAny: allowsAny,
		Memory:    p.Memory == nil || *p.Memory,
		Skills:    p.Skills,
		Depth:     parent.Depth + 1, MaxSteps: p.MaxSteps, Timeout: p.Timeout,
	}
	if c.Skills == nil {
		c.Skills = parent.Skills
	}
	switch {
	case p.Subagents != nil:
		c.Subagents = s.enabledOnly(p.Subagents)
	case name == GeneralPurpose:
		c.Subagents = slices.Clone(parent.Subagents)
	}
	if p.InterruptOn != nil {
		c.InterruptOn = maps.Clone(p.InterruptOn)
	} else {
		c.InterruptOn = maps.Clone(parent.InterruptOn)
	}
	if c.MaxSteps == 0 {
		c.MaxSteps = DefaultSubagentMaxSteps
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultSubagentTimeout
	}
	return c, nil
}

// narrower returns the preset that permits only what both a and b
// permit.
func narrower(a, b tools.Preset) tools.Preset {
	write, exec := a.AllowsWrite() && b.AllowsWrite(), a.AllowsExec() && b.AllowsExec()
	switch {
	case write && exec:
		return tools.PresetFull
	case write:
		return tools.PresetEdit
	case exec:
		return tools.PresetExec
	}
	return tools.PresetReadOnly
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// Info describes a profile for ListAgents.
type Info struct {
	Name, Description string
	Kind              Kind
	// Model is the configured model key ("" = the default or the parent's).
	Model string
	// Tools are the configured entries (groups unexpanded); nil means the
	// default.
	Tools []string
	// ToolNames are the tools it may call, sorted: the known tools its
	// allow-list (nil: @all, for a subagent the most it can inherit),
	// preset and read_only permit, then, for tools only known at run start
	// (an MCP server's), the names its allow-list gives and a pattern
	// ("mcp__github__*") for each prefix it takes whole.
	ToolNames []string
	// Subagents are the names it may delegate to.
	Subagents   []string
	InterruptOn map[string]InterruptRule
}

// List returns every enabled profile, primaries first, each sorted by
// name.
func (s *Set) List() []Info {
	var out []Info
	for _, n := range s.Primaries() {
		p := s.primaries[n]
		subs := s.enabledOnly(p.Subagents)
		if p.Subagents == nil {
			subs = s.Subagents()
		}
		out = append(out, Info{Name: n, Description: p.Description, Kind: Primary, Model: firstNonEmpty(p.Model, s.opts.DefaultModel),
			Tools: slices.Clone(p.Tools), ToolNames: s.toolNames(p), Subagents: subs, InterruptOn: maps.Clone(p.InterruptOn)})
	}
	for _, n := range s.Subagents() {
		p := s.subagents[n]
		out = append(out, Info{Name: n, Description: p.Description, Kind: Subagent, Model: p.Model,
			Tools: slices.Clone(p.Tools), ToolNames: s.toolNames(p), Subagents: s.enabledOnly(p.Subagents), InterruptOn: maps.Clone(p.InterruptOn)})
	}
	return out
}

// toolNames is Info.ToolNames of p.
func (s *Set) toolNames(p Profile) []string {
	preset, _ := tools.ParsePreset(p.Permissions)
	if p.ReadOnly {
		preset = tools.PresetReadOnly
	}
	allow := allowOf(p, preset, nil, s.opts.Version)
	var out []string
	for _, n := range s.opts.KnownTools {
		if allow(n) {
			out = append(out, n)
		}
	}
	entries := p.Tools
	if entries == nil {
		entries = []string{tools.GroupAll}
	}
	al, _ := tools.ParseAllowListAt(entries, s.opts.Version)
	for _, prefix := range s.opts.ToolPrefixes {
		if al.AllowsEvery(prefix) {
			out = append(out, prefix+"*")
			continue
		}
		for _, n := range al.Names() {
			if strings.HasPrefix(n, prefix) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
