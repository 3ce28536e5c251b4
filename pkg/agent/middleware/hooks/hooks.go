package hooks

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
)

// Name is the middleware's name.
const Name = "hooks"

// Phases and actions.
const (
	PhasePre     = "pre"
	PhasePost    = "post"
	ActionBlock  = "block"
	ActionRedact = "redact"
)

// Hook is one configured hook (a `hooks:` entry of agentd.yaml).
type Hook struct {
	// Name is shown in block messages.
	Name string
	// Phase is "pre" or "post".
	Phase string
	// Tools are tool-name globs (path.Match syntax).
	Tools []string
	// Match is optional; without it every call to the tools matches.
	Match *Match
	// Action is "block" (pre) or "redact" (post).
	Action string
	// Message is the reason given when blocking.
	Message string
	// Replacement replaces each redacted match.
	Replacement string
}

// Match selects calls or results.
type Match struct {
	// Arg is a JSON pointer into the arguments (pre hooks only).
	Arg string
	// Regex is RE2 syntax.
	Regex string
}

// PreToolHook may block a call or rewrite its arguments (newArgs non-nil).
type PreToolHook func(ctx context.Context, call model.ToolCall) (block bool, reason string, newArgs json.RawMessage)

// PostToolHook may rewrite a result.
type PostToolHook func(ctx context.Context, call model.ToolCall, res agent.ToolResult) agent.ToolResult

type compiled struct {
	Hook
	re *regexp.Regexp
}

// Middleware runs the hooks.
type Middleware struct {
	agent.BaseMiddleware
	hooks []compiled
	pre   []PreToolHook
	post  []PostToolHook
	lg    *zap.Logger
}

// Option adds Go hooks.
type Option func(*Middleware)

// WithPre registers a Go pre hook (run after the configured ones).
func WithPre(h PreToolHook) Option { return func(m *Middleware) { m.pre = append(m.pre, h) } }

// WithPost registers a Go post hook (run after the configured ones).
func WithPost(h PostToolHook) Option { return func(m *Middleware) { m.post = append(m.post, h) } }

// Validate checks configured hooks (used at startup).
func Validate(hs []Hook) error {
	_, err := compile(hs)
	return err
}

func compile(hs []Hook) ([]compiled, error) {
	var out []compiled
	for i, h := range hs {
		where := fmt.Sprintf("hooks[%d] (%s)", i, h.Name)
		if h.Name == "" {
			return nil, fmt.Errorf("%s: name is required", where)
		}
		switch {
		case h.Phase == PhasePre && h.Action == ActionBlock:
		case h.Phase == PhasePost && h.Action == ActionRedact:
		default:
			return nil, fmt.Errorf("%s: phase %q with action %q is not supported (pre/block or post/redact)", where, h.Phase, h.Action)
		}
		if len(h.Tools) == 0 {
			return nil, fmt.Errorf("%s: tools is required", where)
		}
		for _, g := range h.Tools {
			if _, err := path.Match(g, ""); err != nil {
				return nil, fmt.Errorf("%s: tool glob %q: %v", where, g, err)
			}
		}
		c := compiled{Hook: h}
		if h.Match != nil {
			if h.Phase == PhasePost && h.Match.Arg != "" {
				return nil, fmt.Errorf("%s: match.arg is only valid for pre hooks", where)
			}
			if h.Match.Arg != "" && !strings.HasPrefix(h.Match.Arg, "/") {
				return nil, fmt.Errorf("%s: match.arg %q is not a JSON pointer", where, h.Match.Arg)
			}
			re, err := regexp.Compile(h.Match.Regex)
			if err != nil {
				return nil, fmt.Errorf("%s: match.regex: %v", where, err)
			}
			c.re = re
		}
		if h.Phase == PhasePost && c.re == nil {
			return nil, fmt.Errorf("%s: a redact hook needs match.regex", where)
		}
		out = append(out, c)
	}
	return out, nil
}

// New returns the middleware; hs must pass Validate.
func New(hs []Hook, lg *zap.Logger, opts ...Option) (*Middleware, error) {
	cs, err := compile(hs)
	if err != nil {
		return nil, err
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	m := &Middleware{hooks: cs, lg: lg.Named("hooks")}
	for _, o := range opts {
		o(m)
	}
	return m, nil
}

// Name implements agent.Middleware.
func (*Middleware) Name() string { return Name }

func (c compiled) applies(tool string) bool {
	for _, g := range c.Tools {
		if ok, _ := path.Match(g, tool); ok {
			return true
		}
	}
	return false
}

// rewrites reports whether a post hook may rewrite the results of tool:
// a Go post hook sees every result, a configured one those of its tools.
func (m *Middleware) rewrites(tool string) bool {
	if len(m.post) > 0 {
		return true
	}
	for _, h := range m.hooks {
		if h.Phase == PhasePost && h.applies(tool) {
			return true
		}
	}
	return false
}

// WrapTool runs pre hooks, the call, then post hooks.
func (m *Middleware) WrapTool(next agent.ToolHandler) agent.ToolHandler {
	return func(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
		// A call a human already decided to reject or answer is not run, so
		// there is nothing to check.
		if d := req.Decision; d == nil || d.Type == agent.DecisionApprove || d.Type == agent.DecisionEdit {
			for _, h := range m.hooks {
				if h.Phase != PhasePre || !h.applies(req.Call.Name) || !h.matchesCall(req.Call.Args) {
					continue
				}
				m.lg.Info("call blocked by hook", zap.String("hook", h.Name), zap.String("tool", req.Call.Name), zap.String("tool-call-id", req.Call.ID))
				return blocked(h.Name, h.Message), nil
			}
			for i, h := range m.pre {
				block, reason, newArgs := h(ctx, req.Call)
				if block {
					return blocked(fmt.Sprintf("go-hook-%d", i+1), reason), nil
				}
				if newArgs != nil {
					req.Call.Args = string(newArgs)
				}
			}
		}
		if m.rewrites(req.Call.Name) {
			// Output streamed while the tool runs would pass these hooks by.
			req.HoldOutput()
		}
		res, err := next(ctx, req)
		if err != nil {
			return res, err
		}
		for _, h := range m.hooks {
			if h.Phase != PhasePost || !h.applies(req.Call.Name) {
				continue
			}
			if h.re.MatchString(res.Content) {
				res.Content = h.re.ReplaceAllLiteralString(res.Content, h.Replacement)
				m.lg.Info("result redacted by hook", zap.String("hook", h.Name), zap.String("tool", req.Call.Name))
			}
		}
		for _, h := range m.post {
			res = h(ctx, req.Call, res)
		}
		return res, nil
	}
}

func blocked(name, message string) agent.ToolResult {
	text := "blocked by hook " + name
	if message != "" {
		text += ": " + message
	}
	return agent.ToolResult{Content: text, IsError: true, Origin: agent.OriginBlocked}
}

func (c compiled) matchesCall(args string) bool {
	if c.re == nil {
		return true
	}
	if c.Match.Arg == "" {
		return c.re.MatchString(args)
	}
	var doc any
	if err := json.Unmarshal([]byte(args), &doc); err != nil {
		return false
	}
	v, ok := pointer(doc, c.Match.Arg)
	if !ok {
		return false
	}
	s, isString := v.(string)
	if !isString {
		b, _ := json.Marshal(v)
		s = string(b)
	}
	return c.re.MatchString(s)
}

// pointer resolves an RFC 6901 JSON pointer.
func pointer(doc any, p string) (any, bool) {
	if p == "" {
		return doc, true
	}
	for _, tok := range strings.Split(p[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := doc.(type) {
		case map[string]any:
			v, ok := x[tok]
			if !ok {
				return nil, false
			}
			doc = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			doc = x[i]
		default:
			return nil, false
		}
	}
	return doc, true
}
