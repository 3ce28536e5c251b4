package hitl

import (
	"context"
	"math/bits"
	"slices"
	"strings"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/tools"
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
	// Off exempts the tool (`tool: false`): it is not gated by a pattern
	// or by the gate of a tool with the same capabilities.
	Off bool
}

// Middleware is the hitl middleware.
type Middleware struct {
	agent.BaseMiddleware
	rules map[string]Rule
	// covers are the gates that also cover other tools, most capable
	// first: a gate on key guards what a tool with capabilities caps can
	// do, so every tool that can do as much is gated alike.
	covers []cover
}

type cover struct {
	key  string
	caps agent.Capability
}

// New returns the middleware for an agent's interrupt_on map. capsOf
// returns the capabilities of the tools an interrupt_on key names (nil:
// gates cover no other tool).
func New(interruptOn map[string]Rule, capsOf func(key string) agent.Capability) *Middleware {
	m := &Middleware{rules: interruptOn}
	if capsOf != nil {
		for key, r := range interruptOn {
			if c := capsOf(key); !r.Off && c != 0 {
				m.covers = append(m.covers, cover{key: key, caps: c})
			}
		}
	}
	// The gate guarding the most is the most specific for a tool it
	// covers; ties go to the first key by name, so the choice is stable.
	slices.SortFunc(m.covers, func(a, b cover) int {
		if d := bits.OnesCount8(uint8(b.caps)) - bits.OnesCount8(uint8(a.caps)); d != 0 {
			return d
		}
		return strings.Compare(a.key, b.key)
	})
	return m
}

// Name implements agent.Middleware.
func (*Middleware) Name() string { return Name }

// rule returns the rule for a call of t: its own entry, else the longest
// pattern entry ("mcp__github__*") whose prefix it has, else — unless t
// is a built-in gated by name alone (tools.GatedByName) — the gate of a
// tool whose capabilities t has all of. An entry that is Off ends the
// search ungated. via is the key of a covering gate ("" otherwise).
func (m *Middleware) rule(t *agent.Tool) (rule Rule, via string, found bool) {
	name := t.Name
	if r, ok := m.rules[name]; ok {
		return r, "", !r.Off
	}
	best := ""
	for key, r := range m.rules {
		prefix, ok := strings.CutSuffix(key, "*")
		if ok && prefix != "" && strings.HasPrefix(name, prefix) && (!found || len(prefix) > len(best)) {
			best, rule, found = prefix, r, true
		}
	}
	if found {
		return rule, "", !rule.Off
	}
	if tools.GatedByName(name) {
		return Rule{}, "", false
	}
	caps := tools.CapabilitiesOf(name, t)
	for _, c := range m.covers {
		if caps.Covers(c.caps) {
			return m.rules[c.key], c.key, true
		}
	}
	return Rule{}, "", false
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
		rule, via, ok := m.rule(req.Tool)
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
			if via != "" {
				desc += " (it can do what the gate on " + via + " guards)"
			}
		}
		return agent.ToolResult{}, &agent.Interrupt{Kind: agent.InterruptApproval, Description: desc, Allowed: allowed}
	}
}
