package agentd

import (
	"fmt"
	"os"
	"sort"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/plumbhq/plumb/internal/yamlconf"
	"github.com/plumbhq/plumb/pkg/agent/tools"
)

// Config is agentd's configuration file. Every key of docs/agent-core.md
// §5.6 is accepted; unknown keys are errors. Sizes take units (memory:
// 1Gi) and CPUs are cores (cpus: 1.5), spelled as in sandboxd's config.
type Config struct {
	// Version fixes which tools the groups of allow-lists take (see
	// tools.CurrentVersion): 1 (a file without version) keeps python out
	// of @all and @exec, 2 takes it. 0, a Config written in code (agentd
	// without --config), is the current version.
	Version    int                      `yaml:"version"`
	Server     ServerConfig             `yaml:"server"`
	Storage    StorageConfig            `yaml:"storage"`
	Models     map[string]ModelConfig   `yaml:"models"`
	Defaults   DefaultsConfig           `yaml:"defaults"`
	Sandbox    SandboxConfig            `yaml:"sandbox"`
	Secrets    SecretsConfig            `yaml:"secrets"`
	Backends   BackendsConfig           `yaml:"backends"`
	Tools      ToolsConfig              `yaml:"tools"`
	Hooks      []HookConfig             `yaml:"hooks"`
	Limits     LimitsConfig             `yaml:"limits"`
	Middleware MiddlewareConfig         `yaml:"middleware"`
	Prompt     PromptConfig             `yaml:"prompt"`
	Agents     map[string]ProfileConfig `yaml:"agents"`
	Subagents  map[string]ProfileConfig `yaml:"subagents"`
	// MCPServers are MCP servers whose tools agents get as
	// mcp__<name>__<tool>; each agent's `tools` allow-list decides who
	// gets them (@all does; "mcp__<name>__*" names one server's).
	MCPServers map[string]MCPServerConfig `yaml:"mcp_servers"`
	// Webhooks is where run webhooks may go, and how they are retried
	// (docs/webhooks.md).
	Webhooks WebhooksConfig `yaml:"webhooks"`
	// Retention is how long threads and webhook deliveries are kept
	// (docs/agentd.md, "Retention"): nothing is kept forever unless a TTL
	// is written as 0.
	Retention RetentionConfig `yaml:"retention"`
	// Quotas are the tenants' quotas (docs/agentd.md, "Quotas"): none
	// unless written.
	Quotas QuotasConfig `yaml:"quotas"`

	// Deprecated lists the deprecated keys the file used, for a warning
	// each once there is a logger.
	Deprecated []yamlconf.Deprecation `yaml:"-"`
}

// MCPServerConfig is one `mcp_servers.<name>` entry: command (a stdio
// server started inside the thread's sandbox) or url (a streamable-HTTP
// server agentd connects to). In env and headers values, ${VAR} is
// replaced with agentd's environment variable VAR, so secrets stay out of
// the file and out of threads.
type MCPServerConfig struct {
	Command string            `yaml:"command"`
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
	Cwd     string            `yaml:"cwd"`
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
	// Timeout bounds each call (default 60s); StartupTimeout starting,
	// connecting and listing at run start (default 30s).
	Timeout        time.Duration `yaml:"timeout"`
	StartupTimeout time.Duration `yaml:"startup_timeout"`
	// Tools limits the server to these MCP tool names.
	Tools []string `yaml:"tools"`
	// MaxResultChars cuts longer text results (default 50,000);
	// MaxMessageBytes bounds one message from the server (default 4 MiB).
	MaxResultChars  int               `yaml:"max_result_chars"`
	MaxMessageBytes yamlconf.Quantity `yaml:"max_message_bytes"`
}

// ServerConfig is `server`.
type ServerConfig struct {
	GRPCAddr           string        `yaml:"grpc_addr"`
	HTTPAddr           string        `yaml:"http_addr"`
	MaxConcurrentRuns  int           `yaml:"max_concurrent_runs"`
	DetachOnDisconnect bool          `yaml:"detach_on_disconnect"`
	ReplayRetention    time.Duration `yaml:"replay_retention"`
	// ReplayMaxEvents and ReplayMaxBytes cap each run's replay log (0 =
	// 10,000 events, 16 MiB); a client stream that falls further behind
	// its run ends with RESOURCE_EXHAUSTED (STREAM_LAGGING).
	ReplayMaxEvents int               `yaml:"replay_max_events"`
	ReplayMaxBytes  yamlconf.Quantity `yaml:"replay_max_bytes"`
	ShutdownGrace   time.Duration     `yaml:"shutdown_grace"`
	// SchedulePoll is how often this replica looks for due schedules (0 =
	// 1 s): a tick fires up to this late.
	SchedulePoll time.Duration `yaml:"schedule_poll"`
	// OnBusy is what a Run on a busy thread does when the request does
	// not say: "reject" (default), "enqueue", "interrupt", "rollback" or
	// "steer" (docs/runs.md). An agent's
	// own on_busy overrides it.
	OnBusy string `yaml:"on_busy"`
}

// StorageConfig is `storage`.
type StorageConfig struct {
	// SQLitePath is the thread store file ("" = a temporary file). With
	// PostgresDSN set it only holds the files of store routes.
	SQLitePath string `yaml:"sqlite_path"`
	// PostgresDSN, when set, puts the threads in PostgreSQL (shared by
	// several agentd replicas) instead of SQLite.
	PostgresDSN string `yaml:"postgres_dsn"`
	// LeaseTTL is how long a replica's lease on a running thread lasts
	// unrenewed, with PostgresDSN (0 = runhost.DefaultLeaseTTL): a run
	// whose replica died is taken over this long after its last renewal.
	LeaseTTL            time.Duration `yaml:"lease_ttl"`
	BusyTimeout         time.Duration `yaml:"busy_timeout"`
	CheckpointRetention int           `yaml:"checkpoint_retention"`
}

// Retention defaults: what a config that does not say is kept for.
const (
	DefaultThreadsIdle       = 90 * 24 * time.Hour
	DefaultWebhookDeliveries = 30 * 24 * time.Hour
	DefaultRunEvents         = 30 * 24 * time.Hour
	DefaultStoreItems        = 365 * 24 * time.Hour
)

// RetentionConfig is `retention`. A TTL left out takes its default; 0,
// written, keeps forever.
type RetentionConfig struct {
	// Interval is the time between this replica's sweeps (0 = 10m;
	// negative = this replica sweeps nothing, another one must).
	Interval time.Duration `yaml:"interval"`
	// RetentionRules are the default TTLs.
	RetentionRules `yaml:",inline"`
	// CheckpointsKeep is how many checkpoint records each thread keeps,
	// the latest ones (0 = storage.checkpoint_retention, whose default
	// is 100); never unbounded.
	CheckpointsKeep int `yaml:"checkpoints_keep"`
	// StoreItems deletes the files of store routes (the cross-thread
	// store, every namespace) not modified for this long (nil = 1 year;
	// 0 keeps them).
	StoreItems *time.Duration `yaml:"store_items"`
	// Tenants override the TTLs per tenant; a TTL a tenant leaves out is
	// the default one.
	Tenants map[string]RetentionRules `yaml:"tenants"`
}

// RetentionRules are TTLs; nil = inherited (or the default).
type RetentionRules struct {
	// ThreadsIdle deletes a thread (its sandbox, snapshots, checkpoints,
	// event log) not updated for this long.
	ThreadsIdle *time.Duration `yaml:"threads_idle"`
	// WebhookDeliveries deletes a delivery finished this long ago.
	WebhookDeliveries *time.Duration `yaml:"webhook_deliveries"`
	// RunEvents deletes the shared event log of a thread's last run
	// (PostgreSQL) once it ended and the thread was not updated for this
	// long.
	RunEvents *time.Duration `yaml:"run_events"`
}

// QuotasConfig is `quotas`: the default quotas of every tenant, and
// tenants' own. A quota left out (or 0) is unlimited; a tenant's quota
// left out is the default one.
type QuotasConfig struct {
	QuotaLimits `yaml:",inline"`
	// Tenants override the quotas per tenant.
	Tenants map[string]QuotaLimits `yaml:"tenants"`
}

// QuotaLimits are quotas; nil = inherited (or unlimited), 0 = unlimited.
type QuotaLimits struct {
	// ConcurrentRuns bounds the tenant's runs running at once.
	ConcurrentRuns *int `yaml:"concurrent_runs"`
	// RunsPerMinute bounds the runs asked for in the last minute.
	RunsPerMinute *int `yaml:"runs_per_minute"`
	// TokensPerDay bounds the prompt and completion tokens of the last
	// 24 hours.
	TokensPerDay *int `yaml:"tokens_per_day"`
	// LiveSandboxes bounds the tenant's threads holding a sandbox.
	LiveSandboxes *int `yaml:"live_sandboxes"`
}

// ModelConfig is one `models.<key>` entry.
type ModelConfig struct {
	BaseURL           string            `yaml:"base_url"`
	APIKeyEnv         string            `yaml:"api_key_env"`
	Model             string            `yaml:"model"`
	ContextWindow     int               `yaml:"context_window"`
	MaxOutputTokens   int               `yaml:"max_output_tokens"`
	Temperature       *float32          `yaml:"temperature"`
	ParallelToolCalls *bool             `yaml:"parallel_tool_calls"`
	StreamUsage       *bool             `yaml:"stream_usage"`
	FirstByteTimeout  time.Duration     `yaml:"first_byte_timeout"`
	RequestTimeout    time.Duration     `yaml:"request_timeout"`
	Retry             RetryConfig       `yaml:"retry"`
	OverflowPatterns  []string          `yaml:"overflow_patterns"`
	Headers           map[string]string `yaml:"headers"`
	Vision            bool              `yaml:"vision"` // accepts images: read_file shows it the images it reads
}

// RetryConfig is a model's `retry`.
type RetryConfig struct {
	MaxAttempts       int           `yaml:"max_attempts"`
	InitialBackoff    time.Duration `yaml:"initial_backoff"`
	MaxBackoff        time.Duration `yaml:"max_backoff"`
	MaxRetryAfter     time.Duration `yaml:"max_retry_after"`
	RetryAfterPartial *bool         `yaml:"retry_after_partial"`
}

// DefaultsConfig is `defaults`.
type DefaultsConfig struct {
	Agent string `yaml:"agent"`
	Model string `yaml:"model"`
}

// SandboxConfig is `sandbox`.
type SandboxConfig struct {
	// Address lists the sandboxd workers, separated by commas: static
	// "host:port" addresses and "dns:///name:port" names, re-resolved
	// every RefreshInterval (each resolved address is one worker).
	Address string `yaml:"address"`
	// RefreshInterval is how often DNS names are re-resolved and every
	// worker is described (default 10s).
	RefreshInterval time.Duration `yaml:"refresh_interval"`
	// WorkerDeadline bounds how long a call waits for an unreachable
	// worker before it fails with UNAVAILABLE naming it (default 10s).
	WorkerDeadline time.Duration `yaml:"worker_deadline"`
	// Scope is "thread": one sandbox per thread, created on first use.
	Scope    string          `yaml:"scope"`
	Template SandboxTemplate `yaml:"template"`
	// Snapshots are the workspace snapshots agentd takes of a thread's box
	// at its checkpoints (docs/workspaces.md, "Threads").
	Snapshots SnapshotsConfig `yaml:"snapshots"`
	// SuspendOnInterruptAfter suspends the box of a thread whose run
	// waits on an interrupt (approval, client tool) this long (0 =
	// never); any call, the Resume's first, wakes it.
	SuspendOnInterruptAfter time.Duration `yaml:"suspend_on_interrupt_after"`
	// SuspendOnInterruptMode is "pause" (default: memory and processes
	// kept) or "hibernate" (workspace only; needs the worker's snapshot
	// store).
	SuspendOnInterruptMode string `yaml:"suspend_on_interrupt_mode"`
}

// SnapshotsConfig is `sandbox.snapshots`: when agentd snapshots a
// thread's box. A worker without a snapshot store takes none (the call is
// refused and agentd moves on); a thread without a box takes none.
type SnapshotsConfig struct {
	// AtRunEnd snapshots the box when a run ends (default true).
	AtRunEnd *bool `yaml:"at_run_end"`
	// AtInterrupt snapshots the box when a run pauses on an interrupt
	// (default true).
	AtInterrupt *bool `yaml:"at_interrupt"`
	// Timeout bounds one snapshot (default 5m).
	Timeout time.Duration `yaml:"timeout"`
}

// RunEnd reports whether boxes are snapshotted when a run ends.
func (c SnapshotsConfig) RunEnd() bool { return c.AtRunEnd == nil || *c.AtRunEnd }

// Interrupt reports whether boxes are snapshotted when a run pauses.
func (c SnapshotsConfig) Interrupt() bool { return c.AtInterrupt == nil || *c.AtInterrupt }

// SandboxTemplate is the sandbox each thread gets.
type SandboxTemplate struct {
	// Template names a template of the worker's config.
	Template   string `yaml:"template"`
	Image      string `yaml:"image"`
	WorkingDir string `yaml:"working_dir"`
	// CPUs is the CPU quota in cores (1.5; `cpu` is its deprecated
	// spelling).
	CPUs    float64           `yaml:"cpus" deprecated:"cpu"`
	Memory  yamlconf.Quantity `yaml:"memory"`
	Pids    int64             `yaml:"pids"`
	Network string            `yaml:"network"`
	Runtime string            `yaml:"runtime"`
	TTL     time.Duration     `yaml:"ttl"`
	Env     map[string]string `yaml:"env"`
	// EgressSecrets make the box's egress proxy put a tenant's stored
	// secret into a header of its HTTPS requests to some hosts (network
	// egress only; docs/security.md, "Egress secrets").
	EgressSecrets []EgressSecretConfig `yaml:"egress_secrets"`
	// EgressApproval lets a human approve, live, a connection of the box
	// to a destination off the worker's egress allow-list (network egress
	// only; docs/security.md, "Egress approved by a human").
	EgressApproval EgressApprovalConfig `yaml:"egress_approval"`
	// Volumes are named volumes of the thread's tenant mounted into its
	// box (docs/workspaces.md, "Named volumes"; volumes.go).
	Volumes []VolumeMountConfig `yaml:"volumes"`
}

// EgressApprovalConfig is `sandbox.template.egress_approval`.
type EgressApprovalConfig struct {
	// Enabled makes such a connection wait for a decision while a tool
	// call runs in the box, instead of being refused at once.
	Enabled bool `yaml:"enabled"`
	// Timeout is how long it waits (default 5m, 1s..24h); then it is
	// refused.
	Timeout time.Duration `yaml:"timeout"`
}

// EgressSecretConfig is one `sandbox.template.egress_secrets` entry.
type EgressSecretConfig struct {
	// Secret names the thread's tenant's stored secret (PutSecret).
	Secret string `yaml:"secret"`
	// Hosts are exact host names or addresses, each with an optional
	// ":port" (443 when none); every one must be on the worker's egress
	// allow-list.
	Hosts []string `yaml:"hosts"`
	// Header is the request header set (overwriting the box's).
	Header string `yaml:"header"`
	// Format is the header value, with {{value}} where the secret goes
	// (default "{{value}}").
	Format string `yaml:"format"`
}

// SecretValue is the placeholder of EgressSecretConfig.Format.
const SecretValue = "{{value}}"

// SecretsConfig is `secrets`: the key that seals stored secrets.
type SecretsConfig struct {
	// Key is the AES-256 key, 32 bytes base64 (PLUMB_SECRETS_KEY when
	// empty). Without one, PutSecret is FAILED_PRECONDITION.
	Key string `yaml:"key"`
	// PreviousKey opens secrets sealed before a rotation
	// (PLUMB_SECRETS_PREVIOUS_KEY when empty).
	PreviousKey string `yaml:"previous_key"`
}

// BackendsConfig is `backends`.
type BackendsConfig struct {
	// Default is state, filesystem or sandbox.
	Default       string                 `yaml:"default"`
	ArtifactsRoot string                 `yaml:"artifacts_root"`
	Routes        map[string]RouteConfig `yaml:"routes"`
	// Root is the host directory of a filesystem default backend.
	Root string `yaml:"root"`
}

// RouteConfig is one `backends.routes.<prefix>` entry.
type RouteConfig struct {
	// Type is state, store, filesystem or sandbox.
	Type string `yaml:"type"`
	// Namespace (store) may hold {metadata.<key>} placeholders.
	Namespace []string `yaml:"namespace"`
	// Root (filesystem) is a host directory.
	Root string `yaml:"root"`
}

// ToolsConfig is `tools`.
type ToolsConfig struct {
	Execute struct {
		DefaultTimeout time.Duration `yaml:"default_timeout"`
	} `yaml:"execute"`
	Grep struct {
		// Regex offers grep's regex option (RE2); false keeps grep
		// literal. Absent = true.
		Regex *bool `yaml:"regex"`
	} `yaml:"grep"`
	TestKit bool `yaml:"test_kit"`
	// WebSearch configures the web_search tool; absent = no web search.
	// Each agent's `tools` allow-list decides who gets it (@all does).
	WebSearch *WebSearchConfig `yaml:"web_search"`
	// Python configures the python tool (on by default; offered only when
	// the thread's sandbox has python3).
	Python PythonConfig `yaml:"python"`
}

// PythonConfig is `tools.python`: a stateful Python interpreter per
// thread, in its sandbox. Zero values take the defaults.
type PythonConfig struct {
	// Enabled registers the tool (absent = true). It is offered to the
	// model only when the thread's backend is a sandbox that can start
	// processes and has python3; finding out creates the thread's sandbox
	// at its first model call.
	Enabled *bool `yaml:"enabled"`
	// Timeout is a call's default timeout (30s); MaxTimeout caps the
	// timeout_s the model may ask for (10m).
	Timeout    time.Duration `yaml:"timeout"`
	MaxTimeout time.Duration `yaml:"max_timeout"`
	// IdleTimeout closes an interpreter nobody called for this long (30m).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// StartTimeout bounds starting an interpreter, sandbox creation
	// included (2m).
	StartTimeout time.Duration `yaml:"start_timeout"`
	// MaxInterpreters caps the interpreters this agentd runs at once (64);
	// at the cap the least recently used idle one is closed.
	MaxInterpreters int `yaml:"max_interpreters"`
	// MaxOutputChars bounds stdout, stderr and the value of one call,
	// each (65536).
	MaxOutputChars int `yaml:"max_output_chars"`
}

// WebSearchConfig is `tools.web_search`.
type WebSearchConfig struct {
	// Provider is tavily or searxng.
	Provider string `yaml:"provider"`
	// BaseURL is the provider's URL (Tavily: https://api.tavily.com when
	// empty; SearXNG: required, the instance's URL).
	BaseURL string `yaml:"base_url"`
	// APIKeyEnv names the environment variable with Tavily's key
	// (default TAVILY_API_KEY). Without a key the tool is not offered.
	APIKeyEnv string `yaml:"api_key_env"`
	// Timeout bounds each request (default 20s).
	Timeout time.Duration `yaml:"timeout"`
	// MaxRetryAfter is the longest 429 Retry-After waited out (default
	// 10s); a longer one is a tool error that says when to retry.
	MaxRetryAfter time.Duration `yaml:"max_retry_after"`
	// MaxResults is the default result count (1-10, default 5).
	MaxResults int `yaml:"max_results"`
}

// HookConfig is one `hooks` entry.
type HookConfig struct {
	Name  string   `yaml:"name"`
	Phase string   `yaml:"phase"`
	Tools []string `yaml:"tools"`
	Match *struct {
		Arg   string `yaml:"arg"`
		Regex string `yaml:"regex"`
	} `yaml:"match"`
	Action      string `yaml:"action"`
	Message     string `yaml:"message"`
	Replacement string `yaml:"replacement"`
}

// LimitsConfig is `limits`.
type LimitsConfig struct {
	MaxIterations        int           `yaml:"max_iterations"`
	RunTimeout           time.Duration `yaml:"run_timeout"`
	ToolTimeout          time.Duration `yaml:"tool_timeout"`
	MaxParallelTools     int           `yaml:"max_parallel_tools"`
	MaxParallelSubagents int           `yaml:"max_parallel_subagents"`
	CancelGrace          time.Duration `yaml:"cancel_grace"`
}

// MiddlewareConfig is `middleware`.
type MiddlewareConfig struct {
	Todos struct {
		Enabled       *bool `yaml:"enabled"`
		ReminderEvery int   `yaml:"reminder_every"`
		MaxItems      int   `yaml:"max_items"`
	} `yaml:"todos"`
	Filesystem struct {
		EvictToolResultChars  int           `yaml:"evict_tool_result_chars"`
		EvictExempt           []string      `yaml:"evict_exempt"`
		PreviewLines          int           `yaml:"preview_lines"`
		PreviewLineChars      int           `yaml:"preview_line_chars"`
		EvictUserMessageChars int           `yaml:"evict_user_message_chars"`
		GrepMaxCount          int           `yaml:"grep_max_count"`
		ExecuteMaxTimeout     time.Duration `yaml:"execute_max_timeout"`
	} `yaml:"filesystem"`
	Subagents struct {
		GeneralPurpose *bool `yaml:"general_purpose"`
		MaxDepth       int   `yaml:"max_depth"`
	} `yaml:"subagents"`
	Summarization struct {
		Enabled                  *bool         `yaml:"enabled"`
		Model                    string        `yaml:"model"`
		TriggerFraction          float64       `yaml:"trigger_fraction"`
		TriggerTokens            int           `yaml:"trigger_tokens"`
		TriggerMaxTokens         int           `yaml:"trigger_max_tokens"`
		KeepFraction             float64       `yaml:"keep_fraction"`
		KeepMessages             int           `yaml:"keep_messages"`
		MaxSummarizerInputTokens int           `yaml:"max_summarizer_input_tokens"`
		SummaryMaxTokens         int           `yaml:"summary_max_tokens"`
		Timeout                  time.Duration `yaml:"timeout"`
		ReminderFraction         float64       `yaml:"reminder_fraction"`
	} `yaml:"summarization"`
	PatchToolCalls struct {
		Enabled *bool `yaml:"enabled"`
	} `yaml:"patch_tool_calls"`
	Memory struct {
		Paths        []string `yaml:"paths"`
		MaxFileBytes int      `yaml:"max_file_bytes"`
	} `yaml:"memory"`
	// Skills is middleware.skills (docs/skills.md).
	Skills struct {
		Enabled   *bool `yaml:"enabled"`
		Workspace bool  `yaml:"workspace"`
	} `yaml:"skills"`
}

// PromptConfig is `prompt`: each section is `false` (disabled), `true`
// (default text) or a replacement string.
type PromptConfig struct {
	Sections map[string]SectionOverride `yaml:"sections"`
}

// SectionOverride is one prompt section setting.
type SectionOverride struct {
	Disabled bool   `yaml:"-"`
	Text     string `yaml:"-"`
}

// UnmarshalYAML accepts a boolean or a string.
func (s *SectionOverride) UnmarshalYAML(n *yaml.Node) error {
	var b bool
	if err := n.Decode(&b); err == nil {
		s.Disabled = !b
		return nil
	}
	return n.Decode(&s.Text)
}

// ProfileConfig is an `agents.<name>` or `subagents.<name>` entry.
type ProfileConfig struct {
	Description  string                  `yaml:"description"`
	SystemPrompt string                  `yaml:"system_prompt"`
	Model        string                  `yaml:"model"`
	Tools        []string                `yaml:"tools"`
	Subagents    []string                `yaml:"subagents"`
	Permissions  string                  `yaml:"permissions"`
	ReadOnly     bool                    `yaml:"read_only"`
	MaxSteps     int                     `yaml:"max_steps"`
	Timeout      time.Duration           `yaml:"timeout"`
	InterruptOn  *map[string]InterruptOn `yaml:"interrupt_on"`
	Memory       *bool                   `yaml:"memory"`
	// Skills are directories of Agent Skills (a folder with a SKILL.md,
	// or a folder of them) the profile sees, loaded at startup
	// (docs/skills.md).
	Skills  []string `yaml:"skills"`
	Enabled *bool    `yaml:"enabled"`
	// CapByParent (subagents; default true) limits a subagent to its
	// caller's tools and permissions; false lets it exceed them.
	CapByParent *bool `yaml:"cap_by_parent"`
	// OnBusy (agents only) is the agent's default double-texting
	// strategy, "reject", "enqueue", "interrupt", "rollback" or "steer"
	// ("" = server.on_busy).
	OnBusy string `yaml:"on_busy"`
	// Webhooks (primary agents only) are told when the agent's runs end
	// or pause (docs/webhooks.md).
	Webhooks []WebhookTargetConfig `yaml:"webhooks"`
	// Retention (primary agents only) overrides the tenant's and the
	// default TTLs for what belongs to this agent (docs/agentd.md,
	// "Retention").
	Retention *AgentRetention `yaml:"retention"`
}

// AgentRetention is `agents.<name>.retention`: the agent's own TTLs, over
// its tenant's and the default ones. A TTL left out (nil) inherits; 0
// keeps forever.
type AgentRetention struct {
	// ThreadsIdle is for the threads whose last run was the agent's.
	ThreadsIdle *time.Duration `yaml:"threads_idle"`
	// CheckpointsKeep is how many checkpoint records a thread keeps when
	// the agent's run writes a checkpoint (0 = retention.checkpoints_keep;
	// never unbounded).
	CheckpointsKeep int `yaml:"checkpoints_keep"`
	// RunEvents is for the shared event log of a thread whose last run
	// was the agent's.
	RunEvents *time.Duration `yaml:"run_events"`
	// WebhookDeliveries is for the deliveries of the agent's runs.
	WebhookDeliveries *time.Duration `yaml:"webhook_deliveries"`
}

// WebhookTargetConfig is one `agents.<name>.webhooks` entry.
type WebhookTargetConfig struct {
	// URL receives the signed POSTs; the `webhooks` policy applies.
	URL string `yaml:"url"`
	// Events are the event types sent (run.succeeded, run.failed,
	// run.interrupted, run.cancelled); none: all.
	Events []string `yaml:"events"`
}

// WebhooksConfig is `webhooks`: the operator's policy for run webhooks.
// Webhooks need a secrets key (their signing keys are sealed with it).
type WebhooksConfig struct {
	// AllowHTTP allows http:// URLs (https only by default).
	AllowHTTP bool `yaml:"allow_http"`
	// AllowPrivateNetworks allows private ranges (RFC 1918, RFC 6598,
	// IPv6 ULA); loopback, link-local (metadata) and the like still need
	// Allow.
	AllowPrivateNetworks bool `yaml:"allow_private_networks"`
	// Allow are CIDRs, addresses or host names allowed whatever they
	// resolve to (127.0.0.0/8 for a receiver on the same host).
	Allow []string `yaml:"allow"`
	// RetryFor is how long a delivery is retried (default 24h).
	RetryFor time.Duration `yaml:"retry_for"`
	// Timeout bounds one attempt (default 10s).
	Timeout time.Duration `yaml:"timeout"`
	// MaxAttempts bounds the attempts of a delivery (default 30).
	MaxAttempts int `yaml:"max_attempts"`
	// Concurrency bounds the attempts in flight per replica (default 8).
	Concurrency int `yaml:"concurrency"`
	// KeyGrace is how long a rotated-out signing key keeps signing
	// (default 24h).
	KeyGrace time.Duration `yaml:"key_grace"`
}

// InterruptOn is `true` or `{allowed: [...], description: ...}`; `false`
// removes the gate.
type InterruptOn struct {
	Off         bool     `yaml:"-"`
	Allowed     []string `yaml:"allowed"`
	Description string   `yaml:"description"`
}

// UnmarshalYAML accepts a boolean or a mapping. Parse has checked the
// mapping's keys (node.Decode does not apply KnownFields).
func (i *InterruptOn) UnmarshalYAML(n *yaml.Node) error {
	var b bool
	if err := n.Decode(&b); err == nil {
		i.Off = !b
		return nil
	}
	type plain InterruptOn
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*i = InterruptOn(p)
	return nil
}

// Load reads and strictly decodes the config file at path (see Parse).
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	c, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return c, nil
}

// Parse strictly decodes a config document (yamlconf.Decode): an unknown
// key or an ill-typed value at any depth is an error naming its YAML
// path; deprecated keys are listed in Config.Deprecated.
func Parse(data []byte) (*Config, error) {
	c, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

func parse(data []byte) (*Config, error) {
	var c Config
	ds, err := yamlconf.Decode(data, &c)
	if err != nil {
		return nil, err
	}
	c.Deprecated = ds
	switch c.Version {
	case 0:
		// Files from before versions were written are version 1: their
		// @all and @exec keep the tools they had then.
		c.Version = tools.Version1
	case tools.Version1, tools.CurrentVersion:
	default:
		return nil, fmt.Errorf("version %d is not supported (want %d or %d)", c.Version, tools.Version1, tools.CurrentVersion)
	}
	return &c, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
