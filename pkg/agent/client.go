package agent

import (
	"context"
	"encoding/json"
)

// ClientTool returns the tool of a client-declared definition (docs/agent-core.md
// §6.1): every call becomes a CLIENT_TOOL interrupt allowing respond and
// reject, and the decision given on Resume is its result. The hitl
// middleware never gates it.
func ClientTool(def ClientToolDef) Tool {
	schema := def.Parameters
	if len(schema) == 0 {
		schema = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return Tool{
		Name:        def.Name,
		Description: def.Description,
		Schema:      schema,
		Client:      true,
		Func: func(_ context.Context, req *ToolRequest) (ToolResult, error) {
			if req.Decision != nil {
				if res, ok := DecidedResult(req.Call.Name, *req.Decision); ok {
					return res, nil
				}
			}
			return ToolResult{}, &Interrupt{
				Kind:        InterruptClientTool,
				Description: "Client tool call: " + def.Name,
				Allowed:     []DecisionType{DecisionRespond, DecisionReject},
			}
		},
	}
}
