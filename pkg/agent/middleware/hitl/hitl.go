package hitl

import (
	"context"
	"slices"
	"strings"

	"github.com/plumbhq/plumb/pkg/agent"
)

// Name is the middleware's name.
const Name = "hitl"

// Rule gates one tool.
type Rule struct {
	// Allowed lists the decisions a human may take; empty means all four.
	Allowed []agent.DecisionType
	// Description is shown with the request; empty means "Approval
	// required: <tool>".
	Description string
}

// Middleware is the hitl middleware.
type Middleware struct {
	agent.BaseMiddleware
	rules map[string]Rule
}

// New returns the middleware for an agent's interrupt_on map.
func New(interruptOn map[string]Rule) *Middleware {
	return &Middleware{rules: interruptOn}
}

// Name implements agent.Middleware.
func (*Middleware) Name() string { return Name }

// rule returns the rule for tool name: its own entry, else the longest
// pattern entry ("mcp__github__*") whose prefix it has.
func (m *Middleware) rule(name string) (Rule, bool) {
	if r, ok := m.rules[name]; ok {
		return r, true
	}
	best, found := "", false
	var rule Rule
	for key, r := range m.rules {
		prefix, ok := strings.CutSuffix(key, "*")
		if ok && prefix != "" && strings.HasPrefix(name, prefix) && len(prefix) >= len(best) {
			best, rule, found = prefix, r, true
		}
	}
	return rule, found
}

// WrapTool gates listed calls and applies Resume decisions.
func (m *Middleware) WrapTool(next agent.ToolHandler) agent.ToolHandler {
	return func(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
		if req.Decision != nil {
			if res, ok := agent.DecidedResult(req.Call.Name, *req.Decision); ok {
				return res, nil
			}
			return next(ctx, req)
		}
		if req.Resume != nil || req.Tool == nil || req.Tool.Client {
			return next(ctx, req)
		}
		rule, ok := m.rule(req.Call.Name)
		if !ok {
			return next(ctx, req)
		}
		allowed := slices.Clone(rule.Allowed)
		if len(allowed) == 0 {
			allowed = agent.AllDecisions()
		}
		desc := rule.Description
		if desc == "" {
			desc = "Approval required: " + req.Call.Name
		}
		return agent.ToolResult{}, &agent.Interrupt{Kind: agent.InterruptApproval, Description: desc, Allowed: allowed}
	}
}
