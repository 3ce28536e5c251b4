package subagents

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/plumbhq/plumb/pkg/agent"
)

// Name is the middleware's name; ToolName its tool.
const (
	Name     = "subagents"
	ToolName = "task"
)

// DefaultMaxDepth is middleware.subagents.max_depth's default.
const DefaultMaxDepth = 3

// Subagent is one subagent the task tool may start.
type Subagent struct {
	Name, Description string
}

// BuildFunc returns a fresh Config for subagent name, started from the
// agent context rc.
type BuildFunc func(ctx context.Context, rc *agent.RunContext, name string) (*agent.Config, error)

// Config configures the middleware of one agent context.
type Config struct {
	// MaxDepth is the deepest subagent level (root = 0); 0 means
	// DefaultMaxDepth.
	MaxDepth int
	// Depth is the depth of the agent context this instance serves.
	Depth int
	// Available are the subagents this agent may use, in listing order.
	Available []Subagent
	// Build creates a subagent's Config.
	Build BuildFunc
}

// Middleware is the subagents middleware.
type Middleware struct {
	agent.BaseMiddleware
	cfg Config
}

// New returns the middleware.
func New(cfg Config) *Middleware {
	if cfg.MaxDepth <= 0 {
		cfg.MaxDepth = DefaultMaxDepth
	}
	return &Middleware{cfg: cfg}
}

// Name implements agent.Middleware.
func (*Middleware) Name() string { return Name }

// Tools returns task: visible below the depth limit, hidden at it (a call
// then explains the limit).
func (m *Middleware) Tools() []agent.Tool {
	if len(m.cfg.Available) == 0 {
		return nil
	}
	if m.cfg.Depth >= m.cfg.MaxDepth {
		return []agent.Tool{{
			Name: ToolName, Hidden: true, Subagent: true, Timeout: -1,
			Func: func(context.Context, *agent.ToolRequest) (agent.ToolResult, error) {
				return agent.ToolResult{
					Content: fmt.Sprintf("Subagent depth limit (%d) reached; do the work directly.", m.cfg.MaxDepth),
					IsError: true, Origin: agent.OriginInvalidCall,
				}, nil
			},
		}}
	}
	names := make([]string, len(m.cfg.Available))
	var desc strings.Builder
	desc.WriteString("Launch a subagent to handle one self-contained task in its own context. Available subagents:\n")
	for i, s := range m.cfg.Available {
		names[i] = s.Name
		fmt.Fprintf(&desc, "- %s: %s\n", s.Name, s.Description)
	}
	desc.WriteString(`
Each call is independent: the subagent sees nothing of this conversation except the description, so write complete instructions and say what to report back. Calls may run in parallel; launch independent tasks in one turn. Each subagent returns a single final report to you; the report is not shown to the user, so relay what matters.`)
	enum, _ := json.Marshal(names)
	schema := fmt.Sprintf(`{"type":"object","required":["subagent_type","description"],"additionalProperties":false,"properties":{
"subagent_type":{"type":"string","enum":%s,"description":"Which subagent to run."},
"description":{"type":"string","minLength":1,"description":"Complete, self-contained instructions; the subagent sees nothing else."}}}`, enum)
	validation := `{"type":"object","required":["subagent_type","description"],"additionalProperties":false,"properties":{
"subagent_type":{"type":"string"},"description":{"type":"string","minLength":1}}}`
	return []agent.Tool{{
		Name: ToolName, Description: desc.String(), Schema: []byte(schema), ValidationSchema: []byte(validation),
		Subagent: true, Timeout: -1, Func: m.task,
	}}
}

func (m *Middleware) task(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
	var args struct {
		Type        string `json:"subagent_type"`
		Description string `json:"description"`
	}
	if err := req.DecodeArgs(&args); err != nil {
		return agent.ToolResult{}, err
	}
	name := args.Type
	if req.Resume != nil && req.Resume.Snapshot != nil {
		name = req.Resume.Snapshot.Subagent
	}
	known := false
	names := make([]string, len(m.cfg.Available))
	for i, s := range m.cfg.Available {
		names[i] = s.Name
		known = known || s.Name == name
	}
	if !known {
		return agent.ToolResult{
			Content: fmt.Sprintf("Unknown subagent type %q. Available: %s.", name, strings.Join(names, ", ")),
			IsError: true, Origin: agent.OriginInvalidCall,
		}, nil
	}
	cfg, err := m.cfg.Build(ctx, req.Run, name)
	if err != nil {
		return agent.ToolResult{Content: fmt.Sprintf("Subagent %s failed: %s: %v", name, agent.CodeInternal, err), IsError: true}, nil
	}
	out := agent.RunSubagent(ctx, req, agent.SubagentRequest{Name: name, Description: args.Description, Config: cfg})
	if out.Interrupt != nil {
		return agent.ToolResult{}, out.Interrupt
	}
	return Result(name, out), nil
}

// Result is the task tool's result for a finished subagent (docs/agent-core.md
// §5.3 table).
func Result(name string, out agent.SubagentOutcome) agent.ToolResult {
	switch out.Status {
	case agent.SubagentCompleted:
		return agent.ToolResult{Content: out.Text}
	case agent.SubagentStepLimit:
		return agent.ToolResult{Content: fmt.Sprintf("%s\n[subagent stopped: step limit %d reached]", out.Text, out.Limits.MaxIterations), IsError: true}
	case agent.SubagentDeadlineExceeded:
		text := fmt.Sprintf("Subagent %s timed out after %s", name, agent.FormatDuration(out.Limits.Timeout))
		if out.Text != "" {
			text += "\n" + out.Text
		}
		return agent.ToolResult{Content: text, IsError: true}
	case agent.SubagentCancelled:
		return agent.ToolResult{Content: fmt.Sprintf("Subagent %s was cancelled", name), IsError: true}
	default:
		info := agent.ErrorInfo(out.Err)
		return agent.ToolResult{Content: fmt.Sprintf("Subagent %s failed: %s: %s", name, info.Code, info.Message), IsError: true}
	}
}
