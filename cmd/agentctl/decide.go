package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/cli/render"
)

// decider answers an interrupt with one decision per pending request.
type decider interface {
	decide(ctx context.Context, in *plumbv1.Interrupted) ([]*plumbv1.Decision, error)
}

// undecidedError says a non-interactive decider has no acceptable answer
// for a request; agentctl then leaves the interrupt pending.
type undecidedError struct {
	req    *plumbv1.InterruptRequest
	reason string
}

func (e *undecidedError) Error() string {
	return fmt.Sprintf("call %s (%s in %s): %s", e.req.GetToolCallId(), e.req.GetToolName(), e.req.GetAgentPath(), e.reason)
}

// decisionFor fills in a decision's target.
func decisionFor(req *plumbv1.InterruptRequest, t plumbv1.DecisionType) *plumbv1.Decision {
	return &plumbv1.Decision{ToolCallId: req.GetToolCallId(), AgentPath: req.GetAgentPath(), Type: t}
}

// allows reports whether req accepts decision type t.
func allows(req *plumbv1.InterruptRequest, t plumbv1.DecisionType) bool {
	return slices.Contains(req.GetAllowedDecisions(), t)
}

// blanket gives every request the same decision: --approve-all or
// --reject-all[=message].
type blanket struct {
	typ     plumbv1.DecisionType
	message string
}

func (b blanket) decide(_ context.Context, in *plumbv1.Interrupted) ([]*plumbv1.Decision, error) {
	var out []*plumbv1.Decision
	for _, req := range in.GetRequests() {
		if !allows(req, b.typ) {
			return nil, &undecidedError{req, render.DecisionName(b.typ) + " is not allowed here"}
		}
		d := decisionFor(req, b.typ)
		d.Message = b.message
		out = append(out, d)
	}
	return out, nil
}

// fileDecision is one entry of a --decisions file.
type fileDecision struct {
	// ToolCallID names the call; empty (or "*") makes the entry the
	// default for every call no other entry names.
	ToolCallID string `json:"tool_call_id"`
	// AgentPath narrows the match when set.
	AgentPath string `json:"agent_path"`
	// Type is approve, edit, reject or respond (any case; the
	// DECISION_TYPE_ prefix is allowed).
	Type string `json:"type"`
	// Args are the new arguments of an edit, a JSON object.
	Args json.RawMessage `json:"args"`
	// EditedArgsJSON is the same as a string, as in the proto.
	EditedArgsJSON string `json:"edited_args_json"`
	// Message is a reject's reason or a respond's answer.
	Message string `json:"message"`
	// IsError marks a respond as an error result.
	IsError bool `json:"is_error"`

	typ plumbv1.DecisionType
}

// fileDecider answers from a --decisions file: a JSON list of entries.
// Every interrupt of the run is answered from the same list; entries that
// name calls not pending in an interrupt are skipped.
type fileDecider struct {
	entries []fileDecision
	def     *fileDecision
}

// parseDecisionType reads "approve", "APPROVE" or "DECISION_TYPE_APPROVE".
func parseDecisionType(s string) (plumbv1.DecisionType, error) {
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "DECISION_TYPE_")
	v, ok := plumbv1.DecisionType_value["DECISION_TYPE_"+name]
	if !ok || v == 0 {
		return 0, fmt.Errorf("unknown decision type %q (want approve, edit, reject or respond)", s)
	}
	return plumbv1.DecisionType(v), nil
}

// loadDecisions reads a --decisions file ("-" is stdin).
func loadDecisions(path string, stdin io.Reader) (*fileDecider, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read decisions: %w", err)
	}
	d, err := parseDecisions(data)
	if err != nil {
		return nil, fmt.Errorf("decisions %s: %w", path, err)
	}
	return d, nil
}

func parseDecisions(data []byte) (*fileDecider, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var entries []fileDecision
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("want a JSON list of decisions: %w", err)
	}
	fd := &fileDecider{}
	seen := map[[2]string]bool{}
	for i := range entries {
		e := &entries[i]
		t, err := parseDecisionType(e.Type)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		e.typ = t
		if e.ToolCallID == "*" {
			e.ToolCallID = ""
		}
		if len(e.Args) > 0 && e.EditedArgsJSON != "" {
			return nil, fmt.Errorf("[%d]: set args or edited_args_json, not both", i)
		}
		if len(e.Args) > 0 {
			e.EditedArgsJSON = string(e.Args)
		}
		switch {
		case t == plumbv1.DecisionType_DECISION_TYPE_EDIT && e.ToolCallID == "":
			return nil, fmt.Errorf("[%d]: an edit must name its tool_call_id", i)
		case t == plumbv1.DecisionType_DECISION_TYPE_EDIT:
			args, err := jsonObject(e.EditedArgsJSON)
			if err != nil {
				return nil, fmt.Errorf("[%d]: args: %w", i, err)
			}
			e.EditedArgsJSON = args
		case e.EditedArgsJSON != "":
			return nil, fmt.Errorf("[%d]: args are only valid with edit", i)
		case t == plumbv1.DecisionType_DECISION_TYPE_RESPOND && e.Message == "":
			return nil, fmt.Errorf("[%d]: respond needs a message", i)
		}
		if e.IsError && t != plumbv1.DecisionType_DECISION_TYPE_RESPOND {
			return nil, fmt.Errorf("[%d]: is_error is only valid with respond", i)
		}
		if e.ToolCallID == "" {
			if fd.def != nil {
				return nil, fmt.Errorf("[%d]: more than one default entry (without tool_call_id)", i)
			}
			fd.def = e
			continue
		}
		k := [2]string{e.ToolCallID, e.AgentPath}
		if seen[k] {
			return nil, fmt.Errorf("[%d]: duplicate decision for %s", i, e.ToolCallID)
		}
		seen[k] = true
		fd.entries = append(fd.entries, *e)
	}
	return fd, nil
}

// match finds the entry for req: one naming its call (and path, when the
// entry has one), else the default.
func (f *fileDecider) match(req *plumbv1.InterruptRequest) *fileDecision {
	var best *fileDecision
	for i := range f.entries {
		e := &f.entries[i]
		if e.ToolCallID != req.GetToolCallId() {
			continue
		}
		if e.AgentPath == req.GetAgentPath() {
			return e
		}
		if e.AgentPath == "" {
			best = e
		}
	}
	if best != nil {
		return best
	}
	return f.def
}

func (f *fileDecider) decide(_ context.Context, in *plumbv1.Interrupted) ([]*plumbv1.Decision, error) {
	var out []*plumbv1.Decision
	for _, req := range in.GetRequests() {
		e := f.match(req)
		if e == nil {
			return nil, &undecidedError{req, "the decisions file has no entry for it"}
		}
		if !allows(req, e.typ) {
			return nil, &undecidedError{req, render.DecisionName(e.typ) + " is not allowed here"}
		}
		d := decisionFor(req, e.typ)
		d.EditedArgsJson, d.Message, d.IsError = e.EditedArgsJSON, e.Message, e.IsError
		out = append(out, d)
	}
	return out, nil
}

// jsonObject checks that s is one JSON object and returns it compacted.
func jsonObject(s string) (string, error) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(s))
	if err := dec.Decode(&obj); err != nil {
		return "", fmt.Errorf("not a JSON object: %w", err)
	}
	if obj == nil {
		return "", errors.New("not a JSON object: null")
	}
	if dec.More() {
		return "", errors.New("not a JSON object: trailing data")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(strings.TrimSpace(s))); err != nil {
		return "", err
	}
	return b.String(), nil
}

// prompter asks a human at the terminal, one request at a time.
type prompter struct {
	lines  *lineReader
	out    io.Writer // where questions go (stderr under --json)
	editor string    // $EDITOR; empty reads edited JSON from the terminal
	edit   func(ctx context.Context, editor, path string) error
}

// choice is one decision a prompt offers.
type choice struct {
	typ   plumbv1.DecisionType
	key   string // the one-letter answer
	label string
}

var choices = []choice{
	{plumbv1.DecisionType_DECISION_TYPE_APPROVE, "a", "[a]pprove"},
	{plumbv1.DecisionType_DECISION_TYPE_EDIT, "e", "[e]dit"},
	{plumbv1.DecisionType_DECISION_TYPE_REJECT, "r", "[r]eject"},
	{plumbv1.DecisionType_DECISION_TYPE_RESPOND, "s", "re[s]pond"},
}

// errBack returns from a sub-prompt to the decision menu.
var errBack = errors.New("back to the menu")

func (p *prompter) decide(ctx context.Context, in *plumbv1.Interrupted) ([]*plumbv1.Decision, error) {
	reqs := in.GetRequests()
	fmt.Fprintf(p.out, "\ninterrupt %s: %d decision(s) needed\n", in.GetInterruptId(), len(reqs))
	var out []*plumbv1.Decision
	for i, req := range reqs {
		for _, l := range render.Request(req, i+1, len(reqs)) {
			fmt.Fprintln(p.out, l)
		}
		d, err := p.one(ctx, req)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// one asks for the decision on req until it gets a usable one.
func (p *prompter) one(ctx context.Context, req *plumbv1.InterruptRequest) (*plumbv1.Decision, error) {
	var offered []choice
	for _, c := range choices {
		if allows(req, c.typ) {
			offered = append(offered, c)
		}
	}
	if len(offered) == 0 {
		return nil, &undecidedError{req, "the request allows no decision agentctl knows"}
	}
	labels := make([]string, len(offered))
	for i, c := range offered {
		labels[i] = c.label
	}
	for {
		ans, err := p.ask(ctx, "decision "+strings.Join(labels, ", ")+": ")
		if err != nil {
			return nil, err
		}
		ans = strings.ToLower(strings.TrimSpace(ans))
		var picked *choice
		for i, c := range offered {
			if ans != "" && (ans == c.key || ans == render.DecisionName(c.typ)) {
				picked = &offered[i]
			}
		}
		if picked == nil {
			if ans != "" {
				fmt.Fprintf(p.out, "%q is not one of the choices\n", ans)
			}
			continue
		}
		d := decisionFor(req, picked.typ)
		switch picked.typ {
		case plumbv1.DecisionType_DECISION_TYPE_EDIT:
			args, err := p.editArgs(ctx, req)
			if errors.Is(err, errBack) {
				continue
			}
			if err != nil {
				return nil, err
			}
			d.EditedArgsJson = args
		case plumbv1.DecisionType_DECISION_TYPE_REJECT:
			if d.Message, err = p.ask(ctx, "reason (optional): "); err != nil {
				return nil, err
			}
			d.Message = strings.TrimSpace(d.Message)
		case plumbv1.DecisionType_DECISION_TYPE_RESPOND:
			msg, err := p.ask(ctx, "response (empty to go back): ")
			if err != nil {
				return nil, err
			}
			if msg = strings.TrimSpace(msg); msg == "" {
				continue
			}
			d.Message = msg
		}
		return d, nil
	}
}

func (p *prompter) ask(ctx context.Context, q string) (string, error) {
	fmt.Fprint(p.out, q)
	s, err := p.lines.line(ctx)
	if err != nil {
		fmt.Fprintln(p.out)
	}
	return s, err
}

// editArgs gets new arguments for req: through $EDITOR on a temporary file
// holding the current ones, or typed at the terminal. It returns errBack
// when the human gives up.
func (p *prompter) editArgs(ctx context.Context, req *plumbv1.InterruptRequest) (string, error) {
	if p.editor == "" {
		return p.typeArgs(ctx)
	}
	f, err := os.CreateTemp("", "agentctl-args-*.json")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(render.PrettyJSON(req.GetArgsJson()) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	for {
		if err := p.edit(ctx, p.editor, f.Name()); err != nil {
			return "", err
		}
		data, err := os.ReadFile(f.Name())
		if err != nil {
			return "", err
		}
		args, err := jsonObject(string(data))
		if err == nil {
			return args, nil
		}
		fmt.Fprintf(p.out, "%v\n", err)
		again, err := p.ask(ctx, "edit again? [Y/n] ")
		if err != nil {
			return "", err
		}
		if a := strings.ToLower(strings.TrimSpace(again)); a == "n" || a == "no" {
			return "", errBack
		}
	}
}

// typeArgs reads a JSON object from the terminal, ended by an empty line;
// an empty first line goes back to the menu.
func (p *prompter) typeArgs(ctx context.Context) (string, error) {
	for {
		fmt.Fprintln(p.out, "new arguments as a JSON object, ended by an empty line (empty to go back; set $EDITOR to use an editor):")
		var b strings.Builder
		for {
			l, err := p.lines.line(ctx)
			if err != nil {
				return "", err
			}
			if strings.TrimSpace(l) == "" {
				break
			}
			b.WriteString(l + "\n")
		}
		if b.Len() == 0 {
			return "", errBack
		}
		args, err := jsonObject(b.String())
		if err == nil {
			return args, nil
		}
		fmt.Fprintf(p.out, "%v\n", err)
	}
}
