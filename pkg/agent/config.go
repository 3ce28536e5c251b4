package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/model"
)

// Default limits (docs/agent-core.md §2.4).
const (
	DefaultMaxIterations        = 200
	DefaultRunTimeout           = 30 * time.Minute
	DefaultToolTimeout          = 10 * time.Minute
	DefaultMaxParallelTools     = 8
	DefaultMaxParallelSubagents = 4
	DefaultCancelGrace          = 5 * time.Second
)

// Limits bound one agent context. For the root, MaxIterations and Timeout
// are limits.max_iterations and limits.run_timeout; for a subagent they are
// its profile's max_steps and timeout. Zero values take the defaults.
type Limits struct {
	// MaxIterations caps the context's model calls.
	MaxIterations int
	// Timeout caps the context's active wall time.
	Timeout time.Duration
	// ToolTimeout caps one call unless its tool declares its own.
	ToolTimeout time.Duration
	// MaxParallelTools caps concurrent calls of one step.
	MaxParallelTools int
	// MaxParallelSubagents caps concurrent subagent calls of one step.
	MaxParallelSubagents int
	// CancelGrace is how long in-flight calls may finish after
	// cancellation before the executor stops waiting.
	CancelGrace time.Duration
}

// WithDefaults returns l with zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxIterations <= 0 {
		l.MaxIterations = DefaultMaxIterations
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultRunTimeout
	}
	if l.ToolTimeout <= 0 {
		l.ToolTimeout = DefaultToolTimeout
	}
	if l.MaxParallelTools <= 0 {
		l.MaxParallelTools = DefaultMaxParallelTools
	}
	if l.MaxParallelSubagents <= 0 {
		l.MaxParallelSubagents = DefaultMaxParallelSubagents
	}
	if l.CancelGrace <= 0 {
		l.CancelGrace = DefaultCancelGrace
	}
	return l
}

// Config is the setup of one agent context: what a Runner's configure
// function returns for a root run, and what the task tool builds for a
// subagent. Build a fresh Config (and fresh middleware) per agent context.
type Config struct {
	// Agent is the profile name.
	Agent string
	// ModelKey is the configured model key (shown in run_started).
	ModelKey string
	// ProviderModel is the provider's model name (shown in usage events).
	ProviderModel string
	// Provider names the model's provider API in model-call spans
	// (gen_ai.provider.name, and gen_ai.system for older backends:
	// "openai" for the OpenAI-compatible client); "" leaves them out.
	Provider string
	// Model is the chat model. Required.
	Model model.ChatModel
	// MaxTokens and Temperature are the model settings of each call.
	MaxTokens   int
	Temperature *float32
	// Middleware is the stack, outermost first.
	Middleware []Middleware
	// Tools are tools beyond the middleware's (registry tools, client
	// tools).
	Tools []Tool
	// Allow filters every tool by name (the profile's allow-list); nil
	// allows all.
	Allow func(name string) bool
	// SystemPrompt composes the system prompt once per run segment from
	// the visible tools (sorted by name). nil means no system prompt.
	SystemPrompt func(rc *RunContext, tools []model.ToolDef) string
	// Backend is the thread's file backend; may be nil.
	Backend backend.Backend
	// FileChanges, if set, returns the State-backend delta since its last
	// call (path → JSON document, nil = deleted); the root runner stores it
	// with every checkpoint (ThreadData.Files, Checkpoint.Files).
	FileChanges func() (map[string]json.RawMessage, error)
	// Limits bound the context.
	Limits Limits
}

// ErrInvalidConfig wraps configuration errors of a Config.
var ErrInvalidConfig = errors.New("invalid agent config")

func (c *Config) check() error {
	if c == nil || c.Model == nil {
		return fmt.Errorf("%w: no model", ErrInvalidConfig)
	}
	names := make(map[string]bool)
	for _, m := range c.Middleware {
		if names[m.Name()] {
			return fmt.Errorf("%w: middleware %q appears twice", ErrInvalidConfig, m.Name())
		}
		names[m.Name()] = true
	}
	return nil
}
