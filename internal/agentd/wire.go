package agentd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/plumbhq/plumb/internal/daemon/tracing"
	"github.com/plumbhq/plumb/internal/egressapproval"
	"github.com/plumbhq/plumb/internal/fleet"
	"github.com/plumbhq/plumb/internal/quota"
	"github.com/plumbhq/plumb/internal/retention"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/internal/webhooks"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/agent/middleware/filesystem"
	"github.com/plumbhq/plumb/pkg/agent/middleware/hooks"
	"github.com/plumbhq/plumb/pkg/agent/middleware/memory"
	"github.com/plumbhq/plumb/pkg/agent/middleware/summarization"
	"github.com/plumbhq/plumb/pkg/agent/middleware/todos"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/agent/prompt"
	"github.com/plumbhq/plumb/pkg/agent/tools"
	"github.com/plumbhq/plumb/pkg/agent/tools/mcptool"
	"github.com/plumbhq/plumb/pkg/agent/tools/python"
	"github.com/plumbhq/plumb/pkg/agent/tools/websearch"
	"github.com/plumbhq/plumb/pkg/backend/storefs"
	"github.com/plumbhq/plumb/pkg/egress"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/model/demo"
	"github.com/plumbhq/plumb/pkg/model/openai"
	"github.com/plumbhq/plumb/pkg/secrets"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/postgres"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// DefaultModelKey names the model agentd builds from the environment when
// the config has no models section.
const DefaultModelKey = "default"

// Env is how Build reads environment variables (os.Getenv in agentd).
type Env func(string) string

// Agentd is the assembled agent core.
type Agentd struct {
	// Runtime runs agents.
	Runtime *deep.Runtime
	// Store is the thread store: SQLite, or PostgreSQL when
	// storage.postgres_dsn is set.
	Store store.Threads
	// Backends builds and cleans up thread backends (sandboxes).
	Backends *ThreadBackends
	// Secrets is the tenants' secret store (sealed in Store).
	Secrets *secrets.Vault
	// Config is the effective configuration.
	Config *Config
	// MCP holds the sessions of the mcp_servers; nil without any.
	MCP *mcptool.Manager
	// Egress decides the boxes' connections that wait for a human
	// (sandbox.template.egress_approval); nil when that is off.
	Egress *egressapproval.Service

	// Quotas checks the tenants' quotas (`quotas`); nil when none is
	// set.
	Quotas *quota.Checker

	// webhooks are the checked webhook settings (webhookService).
	webhooks webhooks.Config
	lg       *zap.Logger

	cleanup []func()
	// warnings are logged only once Build has accepted the config.
	warnings []func()
}

// ServiceConfig is the AgentService configuration of this core, as
// cmd/agentd serves it: the runtime, the thread store, sandbox cleanup,
// the server and limits settings and, on PostgreSQL, the thread leases
// and run event log that let several replicas (each with its own
// replicaID) share the store.
func (a *Agentd) ServiceConfig(replicaID string) agentsvc.Config {
	sc := a.Config.Server
	c := agentsvc.Config{
		Runtime: a.Runtime,
		Secrets: a.Secrets,
		Skills:  a.Backends.skillStore,
		Config: runhost.Config{
			Threads: runhost.DurableThreads(a.Store),
			OnDeleteThread: func(ctx context.Context, td *agent.ThreadData) error {
				return a.Backends.DeleteThread(ctx, td.Thread.ID)
			},
			MaxConcurrentRuns:  sc.MaxConcurrentRuns,
			DetachOnDisconnect: sc.DetachOnDisconnect,
			ReplayRetention:    sc.ReplayRetention,
			ReplayMaxEvents:    sc.ReplayMaxEvents,
			ReplayMaxBytes:     int(sc.ReplayMaxBytes),
		},
		MaxIterations: a.Config.Limits.MaxIterations,
		RunTimeout:    a.Config.Limits.RunTimeout,
		Models:        a.ModelKeys(),
		SchedulePoll:  sc.SchedulePoll,
		Replica:       replicaID,
	}
	if ss, ok := a.Store.(store.Schedules); ok {
		c.Schedules = ss
	}
	if rs, ok := a.Store.(store.Runs); ok {
		c.Runs = rs
	}
	if m, ok := a.Store.(store.StorageMeter); ok {
		c.Storage = m
	}
	if sl, ok := a.Store.(store.SandboxLedger); ok {
		c.Sandboxes = sl
	}
	if st, ok := a.Store.(store.Steers); ok {
		c.Steers = st
	}
	if l, ok := a.Store.(store.Ledger); ok {
		c.Ledger = l
		c.OnUsage = runhost.RecordUsage(a.Store, l)
	}
	if a.Quotas != nil {
		c.Admit, c.AdmitQueued = a.Quotas.Admit, a.Quotas.AdmitQueued
	}
	c.OnBusy, _ = runhost.ParseOnBusy(sc.OnBusy)
	for name, p := range a.Config.Agents {
		if ob, _ := runhost.ParseOnBusy(p.OnBusy); p.OnBusy != "" {
			if c.AgentOnBusy == nil {
				c.AgentOnBusy = map[string]runhost.OnBusy{}
			}
			c.AgentOnBusy[name] = ob
			if name == a.Config.Defaults.Agent {
				c.AgentOnBusy[""] = ob
			}
		}
	}
	if a.Egress != nil {
		c.Egress = a.Egress
	}
	if tb := a.ThreadBoxes(); tb != nil {
		c.Workspace = tb
	}
	if a.Backends.pool != nil {
		c.Fleet = a.Backends.pool
	}
	if mr, ok := a.Store.(store.MessageRanger); ok {
		c.Messages = mr
	}
	if ls, ok := a.Store.(store.LeaseStore); ok && a.Config.Storage.PostgresDSN != "" {
		c.Leases, c.Events, c.ReplicaID, c.LeaseTTL = ls, ls, replicaID, a.Config.Storage.LeaseTTL
	}
	if rs, ok := a.Store.(store.Retention); ok && a.Config.Retention.Interval >= 0 {
		c.Retention = &retention.Config{Store: rs, Policy: RetentionPolicy(a.Config.Retention), Interval: a.Config.Retention.Interval}
		AgentRetentionPolicy(a.Config, &c.Retention.Policy)
		if a.Backends.files != nil {
			c.Retention.Items = a.Backends.files
		}
		if a.Backends.snaps != nil {
			c.Retention.Snapshots = a.Backends
		}
		if ss, ok := a.Store.(store.Sessions); ok {
			c.Retention.Sessions = ss
		}
		if runs, ok := a.Store.(store.Runs); ok && len(c.Retention.Policy.Agents) > 0 {
			c.Retention.ThreadInfo = threadInfo(a.Store, runs)
		}
	}
	// Webhooks: runs record their deliveries as they end (OnRunEnd);
	// cmd/agentd runs the service's delivery loop.
	if w := a.webhookService(replicaID); w != nil {
		c.Webhooks = w
		if w.Enabled() {
			c.OnRunEnd = w.OnRunEnd
		}
	}
	// Then the thread's workspace snapshot at the checkpoint a run ended
	// or paused at, taken before the thread's lease is released (nothing
	// else writes into the box meanwhile). The webhooks' quick insert
	// goes first: the snapshot may outlast the hook's own deadline (it
	// has its own, sandbox.snapshots.timeout).
	if a.Backends.pool != nil {
		next := c.OnRunEnd
		c.OnRunEnd = func(ctx context.Context, end runhost.RunEnd) error {
			var err error
			if next != nil {
				err = next(ctx, end)
			}
			_ = a.Backends.OnRunEnd(ctx, end)
			return err
		}
	}
	if a.Backends.snaps != nil {
		c.Snapshots = a.Backends.snaps
	}
	return c
}

// ModelKeys lists the configured model keys, sorted.
func (a *Agentd) ModelKeys() []string { return sortedKeys(a.Config.Models) }

// Close releases the store and connections.
func (a *Agentd) Close() {
	for i := len(a.cleanup) - 1; i >= 0; i-- {
		a.cleanup[i]()
	}
}

// Options are the run-time inputs besides the config file.
type Options struct {
	// Env reads environment variables (API keys, OPENAI_* defaults).
	Env Env
	// Logger is the process logger.
	Logger *zap.Logger
	// TempDir holds the SQLite file when storage.sqlite_path is empty.
	TempDir string
	// WorkerDial are extra dial options for sandboxd workers (credentials).
	WorkerDial []grpc.DialOption
	// RuntimeOptions are passed to deep.New (tests set clocks and ids).
	RuntimeOptions []deep.Option
	// Demo asks for the built-in demo model (pkg/model/demo) when no
	// model is configured at all: no models section and neither
	// OPENAI_BASE_URL nor OPENAI_API_KEY. A configured model always wins.
	Demo bool
	// Tracing, if enabled, records the runs' spans and traces the calls
	// to sandboxd workers, passing the trace context on (nil = off).
	Tracing *tracing.Tracing
	// PythonOptions are passed to python.New (tests run the interpreters
	// on the host with python.WithResolver).
	PythonOptions []python.Option
}

// Build validates cfg and assembles the agent core. Errors name the YAML
// path of the bad value; they mean exit code 2 for agentd.
func Build(ctx context.Context, cfg *Config, o Options) (*Agentd, error) {
	if o.Env == nil {
		o.Env = os.Getenv
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	var demoSrv *demo.Server
	if o.Demo && demoApplies(cfg, o.Env) {
		var err error
		if demoSrv, err = demo.Start(); err != nil {
			return nil, err
		}
		useDemo(cfg, demoSrv.URL())
	}
	applyBuiltins(cfg, o)
	if err := validate(cfg); err != nil {
		if demoSrv != nil {
			_ = demoSrv.Close()
		}
		return nil, err
	}
	a := &Agentd{Config: cfg}
	ok := false
	defer func() {
		if !ok {
			a.Close()
		}
	}()
	if demoSrv != nil {
		a.cleanup = append(a.cleanup, func() { _ = demoSrv.Close() })
		a.warnings = append(a.warnings, func() {
			o.Logger.Warn("DEMO MODEL: no model is configured, so agentd answers with plumb's built-in scripted DEMO model ("+
				"todos, a file written and run in the box after your approval, a subagent); set OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL, "+
				"or a models section, for a real one", zap.String("model", DemoModelKey))
		})
	} else if o.Demo {
		a.warnings = append(a.warnings, func() {
			o.Logger.Info("a model is configured: the demo model stays off")
		})
	}

	// The store first: when it cannot open, that is the one thing to say.
	st, path, err := a.openStore(ctx, cfg, o)
	if err != nil {
		return nil, err
	}
	a.Store = st
	if a.Secrets, err = buildVault(cfg, st, o.Env); err != nil {
		return nil, err
	}
	if a.webhooks, err = webhookConfig(cfg); err != nil {
		return nil, err
	}
	for name, ts := range a.webhooks.Agents {
		if len(ts) > 0 && !a.Secrets.Sealer().Enabled() {
			return nil, fmt.Errorf("agents.%s.webhooks: webhooks need a secrets key (secrets.key or PLUMB_SECRETS_KEY) to seal their signing keys", name)
		}
	}
	a.lg = o.Logger

	models, err := buildModels(cfg, o.Env, o.Logger)
	if err != nil {
		return nil, err
	}

	tb, err := newThreadBackends(cfg, path, st, o.Logger, append(slices.Clone(o.WorkerDial), o.Tracing.DialOptions()...)...)
	if err != nil {
		return nil, err
	}
	a.Backends = tb
	tb.secrets = a.Secrets
	if sk, ok := st.(store.Skills); ok {
		tb.skillStore = sk
	}
	if sl, ok := st.(store.SandboxLedger); ok {
		tb.lifetimes = sl
	}
	if ss, ok := st.(store.ThreadSnapshots); ok {
		tb.snaps = ss
	}
	cfgSkills, profileSkills, err := loadConfigSkills(cfg.Agents, cfg.Subagents)
	if err != nil {
		return nil, err
	}
	tb.configSkills = cfgSkills
	a.cleanup = append(a.cleanup, tb.Close)
	if ap := cfg.Sandbox.Template.EgressApproval; ap.Enabled {
		es, ok := st.(egressapproval.Store)
		if !ok {
			return nil, errors.New("sandbox.template.egress_approval: this thread store keeps no egress records")
		}
		if a.Egress, err = egressapproval.New(egressapproval.Config{Store: es, Workers: tb.pool, Timeout: ap.Timeout, Logger: o.Logger}); err != nil {
			return nil, fmt.Errorf("sandbox.template.egress_approval: %w", err)
		}
		tb.egress = a.Egress
		a.cleanup = append(a.cleanup, a.Egress.Close)
	}

	dc := deep.Config{
		Models:       models,
		DefaultAgent: cfg.Defaults.Agent,
		DefaultModel: cfg.Defaults.Model,
		Limits: agent.Limits{
			MaxIterations: cfg.Limits.MaxIterations, Timeout: cfg.Limits.RunTimeout, ToolTimeout: cfg.Limits.ToolTimeout,
			MaxParallelTools: cfg.Limits.MaxParallelTools, MaxParallelSubagents: cfg.Limits.MaxParallelSubagents, CancelGrace: cfg.Limits.CancelGrace,
		},
		Store:   st,
		Backend: tb.Build,
	}
	if dc.Agents, err = profiles(cfg.Agents, "agents"); err != nil {
		return nil, err
	}
	if dc.Subagents, err = profiles(cfg.Subagents, "subagents"); err != nil {
		return nil, err
	}
	for key, names := range profileSkills {
		section, name, _ := strings.Cut(key, ".")
		m := dc.Agents
		if section == "subagents" {
			m = dc.Subagents
		}
		p := m[name]
		p.Skills = names
		m[name] = p
	}
	// A config written in code (no file: agentd without --config) gets
	// the current tool groups; a file without version is version 1.
	dc.Version = cfg.Version
	mw := cfg.Middleware
	dc.Middleware = deep.MiddlewareConfig{
		Todos:          deep.TodosConfig{Enabled: mw.Todos.Enabled, Config: todos.Config{ReminderEvery: mw.Todos.ReminderEvery, MaxItems: mw.Todos.MaxItems}},
		Subagents:      deep.SubagentsConfig{GeneralPurpose: mw.Subagents.GeneralPurpose, MaxDepth: mw.Subagents.MaxDepth},
		PatchToolCalls: mw.PatchToolCalls.Enabled,
		Memory:         memory.Config{Paths: mw.Memory.Paths, MaxFileBytes: mw.Memory.MaxFileBytes},
		Skills:         deep.SkillsConfig{Enabled: mw.Skills.Enabled, Workspace: mw.Skills.Workspace},
		Filesystem: filesystem.Config{
			EvictToolResultChars: mw.Filesystem.EvictToolResultChars, EvictExempt: mw.Filesystem.EvictExempt,
			PreviewLines: mw.Filesystem.PreviewLines, PreviewLineChars: mw.Filesystem.PreviewLineChars,
			EvictUserMessageChars: mw.Filesystem.EvictUserMessageChars, GrepMaxCount: mw.Filesystem.GrepMaxCount,
			ExecuteMaxTimeout: mw.Filesystem.ExecuteMaxTimeout, ExecuteDefaultTimeout: cfg.Tools.Execute.DefaultTimeout,
			GrepLiteralOnly: cfg.Tools.Grep.Regex != nil && !*cfg.Tools.Grep.Regex,
			ArtifactsRoot:   cfg.Backends.ArtifactsRoot,
		},
		Summarization: deep.SummarizationConfig{
			Enabled: mw.Summarization.Enabled,
			Model:   mw.Summarization.Model,
			Config: summarization.Config{
				TriggerFraction: mw.Summarization.TriggerFraction, TriggerTokens: mw.Summarization.TriggerTokens,
				TriggerMaxTokens: mw.Summarization.TriggerMaxTokens, KeepFraction: mw.Summarization.KeepFraction,
				KeepMessages: mw.Summarization.KeepMessages, MaxSummarizerInputTokens: mw.Summarization.MaxSummarizerInputTokens,
				SummaryMaxTokens: mw.Summarization.SummaryMaxTokens, Timeout: mw.Summarization.Timeout,
				ReminderFraction: mw.Summarization.ReminderFraction, ArtifactsRoot: cfg.Backends.ArtifactsRoot,
			},
		},
	}
	if err := a.quotas(cfg, st, tb, &dc); err != nil {
		return nil, err
	}
	for _, h := range cfg.Hooks {
		hk := hooks.Hook{Name: h.Name, Phase: h.Phase, Tools: h.Tools, Action: h.Action, Message: h.Message, Replacement: h.Replacement}
		if h.Match != nil {
			hk.Match = &hooks.Match{Arg: h.Match.Arg, Regex: h.Match.Regex}
		}
		dc.Hooks = append(dc.Hooks, hk)
	}
	dc.Prompt = prompt.Config{Sections: map[string]prompt.Override{}}
	for name, s := range cfg.Prompt.Sections {
		dc.Prompt.Sections[name] = prompt.Override{Disabled: s.Disabled, Text: s.Text}
	}
	if cfg.Tools.TestKit {
		dc.Tools = tools.NewRegistry()
		if err := dc.Tools.RegisterGroup(tools.TestKitGroup, tools.NewTestKit().Tools()...); err != nil {
			return nil, fmt.Errorf("tools.test_kit: %w", err)
		}
	}
	if err := a.webSearch(cfg, o, &dc); err != nil {
		return nil, err
	}
	if err := a.mcpServers(cfg, o, &dc); err != nil {
		return nil, err
	}
	if err := a.python(cfg, o, &dc); err != nil {
		return nil, err
	}
	rt, err := deep.New(dc, append([]deep.Option{deep.WithLogger(o.Logger), deep.WithTracerProvider(o.Tracing.TracerProvider())}, o.RuntimeOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	a.Runtime = rt

	// The config is valid: only now touch stored runs and say what is
	// missing, so that a rejected config changes and logs nothing.
	// On PostgreSQL other replicas may be running threads: only the runs
	// nobody runs or will take over are failed (runs under an expired
	// lease are taken over by internal/runhost).
	failRuns := st.FailRunningRuns
	if ls, ok := st.(store.LeaseStore); ok && cfg.Storage.PostgresDSN != "" {
		failRuns = ls.FailUnleasedRuns
	}
	if n, err := failRuns(ctx, "agentd restarted"); err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	} else if n > 0 {
		o.Logger.Info("marked interrupted runs failed", zap.Int("runs", n))
	}
	for _, warn := range a.warnings {
		warn()
	}
	for _, key := range sortedKeys(models) {
		if u, ok := models[key].Chat.(unconfigured); ok {
			o.Logger.Warn("model is not configured; runs that use it will fail", zap.String("model", key), zap.String("api-key-env", u.env))
		}
	}
	ok = true
	return a, nil
}

// webSearch registers web_search when tools.web_search is configured. A
// Tavily provider whose key is not in the environment is registered
// hidden: it is not offered to the model, allow-lists that name it stay
// valid, and a call explains what is missing.
func (a *Agentd) webSearch(cfg *Config, o Options, dc *deep.Config) error {
	ws := cfg.Tools.WebSearch
	if ws == nil {
		return nil
	}
	keyEnv := ws.APIKeyEnv
	if keyEnv == "" {
		keyEnv = "TAVILY_API_KEY"
	}
	wc := websearch.Config{
		Provider: ws.Provider, BaseURL: ws.BaseURL, Timeout: ws.Timeout, MaxRetryAfter: ws.MaxRetryAfter, DefaultResults: ws.MaxResults,
	}
	if ws.MaxResults < 0 || ws.MaxResults > 10 {
		return fmt.Errorf("tools.web_search.max_results: %d (want 1 to 10)", ws.MaxResults)
	}
	if ws.Timeout < 0 || ws.MaxRetryAfter < 0 {
		return errors.New("tools.web_search: durations must be positive")
	}
	var tool agent.Tool
	if ws.Provider == websearch.ProviderTavily && o.Env(keyEnv) == "" {
		// Validate the rest of the section with a placeholder key.
		wc.APIKey = "unset"
		s, err := websearch.New(wc)
		if err != nil {
			return fmt.Errorf("tools.web_search: %w", err)
		}
		s.Close()
		msg := fmt.Sprintf("web search is not configured: agentd has no Tavily API key in %s", keyEnv)
		tool = agent.Tool{Name: websearch.ToolName, Hidden: true, Capabilities: agent.CapNetwork, Func: func(context.Context, *agent.ToolRequest) (agent.ToolResult, error) {
			return agent.ToolResult{}, errors.New(msg)
		}}
		a.warnings = append(a.warnings, func() {
			o.Logger.Warn("tools.web_search is configured but its API key is missing: web_search is not offered", zap.String("api-key-env", keyEnv))
		})
	} else {
		wc.APIKey = o.Env(keyEnv)
		s, err := websearch.New(wc)
		if err != nil {
			return fmt.Errorf("tools.web_search: %w", err)
		}
		a.cleanup = append(a.cleanup, s.Close)
		tool = s.Tool()
	}
	if dc.Tools == nil {
		dc.Tools = tools.NewRegistry()
	}
	if err := dc.Tools.Register(tool); err != nil {
		return fmt.Errorf("tools.web_search: %w", err)
	}
	return nil
}

// envRef is a ${VAR} reference in an MCP server's env or headers.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// mcpServers builds the MCP manager when mcp_servers is configured and
// adds its middleware to every agent context. A ${VAR} whose variable is
// not set makes that server unavailable (its calls say which variable),
// with a warning at startup, as web_search does without its key.
func (a *Agentd) mcpServers(cfg *Config, o Options, dc *deep.Config) error {
	if len(cfg.MCPServers) == 0 {
		return nil
	}
	var servers []mcptool.Server
	for _, name := range sortedKeys(cfg.MCPServers) {
		c := cfg.MCPServers[name]
		var missing []string
		expand := func(m map[string]string) map[string]string {
			if m == nil {
				return nil
			}
			out := make(map[string]string, len(m))
			for k, v := range m {
				out[k] = envRef.ReplaceAllStringFunc(v, func(ref string) string {
					key := envRef.FindStringSubmatch(ref)[1]
					val := o.Env(key)
					if val == "" && !slices.Contains(missing, key) {
						missing = append(missing, key)
					}
					return val
				})
			}
			return out
		}
		srv := mcptool.Server{
			Name: name, Command: c.Command, Args: c.Args, Env: expand(c.Env), Cwd: c.Cwd,
			URL: c.URL, Headers: expand(c.Headers), Timeout: c.Timeout, StartupTimeout: c.StartupTimeout,
			Tools: c.Tools, MaxResultChars: c.MaxResultChars, MaxMessageBytes: int(c.MaxMessageBytes),
		}
		if err := srv.Validate(); err != nil {
			return fmt.Errorf("mcp_servers.%s: %w", name, err)
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			srv.Unavailable = fmt.Sprintf("agentd has no value for %s in its environment", strings.Join(missing, ", "))
			a.warnings = append(a.warnings, func() {
				o.Logger.Warn("an MCP server's configuration names unset environment variables; the server is unavailable",
					zap.String("mcp-server", name), zap.Strings("env", missing))
			})
		}
		servers = append(servers, srv)
	}
	mgr, err := mcptool.NewManager(servers, o.Logger)
	if err != nil {
		return fmt.Errorf("mcp_servers: %w", err)
	}
	a.cleanup = append(a.cleanup, mgr.Close)
	a.MCP = mgr
	dc.ToolPrefixes = append(dc.ToolPrefixes, mgr.Prefixes()...)
	dc.UserMiddleware = append(dc.UserMiddleware, func(ci deep.ContextInfo) agent.Middleware {
		return mgr.Middleware(ci.AllowsAny).CheckGates(ci.Agent, ci.InterruptOn)
	})
	return nil
}

// quotas builds the quota checker when a quota is set, and its
// middleware (tokens_per_day before every model call).
func (a *Agentd) quotas(cfg *Config, st store.Threads, tb *ThreadBackends, dc *deep.Config) error {
	p := QuotaPolicy(cfg.Quotas)
	if !p.Enabled() {
		return nil
	}
	counts, ok := st.(quota.Counts)
	if !ok {
		return errors.New("quotas: this thread store cannot count for quotas")
	}
	q, err := quota.New(quota.Config{Policy: p, Counts: counts, Sandboxes: tb.pool != nil})
	if err != nil {
		return fmt.Errorf("quotas: %w", err)
	}
	a.Quotas = q
	if q.TokensMetered() {
		tenantOf := func(ctx context.Context, threadID string) (string, error) {
			t, err := st.Thread(ctx, threadID)
			if err != nil {
				return "", err
			}
			return store.TenantOf(t), nil
		}
		dc.UserMiddleware = append(dc.UserMiddleware, func(deep.ContextInfo) agent.Middleware { return q.Middleware(tenantOf) })
	}
	return nil
}

// python registers the python tool unless tools.python.enabled is false,
// with the middleware that offers it only to runs whose sandbox has
// python3. Close closes its interpreters.
func (a *Agentd) python(cfg *Config, o Options, dc *deep.Config) error {
	pc := cfg.Tools.Python
	if pc.Enabled != nil && !*pc.Enabled {
		return nil
	}
	for name, d := range map[string]time.Duration{
		"timeout": pc.Timeout, "max_timeout": pc.MaxTimeout, "idle_timeout": pc.IdleTimeout, "start_timeout": pc.StartTimeout,
	} {
		if d < 0 {
			return fmt.Errorf("tools.python.%s: durations must be positive", name)
		}
	}
	if pc.MaxTimeout > 0 && pc.Timeout > pc.MaxTimeout {
		return fmt.Errorf("tools.python.timeout: %s is longer than max_timeout %s", pc.Timeout, pc.MaxTimeout)
	}
	for name, n := range map[string]int{"max_interpreters": pc.MaxInterpreters, "max_output_chars": pc.MaxOutputChars} {
		if n < 0 {
			return fmt.Errorf("tools.python.%s: %d must not be negative (0 or absent = the default)", name, n)
		}
	}
	m := python.New(python.Config{
		Timeout: pc.Timeout, MaxTimeout: pc.MaxTimeout, IdleTimeout: pc.IdleTimeout, StartTimeout: pc.StartTimeout,
		MaxInterpreters: pc.MaxInterpreters, MaxOutputChars: pc.MaxOutputChars,
	}, append([]python.Option{python.WithLogger(o.Logger)}, o.PythonOptions...)...)
	a.cleanup = append(a.cleanup, m.Close)
	if dc.Tools == nil {
		dc.Tools = tools.NewRegistry()
	}
	if err := dc.Tools.Register(m.Tool()); err != nil {
		return fmt.Errorf("tools.python: %w", err)
	}
	hider := m.Middleware()
	dc.UserMiddleware = append(dc.UserMiddleware, func(deep.ContextInfo) agent.Middleware { return hider })
	return nil
}

// openStore opens the thread store that storage names (Close closes it)
// and returns it with the SQLite file that holds store routes ("" when
// nothing needs one).
func (a *Agentd) openStore(ctx context.Context, cfg *Config, o Options) (store.Threads, string, error) {
	s := cfg.Storage
	if s.PostgresDSN == "" {
		path, err := a.sqliteFile(s.SQLitePath, o, "threads")
		if err != nil {
			return nil, "", err
		}
		st, err := sqlite.Open(ctx, path, sqlite.Options{BusyTimeout: s.BusyTimeout, CheckpointRetention: s.CheckpointRetention,
			AgentCheckpointRetention: AgentCheckpointsKeep(cfg)})
		if err != nil {
			return nil, "", fmt.Errorf("storage.sqlite_path: %w", err)
		}
		a.cleanup = append(a.cleanup, func() { st.Close() })
		return st, path, nil
	}
	st, err := postgres.Open(ctx, s.PostgresDSN, postgres.Options{BusyTimeout: s.BusyTimeout, CheckpointRetention: s.CheckpointRetention,
		AgentCheckpointRetention: AgentCheckpointsKeep(cfg)})
	if err != nil {
		return nil, "", fmt.Errorf("storage.postgres_dsn: %w", err)
	}
	a.cleanup = append(a.cleanup, func() { st.Close() })
	o.Logger.Info("threads are kept in PostgreSQL", zap.String("postgres", postgres.Describe(s.PostgresDSN)))
	for _, r := range cfg.Backends.Routes {
		if r.Type != "store" {
			continue
		}
		path, err := a.sqliteFile(s.SQLitePath, o, "the files of store routes")
		if err != nil {
			return nil, "", err
		}
		o.Logger.Warn("store routes keep their files in SQLite, not in PostgreSQL: agentd replicas do not share them", zap.String("path", path))
		return st, path, nil
	}
	return st, "", nil
}

// sqliteFile returns path (storage.sqlite_path) after creating its
// directory or, when it is empty, a file in a temporary directory that
// Close removes; what says what would be lost with it.
func (a *Agentd) sqliteFile(path string, o Options, what string) (string, error) {
	if path != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return "", fmt.Errorf("storage.sqlite_path: %w", err)
		}
		return path, nil
	}
	dir := o.TempDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "agentd-"); err != nil {
			return "", err
		}
		a.cleanup = append(a.cleanup, func() { os.RemoveAll(dir) })
	}
	path = filepath.Join(dir, "agentd.db")
	// Said once the whole config is known to be valid (Build).
	a.warnings = append(a.warnings, func() {
		o.Logger.Warn("storage.sqlite_path is not set: "+what+" are kept in a temporary file and lost at exit", zap.String("path", path))
	})
	return path, nil
}

// DemoModelKey is the model key of the demo model.
const DemoModelKey = "demo"

// demoApplies reports that no model is configured: no models section and
// no OpenAI endpoint or key in the environment.
func demoApplies(cfg *Config, env Env) bool {
	return len(cfg.Models) == 0 && env("OPENAI_BASE_URL") == "" && env("OPENAI_API_KEY") == ""
}

// useDemo configures the demo model at baseURL as the only model, and
// gates execute on the main agent (unless its config gates already) so
// that the demo's command waits for a human's approval.
func useDemo(cfg *Config, baseURL string) {
	cfg.Models = map[string]ModelConfig{DemoModelKey: {BaseURL: baseURL, APIKeyEnv: "PLUMB_DEMO_MODEL_KEY", Model: demo.Model}}
	cfg.Defaults.Model = DemoModelKey
	if cfg.Agents == nil {
		cfg.Agents = map[string]ProfileConfig{}
	}
	main := cfg.Agents[profile.Main]
	if main.InterruptOn == nil {
		main.InterruptOn = &map[string]InterruptOn{"execute": {
			Allowed: []string{"approve", "edit", "reject"}, Description: "The demo runs its script in the box once you approve.",
		}}
	}
	cfg.Agents[profile.Main] = main
}

// applyBuiltins fills what an absent config section means: one model from
// the environment, the default agent, sandbox addresses from flags.
func applyBuiltins(cfg *Config, o Options) {
	if len(cfg.Models) == 0 {
		cfg.Models = map[string]ModelConfig{DefaultModelKey: {
			BaseURL:   o.Env("OPENAI_BASE_URL"),
			APIKeyEnv: "OPENAI_API_KEY",
			Model:     o.Env("OPENAI_MODEL"),
		}}
	}
	if cfg.Defaults.Model == "" && len(cfg.Models) == 1 {
		for k := range cfg.Models {
			cfg.Defaults.Model = k
		}
	}
	if cfg.Backends.Default == "" {
		cfg.Backends.Default = "state"
	}
	if cfg.Storage.CheckpointRetention == 0 {
		cfg.Storage.CheckpointRetention = cfg.Retention.CheckpointsKeep
	}
	if cfg.Backends.ArtifactsRoot == "" {
		cfg.Backends.ArtifactsRoot = "/"
	}
	// A sandbox's root is read-only: without routes of its own, evicted
	// results and summarized transcripts go to the thread's State (as in
	// internal/agentd/testdata/spec-example.yaml, docs/agent-core.md §5.6).
	if cfg.Backends.Default == "sandbox" && len(cfg.Backends.Routes) == 0 && cfg.Backends.ArtifactsRoot == "/" {
		cfg.Backends.Routes = map[string]RouteConfig{
			"/large_tool_results/":   {Type: "state"},
			"/conversation_history/": {Type: "state"},
		}
	}
}

// RetentionPolicy is the sweeper's policy of rc: the defaults where rc
// says nothing, each tenant's TTLs over the default ones.
func RetentionPolicy(rc RetentionConfig) retention.Policy {
	or := func(d *time.Duration, def time.Duration) time.Duration {
		if d == nil {
			return def
		}
		return *d
	}
	p := retention.Policy{Default: retention.Rules{
		ThreadsIdle:       or(rc.ThreadsIdle, DefaultThreadsIdle),
		WebhookDeliveries: or(rc.WebhookDeliveries, DefaultWebhookDeliveries),
		RunEvents:         or(rc.RunEvents, DefaultRunEvents),
	}, StoreItems: or(rc.StoreItems, DefaultStoreItems)}
	for name, r := range rc.Tenants {
		if p.Tenants == nil {
			p.Tenants = map[string]retention.Rules{}
		}
		p.Tenants[name] = retention.Rules{
			ThreadsIdle:       or(r.ThreadsIdle, p.Default.ThreadsIdle),
			WebhookDeliveries: or(r.WebhookDeliveries, p.Default.WebhookDeliveries),
			RunEvents:         or(r.RunEvents, p.Default.RunEvents),
		}
	}
	return p
}

// QuotaPolicy is the quota policy of qc: each tenant's quotas over the
// default ones.
func QuotaPolicy(qc QuotasConfig) quota.Policy {
	or := func(n *int, def int) int {
		if n == nil {
			return def
		}
		return *n
	}
	p := quota.Policy{Default: quota.Limits{
		ConcurrentRuns: or(qc.ConcurrentRuns, 0), RunsPerMinute: or(qc.RunsPerMinute, 0),
		TokensPerDay: or(qc.TokensPerDay, 0), LiveSandboxes: or(qc.LiveSandboxes, 0),
	}}
	for name, l := range qc.Tenants {
		if p.Tenants == nil {
			p.Tenants = map[string]quota.Limits{}
		}
		d := p.Default
		p.Tenants[name] = quota.Limits{
			ConcurrentRuns: or(l.ConcurrentRuns, d.ConcurrentRuns), RunsPerMinute: or(l.RunsPerMinute, d.RunsPerMinute),
			TokensPerDay: or(l.TokensPerDay, d.TokensPerDay), LiveSandboxes: or(l.LiveSandboxes, d.LiveSandboxes),
		}
	}
	return p
}

// AgentRetentionTTLs are the agents' own threads_idle
// (agents.<name>.retention), the default agent's also under "" (a run
// that named no agent).
func AgentRetentionTTLs(cfg *Config) map[string]time.Duration {
	return agentTTLs(cfg, func(r *AgentRetention) *time.Duration { return r.ThreadsIdle })
}

// AgentRetentionPolicy sets p's per-agent TTLs from the agents' own
// (agents.<name>.retention): threads_idle, run_events and
// webhook_deliveries.
func AgentRetentionPolicy(cfg *Config, p *retention.Policy) {
	p.Agents = AgentRetentionTTLs(cfg)
	p.AgentRunEvents = agentTTLs(cfg, func(r *AgentRetention) *time.Duration { return r.RunEvents })
	p.AgentWebhookDeliveries = agentTTLs(cfg, func(r *AgentRetention) *time.Duration { return r.WebhookDeliveries })
}

// agentTTLs are the agents' own TTLs that pick reads, the default
// agent's also under "" (a run that named no agent); nil when no agent
// has one.
func agentTTLs(cfg *Config, pick func(*AgentRetention) *time.Duration) map[string]time.Duration {
	var out map[string]time.Duration
	for name, p := range cfg.Agents {
		if p.Retention == nil || pick(p.Retention) == nil {
			continue
		}
		if out == nil {
			out = map[string]time.Duration{}
		}
		d := *pick(p.Retention)
		out[name] = d
		if name == cfg.Defaults.Agent {
			out[""] = d
		}
	}
	return out
}

// AgentCheckpointsKeep are the agents' own checkpoints_keep, the default
// agent's also under "", for the stores' AgentCheckpointRetention.
func AgentCheckpointsKeep(cfg *Config) map[string]int {
	var out map[string]int
	for name, p := range cfg.Agents {
		if p.Retention == nil || p.Retention.CheckpointsKeep <= 0 {
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		out[name] = p.Retention.CheckpointsKeep
		if name == cfg.Defaults.Agent {
			out[""] = p.Retention.CheckpointsKeep
		}
	}
	return out
}

// threadInfo tells the retention sweeper a thread's agent (its newest
// run's) and its last update.
func threadInfo(threads store.Threads, runs store.Runs) retention.ThreadInfo {
	return func(ctx context.Context, id string) (string, time.Time, error) {
		t, err := threads.Thread(ctx, id)
		if err != nil {
			return "", time.Time{}, err
		}
		page, _, err := runs.ListRuns(ctx, store.RunQuery{ThreadID: id, PageSize: 1})
		if err != nil || len(page) == 0 {
			return "", t.UpdatedAt, err
		}
		return page[0].Record.Spec.Agent, t.UpdatedAt, nil
	}
}

// validateQuotas checks `quotas`: no negative quota, no empty tenant.
func validateQuotas(qc QuotasConfig) error {
	check := func(prefix string, l QuotaLimits) error {
		for _, f := range []struct {
			name string
			n    *int
		}{{"concurrent_runs", l.ConcurrentRuns}, {"runs_per_minute", l.RunsPerMinute}, {"tokens_per_day", l.TokensPerDay}, {"live_sandboxes", l.LiveSandboxes}} {
			if f.n != nil && *f.n < 0 {
				return fmt.Errorf("%s%s: must not be negative (0 is unlimited)", prefix, f.name)
			}
		}
		return nil
	}
	if err := check("quotas.", qc.QuotaLimits); err != nil {
		return err
	}
	for _, name := range sortedKeys(qc.Tenants) {
		if name == "" {
			return errors.New("quotas.tenants: a tenant name must not be empty")
		}
		if err := check("quotas.tenants."+name+".", qc.Tenants[name]); err != nil {
			return err
		}
	}
	return nil
}

// validateRetention checks `retention`: no negative TTL or count, and
// checkpoints_keep agreeing with storage.checkpoint_retention.
func validateRetention(cfg *Config) error {
	rc := cfg.Retention
	neg := func(path string, d *time.Duration) error {
		if d != nil && *d < 0 {
			return fmt.Errorf("%s: must not be negative (0 keeps forever)", path)
		}
		return nil
	}
	errs := []error{neg("retention.threads_idle", rc.ThreadsIdle), neg("retention.webhook_deliveries", rc.WebhookDeliveries), neg("retention.run_events", rc.RunEvents),
		neg("retention.store_items", rc.StoreItems)}
	for _, name := range sortedKeys(rc.Tenants) {
		if name == "" {
			return errors.New("retention.tenants: a tenant name must not be empty")
		}
		r := rc.Tenants[name]
		errs = append(errs, neg("retention.tenants."+name+".threads_idle", r.ThreadsIdle), neg("retention.tenants."+name+".webhook_deliveries", r.WebhookDeliveries),
			neg("retention.tenants."+name+".run_events", r.RunEvents))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	switch st := cfg.Storage.CheckpointRetention; {
	case rc.CheckpointsKeep < 0:
		return errors.New("retention.checkpoints_keep: must not be negative")
	case rc.CheckpointsKeep > 0 && st > 0 && st != rc.CheckpointsKeep:
		return fmt.Errorf("retention.checkpoints_keep: %d disagrees with storage.checkpoint_retention %d (set one)", rc.CheckpointsKeep, st)
	}
	return nil
}

// validateAgentRetention checks an agent's `retention` at path: no
// negative TTL or count.
func validateAgentRetention(path string, r *AgentRetention) error {
	if r == nil {
		return nil
	}
	for _, f := range []struct {
		key string
		d   *time.Duration
	}{{"threads_idle", r.ThreadsIdle}, {"run_events", r.RunEvents}, {"webhook_deliveries", r.WebhookDeliveries}} {
		if f.d != nil && *f.d < 0 {
			return fmt.Errorf("%s.%s: must not be negative (0 keeps forever)", path, f.key)
		}
	}
	if r.CheckpointsKeep < 0 {
		return fmt.Errorf("%s.checkpoints_keep: must not be negative (0 is retention.checkpoints_keep)", path)
	}
	return nil
}

// validate checks what deep.New does not: references into the models
// table, backend types, routes and fractions.
func validate(cfg *Config) error {
	if err := validateRetention(cfg); err != nil {
		return err
	}
	if err := validateQuotas(cfg.Quotas); err != nil {
		return err
	}
	if err := validateEgressSecrets(cfg.Sandbox.Template); err != nil {
		return err
	}
	if err := validateEgressApproval(cfg.Sandbox); err != nil {
		return err
	}
	if err := validateVolumes(cfg.Sandbox.Template); err != nil {
		return err
	}
	known := strings.Join(sortedKeys(cfg.Models), ", ")
	if _, ok := cfg.Models[cfg.Defaults.Model]; !ok {
		return fmt.Errorf("defaults.model: %q is not a key of models (known: %s)", cfg.Defaults.Model, known)
	}
	for _, section := range []struct {
		name string
		m    map[string]ProfileConfig
	}{{"agents", cfg.Agents}, {"subagents", cfg.Subagents}} {
		for name, p := range section.m {
			if _, ok := cfg.Models[p.Model]; p.Model != "" && !ok {
				return fmt.Errorf("%s.%s.model: %q is not a key of models (known: %s)", section.name, name, p.Model, known)
			}
		}
	}
	if m := cfg.Middleware.Summarization.Model; m != "" {
		if _, ok := cfg.Models[m]; !ok {
			return fmt.Errorf("middleware.summarization.model: %q is not a key of models (known: %s)", m, known)
		}
	}
	if _, err := runhost.ParseOnBusy(cfg.Server.OnBusy); err != nil {
		return fmt.Errorf("server.on_busy: %w", err)
	}
	for name, p := range cfg.Agents {
		if _, err := runhost.ParseOnBusy(p.OnBusy); err != nil {
			return fmt.Errorf("agents.%s.on_busy: %w", name, err)
		}
		if err := validateAgentRetention("agents."+name+".retention", p.Retention); err != nil {
			return err
		}
	}
	for name, p := range cfg.Subagents {
		if p.Retention != nil {
			return fmt.Errorf("subagents.%s.retention: only primary agents have retention (a thread's agent is its last run's)", name)
		}
	}
	switch cfg.Backends.Default {
	case "state", "sandbox":
	case "filesystem":
		if cfg.Backends.Root == "" {
			return errors.New("backends.root: a filesystem default backend needs a host directory")
		}
	default:
		return fmt.Errorf("backends.default: %q (want state, filesystem or sandbox)", cfg.Backends.Default)
	}
	if cfg.Backends.Default == "sandbox" && cfg.Sandbox.Address == "" {
		return errors.New("sandbox.address: backends.default is sandbox but no sandboxd address is configured")
	}
	for prefix, r := range cfg.Backends.Routes {
		where := "backends.routes." + prefix
		if !strings.HasPrefix(prefix, "/") || !strings.HasSuffix(prefix, "/") || prefix == "/" {
			return fmt.Errorf("%s: a route prefix starts and ends with / and is not /", where)
		}
		switch r.Type {
		case "state":
		case "store":
			if len(r.Namespace) == 0 {
				return fmt.Errorf("%s.namespace: a store route needs a namespace", where)
			}
			if err := checkNamespace(where, r.Namespace); err != nil {
				return err
			}
		case "filesystem":
			if r.Root == "" {
				return fmt.Errorf("%s.root: a filesystem route needs a host directory", where)
			}
		case "sandbox":
			if cfg.Sandbox.Address == "" {
				return fmt.Errorf("%s: a sandbox route needs sandbox.address", where)
			}
		default:
			return fmt.Errorf("%s.type: %q (want state, store, filesystem or sandbox)", where, r.Type)
		}
	}
	if _, err := fleet.ParseTargets(cfg.Sandbox.Address); err != nil {
		return fmt.Errorf("sandbox.address: %w", err)
	}
	if s := cfg.Sandbox.Scope; s != "" && s != "thread" {
		return fmt.Errorf("sandbox.scope: %q (want thread)", s)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"middleware.summarization.trigger_fraction", cfg.Middleware.Summarization.TriggerFraction},
		{"middleware.summarization.keep_fraction", cfg.Middleware.Summarization.KeepFraction},
		{"middleware.summarization.reminder_fraction", cfg.Middleware.Summarization.ReminderFraction},
	} {
		if f.v < 0 || f.v > 1 {
			return fmt.Errorf("%s: %g must lie in (0, 1]", f.name, f.v)
		}
	}
	for name, n := range map[string]int64{"server.replay_max_events": int64(cfg.Server.ReplayMaxEvents), "server.replay_max_bytes": int64(cfg.Server.ReplayMaxBytes)} {
		if n < 0 {
			return fmt.Errorf("%s: %d must not be negative (0 takes the default)", name, n)
		}
	}
	for name, d := range map[string]int64{
		"server.replay_retention": int64(cfg.Server.ReplayRetention), "server.shutdown_grace": int64(cfg.Server.ShutdownGrace),
		"server.schedule_poll": int64(cfg.Server.SchedulePoll),
		"limits.run_timeout":   int64(cfg.Limits.RunTimeout), "limits.tool_timeout": int64(cfg.Limits.ToolTimeout),
		"limits.cancel_grace": int64(cfg.Limits.CancelGrace), "sandbox.template.ttl": int64(cfg.Sandbox.Template.TTL),
		"sandbox.refresh_interval": int64(cfg.Sandbox.RefreshInterval), "sandbox.worker_deadline": int64(cfg.Sandbox.WorkerDeadline),
		"storage.lease_ttl": int64(cfg.Storage.LeaseTTL), "sandbox.snapshots.timeout": int64(cfg.Sandbox.Snapshots.Timeout),
		"sandbox.suspend_on_interrupt_after": int64(cfg.Sandbox.SuspendOnInterruptAfter),
	} {
		if d < 0 {
			return fmt.Errorf("%s: durations must be positive", name)
		}
	}
	switch cfg.Sandbox.SuspendOnInterruptMode {
	case "", "pause", "hibernate":
	default:
		return fmt.Errorf("sandbox.suspend_on_interrupt_mode: %q is not pause or hibernate", cfg.Sandbox.SuspendOnInterruptMode)
	}
	for name, n := range map[string]int{
		"limits.max_iterations": cfg.Limits.MaxIterations, "limits.max_parallel_tools": cfg.Limits.MaxParallelTools,
		"limits.max_parallel_subagents": cfg.Limits.MaxParallelSubagents,
	} {
		if n < 0 {
			return fmt.Errorf("%s: %d must not be negative (0 or absent = the default)", name, n)
		}
	}
	return nil
}

// checkNamespace validates a store route's namespace template: literal
// components as store namespaces, and every braced component as a
// {metadata.<key>} placeholder (a misspelt one would otherwise be one
// literal namespace shared by every thread).
func checkNamespace(where string, tmpl []string) error {
	sample := make([]string, len(tmpl))
	for i, c := range tmpl {
		key, ok := namespaceLabel(c)
		switch {
		case ok && (key == "" || strings.ContainsAny(key, "{}")):
			return fmt.Errorf("%s.namespace[%d]: %q: a placeholder is {metadata.<key>}", where, i, c)
		case !ok && strings.ContainsAny(c, "{}"):
			return fmt.Errorf("%s.namespace[%d]: %q is not a {metadata.<key>} placeholder", where, i, c)
		case ok:
			c = "label"
		}
		sample[i] = c
	}
	if err := storefs.ValidateNamespace(sample); err != nil {
		return fmt.Errorf("%s.namespace: %w", where, err)
	}
	return nil
}

// buildModels creates one client per models entry. A model with neither a
// base URL nor an API key is "not configured": agentd still starts (Build
// warns about it), and a run that uses it fails with a clear error event.
func buildModels(cfg *Config, env Env, lg *zap.Logger) (map[string]deep.Model, error) {
	out := make(map[string]deep.Model, len(cfg.Models))
	for key, m := range cfg.Models {
		keyEnv := m.APIKeyEnv
		if keyEnv == "" {
			keyEnv = "OPENAI_API_KEY"
		}
		apiKey := env(keyEnv)
		name := m.Model
		if name == "" {
			name = "gpt-4.1-mini"
		}
		if m.BaseURL == "" && apiKey == "" {
			out[key] = deep.Model{Chat: unconfigured{key: key, env: keyEnv}, Name: name, ContextWindow: m.ContextWindow, MaxOutputTokens: m.MaxOutputTokens, Vision: m.Vision}
			continue
		}
		c, err := openai.New(openai.Config{
			BaseURL: m.BaseURL, APIKey: apiKey, Model: name, ContextWindow: m.ContextWindow, MaxOutputTokens: m.MaxOutputTokens,
			Temperature: m.Temperature, ParallelToolCalls: m.ParallelToolCalls, StreamUsage: m.StreamUsage,
			FirstByteTimeout: m.FirstByteTimeout, RequestTimeout: m.RequestTimeout,
			Retry: openai.RetryConfig{
				MaxAttempts: m.Retry.MaxAttempts, InitialBackoff: m.Retry.InitialBackoff, MaxBackoff: m.Retry.MaxBackoff,
				MaxRetryAfter: m.Retry.MaxRetryAfter, RetryAfterPartial: m.Retry.RetryAfterPartial,
			},
			OverflowPatterns: m.OverflowPatterns, ExtraHeaders: m.Headers,
		}, openai.WithLogger(lg.With(zap.String("model", key))))
		if err != nil {
			return nil, fmt.Errorf("models.%s: %w", key, err)
		}
		out[key] = deep.Model{Chat: c, Name: name, Provider: "openai", ContextWindow: m.ContextWindow, MaxOutputTokens: m.MaxOutputTokens, Vision: m.Vision}
	}
	return out, nil
}

// unconfigured is the model of an entry with no endpoint and no key.
type unconfigured struct{ key, env string }

func (u unconfigured) Generate(context.Context, model.Request, func(model.Delta)) (model.Response, error) {
	return model.Response{}, &model.Error{
		Code: model.CodeNotConfigured,
		Message: fmt.Sprintf("model %q is not configured: set OPENAI_BASE_URL and %s (and OPENAI_MODEL), or a models section in the agentd config",
			u.key, u.env),
	}
}

// profiles converts configured profiles. `tool: false` entries are kept
// as exemptions: they gate nothing, and keep the tool out of pattern and
// capability gates.
func profiles(in map[string]ProfileConfig, section string) (map[string]profile.Profile, error) {
	out := make(map[string]profile.Profile, len(in))
	for name, p := range in {
		pr := profile.Profile{
			Description: p.Description, SystemPrompt: p.SystemPrompt, Model: p.Model, Tools: p.Tools, Subagents: p.Subagents,
			Permissions: p.Permissions, ReadOnly: p.ReadOnly, MaxSteps: p.MaxSteps, Timeout: p.Timeout, Memory: p.Memory, Enabled: p.Enabled,
			CapByParent: p.CapByParent,
		}
		if p.InterruptOn != nil {
			pr.InterruptOn = map[string]profile.InterruptRule{}
			for tool, rule := range *p.InterruptOn {
				r := profile.InterruptRule{Description: rule.Description, Off: rule.Off}
				for _, d := range rule.Allowed {
					switch agent.DecisionType(d) {
					case agent.DecisionApprove, agent.DecisionEdit, agent.DecisionReject, agent.DecisionRespond:
						r.Allowed = append(r.Allowed, agent.DecisionType(d))
					default:
						return nil, fmt.Errorf("%s.%s.interrupt_on.%s.allowed: %q (want approve, edit, reject or respond)", section, name, tool, d)
					}
				}
				pr.InterruptOn[tool] = r
			}
		}
		out[name] = pr
	}
	return out, nil
}

// buildVault builds the secret store over the thread store, with the key
// of secrets.key or PLUMB_SECRETS_KEY (none: secrets cannot be stored).
func buildVault(cfg *Config, st store.Threads, env Env) (*secrets.Vault, error) {
	ss, ok := st.(store.Secrets)
	if !ok {
		return nil, nil
	}
	key := func(path, v, envName string) (*secrets.Key, error) {
		if v == "" && env != nil {
			v, path = env(envName), envName
		}
		if v == "" {
			return nil, nil
		}
		k, err := secrets.ParseKey(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return k, nil
	}
	cur, err := key("secrets.key", cfg.Secrets.Key, "PLUMB_SECRETS_KEY")
	if err != nil {
		return nil, err
	}
	prev, err := key("secrets.previous_key", cfg.Secrets.PreviousKey, "PLUMB_SECRETS_PREVIOUS_KEY")
	if err != nil {
		return nil, err
	}
	if cur == nil && len(cfg.Sandbox.Template.EgressSecrets) > 0 {
		return nil, errors.New("sandbox.template.egress_secrets: no secrets key is configured (secrets.key or PLUMB_SECRETS_KEY)")
	}
	return secrets.NewVault(ss, secrets.NewSealer(cur, prev)), nil
}

// validateEgressApproval checks sandbox.template.egress_approval.
func validateEgressApproval(sc SandboxConfig) error {
	a := sc.Template.EgressApproval
	if a.Timeout != 0 && (a.Timeout < egressapproval.MinTimeout || a.Timeout > egressapproval.MaxTimeout) {
		return fmt.Errorf("sandbox.template.egress_approval.timeout: %s is out of range %s..%s", a.Timeout, egressapproval.MinTimeout, egressapproval.MaxTimeout)
	}
	if !a.Enabled {
		return nil
	}
	if sc.Address == "" {
		return errors.New("sandbox.template.egress_approval.enabled: needs sandbox.address (the boxes' proxies run on sandboxd workers)")
	}
	if sc.Template.Network != "egress" && sc.Template.Template == "" {
		return errors.New("sandbox.template.egress_approval.enabled: needs sandbox.template.network egress (the box's proxy asks)")
	}
	return nil
}

// validateEgressSecrets checks sandbox.template.egress_secrets; whether
// the hosts are on a worker's egress allow-list is sandboxd's to say.
func validateEgressSecrets(t SandboxTemplate) error {
	if len(t.EgressSecrets) > 0 && t.Network != "egress" && t.Template == "" {
		return fmt.Errorf("sandbox.template.egress_secrets: need sandbox.template.network egress (the proxy injects them)")
	}
	for i, r := range t.EgressSecrets {
		at := fmt.Sprintf("sandbox.template.egress_secrets[%d]", i)
		if err := secrets.ValidName(r.Secret); err != nil {
			return fmt.Errorf("%s.secret: %w", at, err)
		}
		format := r.Format
		if format == "" {
			format = SecretValue
		}
		if strings.Count(format, SecretValue) != 1 {
			return fmt.Errorf("%s.format: %q must hold %s exactly once", at, format, SecretValue)
		}
		// The rule check of the proxy itself, with a stand-in value.
		if err := egress.CheckRule(egress.InjectRule{Name: r.Secret, Hosts: r.Hosts, Header: r.Header,
			Value: strings.Replace(format, SecretValue, "x", 1), Secret: "x"}); err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
	}
	return nil
}
