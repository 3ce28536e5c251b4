package agentsvc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/jsonschema"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/pbconv/agentconv"
)

// Request limits of docs/agent-core.md §10.1.
const (
	maxMetadataKeys  = 64
	maxMetadataValue = 256
)

var (
	metadataKey    = regexp.MustCompile(`^[a-z0-9._/-]{1,63}$`)
	clientToolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// violations collects the bad fields of one request.
type violations []agent.FieldViolation

func (vs *violations) add(field, format string, args ...any) {
	*vs = append(*vs, agent.FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// err returns nil or a *RequestError with every violation.
func (vs violations) err() error {
	if len(vs) == 0 {
		return nil
	}
	return &RequestError{Violations: vs}
}

// checkMetadata validates thread labels (field is "metadata" or
// "labels").
func (vs *violations) checkMetadata(field string, md map[string]string) {
	if len(md) > maxMetadataKeys {
		vs.add(field, "%s has %d keys; at most %d are allowed", field, len(md), maxMetadataKeys)
	}
	for _, k := range slices.Sorted(maps.Keys(md)) {
		if !metadataKey.MatchString(k) {
			vs.add(fmt.Sprintf("%s[%s]", field, backend.Quote(k)), "%s key %s must match [a-z0-9._/-]{1,63}", field, backend.Quote(k))
		}
		if n := utf8.RuneCountInString(md[k]); n > maxMetadataValue {
			vs.add(fmt.Sprintf("%s[%s]", field, backend.Quote(k)), "%s value of %s has %d characters; at most %d are allowed", field, backend.Quote(k), n, maxMetadataValue)
		}
	}
}

// runInput validates a RunRequest (docs/agent-core.md §10.1) and maps it to the
// domain. Every problem is reported at once as a *RequestError.
func (s *Service) runInput(req *plumbv1.RunRequest) (agent.RunInput, error) {
	var vs violations
	if len(req.GetInput()) == 0 {
		vs.add("input", "input is empty: send at least one user message")
	}
	in := agent.RunInput{ThreadID: req.GetThreadId(), Metadata: req.GetMetadata(), AbandonInterrupt: req.GetAbandonInterrupt()}
	for i, m := range req.GetInput() {
		if strings.TrimSpace(m.GetContent()) == "" {
			vs.add(fmt.Sprintf("input[%d].content", i), "input[%d] is empty", i)
		}
		in.Input = append(in.Input, m.GetContent())
	}
	vs.checkMetadata("metadata", req.GetMetadata())
	switch ob := req.GetOnBusy(); ob {
	case plumbv1.OnBusy_ON_BUSY_UNSPECIFIED, plumbv1.OnBusy_ON_BUSY_REJECT:
	case plumbv1.OnBusy_ON_BUSY_ENQUEUE, plumbv1.OnBusy_ON_BUSY_INTERRUPT, plumbv1.OnBusy_ON_BUSY_ROLLBACK, plumbv1.OnBusy_ON_BUSY_STEER:
		name := strings.TrimPrefix(ob.String(), "ON_BUSY_")
		if len(req.GetFiles()) > 0 {
			vs.add("files", "files cannot be sent with on_busy %s: a queued run does not keep them", name)
		}
		if req.GetAbandonInterrupt() {
			vs.add("abandon_interrupt", "abandon_interrupt cannot be sent with on_busy %s", name)
		}
	default:
		vs.add("on_busy", "on_busy %d is not a strategy", ob)
	}
	in.Spec.Agent, in.Spec.Model = req.GetAgent(), req.GetModel()
	if a := req.GetAgent(); a != "" {
		var primaries []string
		for _, info := range s.rt.ListAgents() {
			if info.Kind == profile.Primary {
				primaries = append(primaries, info.Name)
			}
		}
		if !slices.Contains(primaries, a) {
			vs.add("agent", "unknown agent %s; known agents: %s", backend.Quote(a), strings.Join(primaries, ", "))
		}
	}
	if m := req.GetModel(); m != "" && s.cfg.Models != nil && !slices.Contains(s.cfg.Models, m) {
		vs.add("model", "unknown model %s; known models: %s", backend.Quote(m), strings.Join(slices.Sorted(slices.Values(s.cfg.Models)), ", "))
	}
	in.Spec.ClientTools = vs.clientTools(req.GetClientTools(), s.rt.ServerToolNames())
	switch n := req.GetMaxIterations(); {
	case n < 0:
		vs.add("max_iterations", "max_iterations must not be negative")
	case int(n) > s.cfg.MaxIterations:
		vs.add("max_iterations", "max_iterations %d is above the server limit %d", n, s.cfg.MaxIterations)
	default:
		in.Spec.MaxIterations = int(n)
	}
	if d := req.GetTimeout(); d != nil {
		switch err := d.CheckValid(); {
		case err != nil:
			vs.add("timeout", "timeout: %v", err)
		case d.AsDuration() <= 0:
			vs.add("timeout", "timeout must be positive")
		case d.AsDuration() > s.cfg.RunTimeout:
			vs.add("timeout", "timeout %v is above the server limit %v", d.AsDuration(), s.cfg.RunTimeout)
		default:
			in.Spec.Timeout = d.AsDuration()
		}
	}
	if len(req.GetFiles()) > 0 {
		in.Files = make(map[string][]byte, len(req.GetFiles()))
		for p, c := range req.GetFiles() {
			if p == "" {
				vs.add("files", "files has an empty path")
			}
			in.Files[p] = []byte(c)
		}
	}
	return in, vs.err()
}

// clientTools validates client-declared tools: names, uniqueness, no clash
// with a server tool, and a JSON object schema for the arguments.
func (vs *violations) clientTools(defs []*plumbv1.ClientTool, serverTools []string) []agent.ClientToolDef {
	var out []agent.ClientToolDef
	seen := make(map[string]bool)
	for i, t := range defs {
		field := fmt.Sprintf("client_tools[%d]", i)
		name := t.GetName()
		switch {
		case !clientToolName.MatchString(name):
			vs.add(field+".name", "client tool name %s must match ^[A-Za-z0-9_-]{1,64}$", backend.Quote(name))
		case slices.Contains(serverTools, name):
			vs.add(field+".name", "client tool %s clashes with a server tool", backend.Quote(name))
		case seen[name]:
			vs.add(field+".name", "client tool %s is declared twice", backend.Quote(name))
		}
		seen[name] = true
		params := []byte(strings.TrimSpace(t.GetParametersJson()))
		if len(params) == 0 {
			params = []byte(`{"type":"object"}`)
		} else if err := objectSchema(params); err != nil {
			vs.add(field+".parameters_json", "parameters_json of %s: %v", backend.Quote(name), err)
		}
		out = append(out, agent.ClientToolDef{Name: name, Description: t.GetDescription(), Parameters: json.RawMessage(params)})
	}
	return out
}

// objectSchema checks that doc is a JSON Schema the executor can compile
// and that it describes an object (tool arguments are JSON objects).
func objectSchema(doc []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if t, ok := top["type"]; ok && !bytes.Equal(bytes.TrimSpace(t), []byte(`"object"`)) {
		return fmt.Errorf(`the schema type must be "object", got %s`, backend.Clip(string(t)))
	}
	if _, err := jsonschema.Compile(doc); err != nil {
		return fmt.Errorf("invalid schema: %w", err)
	}
	return nil
}

// resumeInput validates a ResumeRequest's own fields; the decisions are
// checked by the runtime against the pending interrupt (docs/agent-core.md §6.5).
func resumeInput(req *plumbv1.ResumeRequest) (agent.ResumeInput, error) {
	var vs violations
	if req.GetThreadId() == "" {
		vs.add("thread_id", "thread_id is required")
	}
	if req.GetInterruptId() == "" {
		vs.add("interrupt_id", "interrupt_id is required")
	}
	in := agent.ResumeInput{ThreadID: req.GetThreadId(), InterruptID: req.GetInterruptId()}
	for _, d := range req.GetDecisions() {
		in.Decisions = append(in.Decisions, agentconv.DecisionFromPB(d))
	}
	return in, vs.err()
}

// requireThreadID validates the thread_id of a request that names one.
func requireThreadID(id string) error {
	if id == "" {
		return InvalidField("thread_id", "thread_id is required")
	}
	return nil
}
