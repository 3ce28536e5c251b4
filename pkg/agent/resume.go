package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/plumbhq/plumb/pkg/agent/jsonschema"
)

// routed is a pending request with its place in the tree of suspended
// contexts: the task call ids from the root down to its context.
type routed struct {
	req   InterruptRequest
	route []string
}

func collect(p *PendingStep, route []string) []routed {
	if p == nil {
		return nil
	}
	var out []routed
	for _, q := range p.Requests {
		out = append(out, routed{req: q, route: route})
	}
	for _, c := range p.Calls {
		if n := p.Nested[c.ID]; n != nil {
			out = append(out, collect(n.State.Pending, append(slices.Clone(route), c.ID))...)
		}
	}
	return out
}

// planResume validates decisions against the pending step tree (docs/agent-core.md
// §6.5) and routes them. Every problem is reported; on any, nothing is
// planned.
func planResume(p *PendingStep, decisions []Decision) (*resumePlan, error) {
	pending := collect(p, nil)
	var vs []FieldViolation
	bad := func(i int, field, format string, args ...any) {
		f := "decisions"
		if i >= 0 {
			f = fmt.Sprintf("decisions[%d]", i)
			if field != "" {
				f += "." + field
			}
		}
		vs = append(vs, FieldViolation{Field: f, Description: fmt.Sprintf(format, args...)})
	}
	decided := make(map[int]int) // pending index → decision index
	match := make([]int, len(decisions))
	for i, d := range decisions {
		match[i] = -1
		if d.ToolCallID == "" {
			bad(i, "tool_call_id", "tool_call_id is required")
			continue
		}
		var cands []int
		for j, q := range pending {
			if q.req.ToolCallID == d.ToolCallID && (d.AgentPath == "" || d.AgentPath == q.req.AgentPath) {
				cands = append(cands, j)
			}
		}
		switch {
		case len(cands) == 0:
			bad(i, "tool_call_id", "no pending request for tool call %s", d.ToolCallID)
			continue
		case len(cands) > 1:
			paths := make([]string, len(cands))
			for k, j := range cands {
				paths[k] = pending[j].req.AgentPath
			}
			bad(i, "agent_path", "tool call %s is pending in %s; set agent_path", d.ToolCallID, strings.Join(paths, ", "))
			continue
		}
		j := cands[0]
		if _, dup := decided[j]; dup {
			bad(i, "tool_call_id", "duplicate decision for %s", d.ToolCallID)
			continue
		}
		decided[j] = i
		match[i] = j
		q := pending[j].req
		if !slices.Contains(AllDecisions(), d.Type) {
			bad(i, "type", "unknown decision type %q for %s", d.Type, d.ToolCallID)
			continue
		}
		if !slices.Contains(q.Allowed, d.Type) {
			bad(i, "type", "decision %s not allowed for %s; allowed: %s", d.Type, d.ToolCallID, joinDecisions(q.Allowed))
			continue
		}
		switch d.Type {
		case DecisionEdit:
			if err := validateEdited(q.ArgsSchema, d.EditedArgs); err != nil {
				bad(i, "edited_args", "edited_args for %s: %v", d.ToolCallID, err)
			}
		default:
			if len(d.EditedArgs) > 0 {
				bad(i, "edited_args", "edited_args is only valid with EDIT")
			}
		}
		if d.Type == DecisionRespond && d.Message == "" {
			bad(i, "message", "respond for %s needs message", d.ToolCallID)
		}
	}
	if len(decisions) != len(pending) || len(decided) != len(pending) {
		var missing []string
		for j, q := range pending {
			if _, ok := decided[j]; !ok {
				missing = append(missing, q.req.ToolCallID)
			}
		}
		if len(decisions) != len(pending) || len(missing) > 0 {
			bad(-1, "", "got %d decisions for %d pending requests; missing: %s", len(decisions), len(pending), strings.Join(missing, ", "))
		}
	}
	if len(vs) > 0 {
		return nil, &DecisionError{Violations: vs}
	}
	plan := &resumePlan{}
	for i, d := range decisions {
		q := pending[match[i]]
		node := plan
		for _, id := range q.route {
			if node.nested == nil {
				node.nested = make(map[string]*resumePlan)
			}
			if node.nested[id] == nil {
				node.nested[id] = &resumePlan{}
			}
			node = node.nested[id]
		}
		if node.decisions == nil {
			node.decisions = make(map[string]Decision)
		}
		if d.Type == DecisionEdit {
			d.EditedArgs = compactJSON(d.EditedArgs)
		}
		node.decisions[q.req.ToolCallID] = d
	}
	return plan, nil
}

func validateEdited(schema, args json.RawMessage) error {
	if len(args) == 0 {
		return fmt.Errorf("required for EDIT")
	}
	v, err := jsonschema.Decode(args)
	if err != nil {
		return fmt.Errorf("not valid JSON: %v", err)
	}
	if _, ok := v.(map[string]any); !ok {
		return fmt.Errorf("must be a JSON object")
	}
	s, err := jsonschema.Compile(schema)
	if err != nil {
		return nil // the tool's schema was accepted at dispatch; do not block on it here
	}
	if _, err := s.Validate(v); err != nil {
		return err
	}
	return nil
}

func compactJSON(b json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return b
	}
	return buf.Bytes()
}

func joinDecisions(ds []DecisionType) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = string(d)
	}
	return strings.Join(parts, ", ")
}
