package deep

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/middleware/filesystem"
	"github.com/plumbhq/plumb/pkg/agent/middleware/hitl"
	"github.com/plumbhq/plumb/pkg/agent/middleware/hooks"
	"github.com/plumbhq/plumb/pkg/agent/middleware/memory"
	"github.com/plumbhq/plumb/pkg/agent/middleware/patchcalls"
	"github.com/plumbhq/plumb/pkg/agent/middleware/skillprompt"
	"github.com/plumbhq/plumb/pkg/agent/middleware/subagents"
	"github.com/plumbhq/plumb/pkg/agent/middleware/summarization"
	"github.com/plumbhq/plumb/pkg/agent/middleware/todos"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/agent/prompt"
	"github.com/plumbhq/plumb/pkg/agent/tools"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/skills"
)

// Model is one `models.<key>` entry, built.
type Model struct {
	// Chat is the client.
	Chat model.ChatModel
	// Name is the provider's model name (e.g. "gpt-4.1").
	Name string
	// Provider names the provider API ("openai"), for model-call spans.
	Provider string
	// ContextWindow is the window in tokens; 0 = unknown.
	ContextWindow int
	// MaxOutputTokens caps each call's output; 0 = the client default.
	MaxOutputTokens int
	// Vision is set for a model that accepts images: read_file then shows
	// it the images it reads (others get a text placeholder).
	Vision bool
}

// TodosConfig is middleware.todos.
type TodosConfig struct {
	// Enabled turns write_todos on (nil = true).
	Enabled *bool
	todos.Config
}

// SubagentsConfig is middleware.subagents.
type SubagentsConfig struct {
	// GeneralPurpose enables the general-purpose subagent (nil = true).
	GeneralPurpose *bool
	// MaxDepth is the deepest subagent level (0 = 3).
	MaxDepth int
}

// MiddlewareConfig is the `middleware:` section.
type MiddlewareConfig struct {
	Todos     TodosConfig
	Subagents SubagentsConfig
	// PatchToolCalls turns patch_tool_calls on (nil = true).
	PatchToolCalls *bool
	Memory         memory.Config
	// Filesystem is middleware.filesystem (plus tools.execute and
	// backends.artifacts_root); the preset comes from each profile.
	Filesystem filesystem.Config
	// Summarization is middleware.summarization.
	Summarization SummarizationConfig
	// Skills is middleware.skills.
	Skills SkillsConfig
}

// SkillsConfig is middleware.skills.
type SkillsConfig struct {
	// Enabled turns the skills middleware on (nil = true); it says
	// nothing when a run has no skills.
	Enabled *bool
	// Workspace lists the thread's own skills under
	// <home>/.agents/skills at the start of each run segment (this opens
	// the thread's sandbox when its default backend is one).
	Workspace bool
}

// SummarizationConfig is middleware.summarization. The embedded Config's
// model, window and backend fields are filled per agent context.
type SummarizationConfig struct {
	// Enabled turns summarization on (nil = true).
	Enabled *bool
	// Model is the summarizer's model key ("" = the context's own model).
	Model string
	summarization.Config
}

// ContextInfo describes the agent context a user middleware is built for.
type ContextInfo struct {
	// Agent is the profile name; Depth 0 is the root.
	Agent string
	Depth int
	// AllowsAny reports whether the context's allow-list may accept some
	// tool name with the given prefix: a middleware that provides tools at
	// run start (agent.ToolProvider) opens only the sources whose tools
	// the context may use. The executor applies the allow-list itself.
	AllowsAny func(prefix string) bool
	// InterruptOn are the context's interrupt_on keys, sorted, so that a
	// provider of run-time tools can say which name none of its tools
	// has (a typo that would gate nothing).
	InterruptOn []string
}

// Config is the whole agent configuration.
type Config struct {
	// Models maps model keys to clients. Required.
	Models map[string]Model
	// DefaultAgent and DefaultModel are `defaults`.
	DefaultAgent, DefaultModel string
	// Agents and Subagents are the configured profiles, merged over the
	// built-ins.
	Agents, Subagents map[string]profile.Profile
	// Limits are `limits` (zero fields take the defaults).
	Limits agent.Limits
	// Middleware is the `middleware` section.
	Middleware MiddlewareConfig
	// Hooks are the `hooks` entries.
	Hooks []hooks.Hook
	// Prompt is `prompt`.
	Prompt prompt.Config
	// Tools holds the enabled registry tools (e.g. the test_kit group);
	// may be nil.
	Tools *tools.Registry
	// Backend returns a thread's backend for a run segment (the Composite
	// agentd builds per thread, with its State part bound by BindState);
	// nil means no file backend. StateBackends is the plain State setup.
	Backend BackendFunc
	// UserMiddleware are Go-registered middleware constructors, called
	// per agent context (agent.WithMiddleware). A middleware named like a
	// default one replaces it in place.
	UserMiddleware []func(ContextInfo) agent.Middleware
	// Store persists threads. Required.
	Store agent.Store
	// ToolPrefixes are the name prefixes of tools that user middleware
	// provide at run start ("mcp__github__"): allow-lists and interrupt_on
	// may name them, and client tools may not take them.
	ToolPrefixes []string
	// Version is the config version: which tools the groups of
	// allow-lists take (0 = the current one; see tools.CurrentVersion).
	Version int
}

// Option adjusts a Runtime.
type Option func(*options)

type options struct {
	lg    *zap.Logger
	clock agent.Clock
	ids   func() string
	tp    trace.TracerProvider
}

// WithLogger sets the logger (nil = nop).
func WithLogger(lg *zap.Logger) Option { return func(o *options) { o.lg = lg } }

// WithClock sets the clock of timestamps.
func WithClock(c agent.Clock) Option { return func(o *options) { o.clock = c } }

// WithIDs sets the id generator.
func WithIDs(f func() string) Option { return func(o *options) { o.ids = f } }

// WithTracerProvider sets the provider of the runs' spans (see
// agent.WithTracerProvider; default the OpenTelemetry global).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.tp = tp } }

// Runtime runs deep agents.
type Runtime struct {
	cfg      Config
	profiles *profile.Set
	runner   *agent.Runner
	lg       *zap.Logger
}

// fileTools are the filesystem middleware's tool names.
var fileTools = []string{"ls", "read_file", "write_file", "edit_file", "delete", "glob", "grep", "execute"}

// New validates cfg and returns a Runtime.
func New(cfg Config, opts ...Option) (*Runtime, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.lg == nil {
		o.lg = zap.NewNop()
	}
	if cfg.Store == nil {
		return nil, errors.New("deep: a store is required")
	}
	if len(cfg.Models) == 0 {
		return nil, errors.New("models: at least one model is required")
	}
	if cfg.DefaultModel == "" {
		if len(cfg.Models) != 1 {
			return nil, errors.New("defaults.model: required with more than one model")
		}
		for k := range cfg.Models {
			cfg.DefaultModel = k
		}
	}
	if _, ok := cfg.Models[cfg.DefaultModel]; !ok {
		return nil, fmt.Errorf("defaults.model: unknown model %q", cfg.DefaultModel)
	}
	for k, m := range cfg.Models {
		if m.Chat == nil {
			return nil, fmt.Errorf("models.%s: no client", k)
		}
	}
	if k := cfg.Middleware.Summarization.Model; k != "" {
		if _, ok := cfg.Models[k]; !ok {
			return nil, fmt.Errorf("middleware.summarization.model: unknown model %q", k)
		}
	}
	if err := hooks.Validate(cfg.Hooks); err != nil {
		return nil, err
	}
	if err := cfg.Prompt.Validate(); err != nil {
		return nil, err
	}
	known := append(slices.Clone(fileTools), todos.ToolName, subagents.ToolName)
	if cfg.Tools != nil {
		for _, n := range cfg.Tools.Names() {
			if slices.Contains(known, n) {
				return nil, fmt.Errorf("tools: %q clashes with a built-in tool", n)
			}
			known = append(known, n)
		}
	}
	set, err := profile.NewSet(cfg.Agents, cfg.Subagents, profile.Options{
		DefaultAgent: cfg.DefaultAgent, DefaultModel: cfg.DefaultModel, Models: slices.Sorted(maps.Keys(cfg.Models)),
		GeneralPurpose: cfg.Middleware.Subagents.GeneralPurpose, KnownTools: known, ToolPrefixes: cfg.ToolPrefixes,
		Version: cfg.Version,
	})
	if err != nil {
		return nil, err
	}
	if cfg.Middleware.Subagents.MaxDepth <= 0 {
		cfg.Middleware.Subagents.MaxDepth = subagents.DefaultMaxDepth
	}
	rt := &Runtime{cfg: cfg, profiles: set, lg: o.lg.Named("deep")}
	var ropts []agent.RunnerOption
	ropts = append(ropts, agent.WithLogger(o.lg))
	if o.clock != nil {
		ropts = append(ropts, agent.WithClock(o.clock))
	}
	if o.ids != nil {
		ropts = append(ropts, agent.WithIDs(o.ids))
	}
	if o.tp != nil {
		ropts = append(ropts, agent.WithTracerProvider(o.tp))
	}
	rt.runner = agent.NewRunner(cfg.Store, rt.configure, ropts...)
	return rt, nil
}

// Runner returns the underlying runner.
func (rt *Runtime) Runner() *agent.Runner { return rt.runner }

// Run starts a run (see agent.Runner.Run).
func (rt *Runtime) Run(ctx context.Context, in agent.RunInput, sink agent.Sink) (*agent.RunResult, error) {
	return rt.runner.Run(ctx, in, sink)
}

// Resume continues an interrupted run (see agent.Runner.Resume).
func (rt *Runtime) Resume(ctx context.Context, in agent.ResumeInput, sink agent.Sink) (*agent.RunResult, error) {
	return rt.runner.Resume(ctx, in, sink)
}

// Continue takes over a run its process left RUNNING (see
// agent.Runner.Continue).
func (rt *Runtime) Continue(ctx context.Context, in agent.ContinueInput, sink agent.Sink) (*agent.RunResult, error) {
	return rt.runner.Continue(ctx, in, sink)
}

// ListAgents describes every profile a client may name (primaries) or a
// task may start (subagents), built-ins included.
func (rt *Runtime) ListAgents() []profile.Info { return rt.profiles.List() }

// ServerToolNames returns the names a client tool must not take.
func (rt *Runtime) ServerToolNames() []string {
	names := append(slices.Clone(fileTools), todos.ToolName, subagents.ToolName)
	if rt.cfg.Tools != nil {
		names = append(names, rt.cfg.Tools.Names()...)
	}
	sort.Strings(names)
	return names
}

// KnownTool reports whether name can be a server tool: a built-in or
// registry tool, or a name with one of the run-time tool prefixes.
func (rt *Runtime) KnownTool(name string) bool {
	if slices.Contains(rt.ServerToolNames(), name) {
		return true
	}
	return slices.ContainsFunc(rt.cfg.ToolPrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// Capabilities returns what the tool an interrupt_on key names can do,
// for the gate on it to cover every tool that can do as much: the
// built-in table's entry or a registry tool's declared capabilities. A
// pattern or a run-time (MCP) tool name gives 0: such a gate is about
// what that remote tool means (create_issue), which its capabilities do
// not describe, so it covers no other tool; MCP tools are still covered
// by the gates of built-in tools through their own capabilities.
func (rt *Runtime) Capabilities(key string) agent.Capability {
	if tools.IsPattern(key) {
		return 0
	}
	var t *agent.Tool
	if rt.cfg.Tools != nil {
		if reg, ok := rt.cfg.Tools.Get(key); ok {
			t = &reg
		}
	}
	return tools.CapabilitiesOf(key, t)
}

type agentKey struct{}

// AgentOf returns the primary agent of the run segment a BackendFunc
// builds for ("" outside one): what an egress grant for "this agent"
// names.
func AgentOf(ctx context.Context) string {
	a, _ := ctx.Value(agentKey{}).(string)
	return a
}

// configure builds the root context of a run segment.
func (rt *Runtime) configure(ctx context.Context, req agent.ConfigureRequest) (*agent.Config, error) {
	pc, err := rt.profiles.ResolvePrimary(req.Spec.Agent, req.Spec.Model)
	if err != nil {
		return nil, err
	}
	var client []agent.Tool
	for _, def := range req.Spec.ClientTools {
		if rt.KnownTool(def.Name) {
			return nil, fmt.Errorf("%w: client tool %q clashes with a server tool", agent.ErrInvalidInput, def.Name)
		}
		client = append(client, agent.ClientTool(def))
	}
	var tb ThreadBackend
	if rt.cfg.Backend != nil {
		if tb, err = rt.cfg.Backend(context.WithValue(ctx, agentKey{}, pc.Name), req.ThreadID, req.Metadata, req.ThreadFiles); err != nil {
			return nil, fmt.Errorf("thread %s backend: %w", req.ThreadID, err)
		}
	}
	b := tb.Backend
	if len(req.Files) > 0 {
		if err := seed(ctx, b, req.Files); err != nil {
			return nil, err
		}
	}
	limits := rt.cfg.Limits.WithDefaults()
	if pc.MaxSteps > 0 {
		limits.MaxIterations = min(limits.MaxIterations, pc.MaxSteps)
	}
	if pc.Timeout > 0 {
		limits.Timeout = min(limits.Timeout, pc.Timeout)
	}
	if n := req.Spec.MaxIterations; n > 0 {
		limits.MaxIterations = min(limits.MaxIterations, n)
	}
	if d := req.Spec.Timeout; d > 0 {
		limits.Timeout = min(limits.Timeout, d)
	}
	cfg, err := rt.build(pc, b, tb.Skills, limits)
	if err != nil {
		return nil, err
	}
	cfg.Tools = append(cfg.Tools, client...)
	cfg.FileChanges = tb.FileChanges
	allow := cfg.Allow
	clientNames := make(map[string]bool)
	for _, t := range client {
		clientNames[t.Name] = true
	}
	cfg.Allow = func(name string) bool { return clientNames[name] || allow(name) }
	return cfg, nil
}

func seed(ctx context.Context, b backend.Backend, files map[string][]byte) error {
	if b == nil {
		return fmt.Errorf("%w: files given but no backend is configured", agent.ErrInvalidInput)
	}
	items := make([]backend.UploadItem, 0, len(files))
	for _, p := range slices.Sorted(maps.Keys(files)) {
		items = append(items, backend.UploadItem{Path: p, Content: files[p]})
	}
	res, err := b.Upload(ctx, items)
	if err != nil {
		return fmt.Errorf("seed files: %w", err)
	}
	for _, r := range res {
		if r.Err != nil {
			return fmt.Errorf("%w: files[%s]: %s", agent.ErrInvalidInput, r.Path, r.Err.Message)
		}
	}
	return nil
}

// build assembles one agent context: the default stack of docs/agent-core.md §3.2
// for profile context pc.
func (rt *Runtime) build(pc *profile.Context, b backend.Backend, skl []skills.Info, limits agent.Limits) (*agent.Config, error) {
	m, ok := rt.cfg.Models[pc.Model]
	if !ok {
		return nil, fmt.Errorf("%w: unknown model %q", agent.ErrInvalidInput, pc.Model)
	}
	mw := rt.cfg.Middleware
	var stack []agent.Middleware
	if (mw.Todos.Enabled == nil || *mw.Todos.Enabled) && pc.Allow(todos.ToolName) {
		stack = append(stack, todos.New(mw.Todos.Config))
	}
	if b != nil {
		fc := mw.Filesystem
		fc.Preset = pc.Preset
		fc.Vision = m.Vision
		stack = append(stack, filesystem.New(b, fc))
	}
	if len(pc.Subagents) > 0 && pc.Allow(subagents.ToolName) {
		var avail []subagents.Subagent
		for _, n := range pc.Subagents {
			p, _ := rt.profiles.Subagent(n)
			avail = append(avail, subagents.Subagent{Name: n, Description: p.Description})
		}
		parent := pc
		stack = append(stack, subagents.New(subagents.Config{
			MaxDepth: rt.cfg.Middleware.Subagents.MaxDepth, Depth: pc.Depth, Available: avail,
			Build: func(_ context.Context, rc *agent.RunContext, name string) (*agent.Config, error) {
				sc, err := rt.profiles.ResolveSubagent(name, parent)
				if err != nil {
					return nil, err
				}
				sl := limits
				sl.MaxIterations, sl.Timeout = sc.MaxSteps, sc.Timeout
				return rt.build(sc, rc.Backend, skl, sl)
			},
		}))
	}
	if sc := mw.Summarization; sc.Enabled == nil || *sc.Enabled {
		cfg := sc.Config
		sm := m
		if sc.Model != "" {
			sm = rt.cfg.Models[sc.Model]
		}
		cfg.Summarizer, cfg.SummarizerName, cfg.SummarizerWindow = sm.Chat, sm.Name, sm.ContextWindow
		cfg.ContextWindow = m.ContextWindow
		cfg.Backend = b
		cfg.ArtifactsRoot = mw.Filesystem.ArtifactsRoot
		stack = append(stack, summarization.New(cfg))
	}
	if mw.PatchToolCalls == nil || *mw.PatchToolCalls {
		stack = append(stack, patchcalls.New())
	}
	if len(rt.cfg.Hooks) > 0 {
		h, err := hooks.New(rt.cfg.Hooks, rt.lg)
		if err != nil {
			return nil, err
		}
		stack = append(stack, h)
	}
	for _, f := range rt.cfg.UserMiddleware {
		um := f(ContextInfo{Agent: pc.Name, Depth: pc.Depth, AllowsAny: pc.AllowsAny, InterruptOn: slices.Sorted(maps.Keys(pc.InterruptOn))})
		if um == nil {
			continue
		}
		if i := slices.IndexFunc(stack, func(x agent.Middleware) bool { return x.Name() == um.Name() }); i >= 0 {
			stack[i] = um
			continue
		}
		stack = append(stack, um)
	}
	if pc.Memory && len(mw.Memory.Paths) > 0 && rt.cfg.Prompt.Enabled(prompt.Memory) && b != nil {
		mc := mw.Memory
		mc.Guidance = rt.cfg.Prompt.Sections[prompt.Memory].Text
		stack = append(stack, memory.New(mc))
	}
	if sc := mw.Skills; (sc.Enabled == nil || *sc.Enabled) && b != nil {
		var visible []skills.Info
		for _, s := range skl {
			if s.Origin != skills.OriginConfig || slices.Contains(pc.Skills, s.Name) {
				visible = append(visible, s)
			}
		}
		if len(visible) > 0 || sc.Workspace {
			stack = append(stack, skillprompt.New(skillprompt.Config{Skills: visible, Workspace: sc.Workspace, Backend: b}))
		}
	}
	rules := make(map[string]hitl.Rule, len(pc.InterruptOn))
	for tool, r := range pc.InterruptOn {
		rules[tool] = hitl.Rule{Allowed: r.Allowed, Description: r.Description, Off: r.Off}
	}
	stack = append(stack, hitl.New(rules, rt.Capabilities))

	var regTools []agent.Tool
	if rt.cfg.Tools != nil {
		regTools = rt.cfg.Tools.Tools(nil)
	}
	_, sandbox := b.(backend.Executor)
	subagent := pc.Kind == profile.Subagent
	return &agent.Config{
		Agent: pc.Name, ModelKey: pc.Model, ProviderModel: m.Name, Provider: m.Provider, Model: m.Chat,
		MaxTokens: m.MaxOutputTokens, Middleware: stack, Tools: regTools, Allow: pc.Allow,
		Backend: b, Limits: limits,
		SystemPrompt: func(rc *agent.RunContext, defs []model.ToolDef) string {
			names := make([]string, len(defs))
			for i, d := range defs {
				names[i] = d.Name
			}
			wd := "/"
			if b != nil {
				wd = backend.Home(b)
			}
			return prompt.Compose(rt.cfg.Prompt, prompt.Input{
				Subagent: subagent, Tools: names, AgentPrompt: pc.SystemPrompt,
				Env: prompt.Env{WorkingDir: wd, Sandbox: sandbox, Shell: slices.Contains(names, "execute"), Date: rc.StartedAt, Model: m.Name},
			})
		},
	}, nil
}
