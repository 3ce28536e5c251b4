package mcptool

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/jsonschema"
)

// MiddlewareName is the name of the middleware in a stack.
const MiddlewareName = "mcp"

// Manager holds the configured servers and the sessions of running runs.
// It is safe for concurrent use.
type Manager struct {
	servers []*Server // sorted by name
	lg      *zap.Logger

	mu   sync.Mutex
	runs map[string]*runSessions
}

// runSessions are one run's sessions, shared by its agent contexts.
type runSessions struct {
	refs     int
	sessions map[string]*session
}

// NewManager validates servers and returns a Manager; lg may be nil.
func NewManager(servers []Server, lg *zap.Logger) (*Manager, error) {
	if lg == nil {
		lg = zap.NewNop()
	}
	m := &Manager{lg: lg.Named("mcp"), runs: make(map[string]*runSessions)}
	seen := map[string]bool{}
	for i := range servers {
		s := servers[i]
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("mcp server %s: %w", s.Name, err)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("mcp server %s: defined twice", s.Name)
		}
		seen[s.Name] = true
		m.servers = append(m.servers, &s)
	}
	slices.SortFunc(m.servers, func(a, b *Server) int { return strings.Compare(a.Name, b.Name) })
	return m, nil
}

// Prefixes returns the tool name prefix of every server.
func (m *Manager) Prefixes() []string {
	out := make([]string, len(m.servers))
	for i, s := range m.servers {
		out[i] = ToolPrefix(s.Name)
	}
	return out
}

// Close ends every session still open (at shutdown; runs normally
// release their own).
func (m *Manager) Close() {
	m.mu.Lock()
	runs := m.runs
	m.runs = make(map[string]*runSessions)
	m.mu.Unlock()
	for _, rs := range runs {
		closeAll(rs)
	}
}

// OpenSessions returns how many sessions are open (for tests and
// metrics).
func (m *Manager) OpenSessions() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, rs := range m.runs {
		n += len(rs.sessions)
	}
	return n
}

func closeAll(rs *runSessions) {
	var wg sync.WaitGroup
	for _, s := range rs.sessions {
		wg.Go(s.close)
	}
	wg.Wait()
}

// join returns the run's sessions and a function that leaves them; the
// last context to leave closes them.
func (m *Manager) join(runID string) (*runSessions, func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rs := m.runs[runID]
	if rs == nil {
		rs = &runSessions{sessions: make(map[string]*session)}
		m.runs[runID] = rs
	}
	rs.refs++
	var once sync.Once
	return rs, func() {
		once.Do(func() {
			m.mu.Lock()
			rs.refs--
			last := rs.refs == 0 && m.runs[runID] == rs
			if last {
				delete(m.runs, runID)
			}
			m.mu.Unlock()
			if last {
				closeAll(rs)
			}
		})
	}
}

// session returns the run's session with srv, creating it.
func (m *Manager) session(rs *runSessions, srv *Server, rc *agent.RunContext) *session {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := rs.sessions[srv.Name]
	if s == nil {
		lg := m.lg.With(zap.String("mcp-server", srv.Name), zap.String("run-id", rc.RunID))
		s = newSession(srv, rc.Backend, lg)
		rs.sessions[srv.Name] = s
	}
	return s
}

// Middleware returns the middleware of one agent context. allowsAny
// reports whether the context's allow-list may accept some name with a
// given prefix (profile.Context.AllowsAny); nil means every server.
func (m *Manager) Middleware(allowsAny func(prefix string) bool) *Middleware {
	return &Middleware{m: m, allowsAny: allowsAny}
}

// Middleware offers the tools of the servers its agent context may use;
// it implements agent.ToolProvider.
type Middleware struct {
	agent.BaseMiddleware
	m         *Manager
	allowsAny func(prefix string) bool
	agent     string   // the context's agent, for warnings
	gates     []string // the context's interrupt_on keys

	mu sync.Mutex
	// down holds, by tool name prefix, why each server that could not be
	// listed at this segment's start is unavailable.
	down map[string]error
}

// ExplainUnknownTool implements agent.UnknownToolExplainer: a call of a
// tool of a server that could not be listed at this segment's start (a
// call approved before the server went down) says the server is
// unavailable, and why, rather than that the tool is unknown.
func (mw *Middleware) ExplainUnknownTool(name string) (string, bool) {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	for prefix, cause := range mw.down {
		if strings.HasPrefix(name, prefix) {
			server := strings.TrimSuffix(strings.TrimPrefix(prefix, "mcp__"), "__")
			return fmt.Sprintf("MCP server %s is unavailable, so %s was not called: %s. Calling %sunavailable retries the server; its tools are offered again from the next run or subagent on.",
				server, name, oneLine(cause), prefix), true
		}
	}
	return "", false
}

// CheckGates makes the middleware warn, at the start of each agent
// context, about every interrupt_on key of agent that names an MCP tool
// (or pattern) none of its server's listed tools has: a typo there would
// leave the real tool ungated. Keys of servers that could not be listed
// are not checked (their tools are unknown). It returns mw.
func (mw *Middleware) CheckGates(agent string, keys []string) *Middleware {
	mw.agent, mw.gates = agent, keys
	return mw
}

// Name implements agent.Middleware.
func (*Middleware) Name() string { return MiddlewareName }

// RunTools implements agent.ToolProvider: it lists, concurrently, the
// tools of every server the context may use, each bounded by the
// server's timeout. It never fails: a server that cannot be listed is
// offered as tools that report why.
func (mw *Middleware) RunTools(ctx context.Context, rc *agent.RunContext) ([]agent.Tool, func(), error) {
	var use []*Server
	for _, s := range mw.m.servers {
		if mw.allowsAny == nil || mw.allowsAny(ToolPrefix(s.Name)) {
			use = append(use, s)
		}
	}
	if len(use) == 0 {
		return nil, nil, nil
	}
	rs, leave := mw.m.join(rc.RunID)
	out := make([][]agent.Tool, len(use))
	causes := make([]error, len(use))
	var wg sync.WaitGroup
	for i, srv := range use {
		s := mw.m.session(rs, srv, rc)
		wg.Go(func() { out[i], causes[i] = mw.m.toolsOf(ctx, s) })
	}
	wg.Wait()
	down := map[string]error{}
	for i, srv := range use {
		if causes[i] == nil {
			mw.checkGates(srv, out[i], rc)
		} else {
			down[ToolPrefix(srv.Name)] = causes[i]
		}
	}
	mw.mu.Lock()
	mw.down = down
	mw.mu.Unlock()
	return slices.Concat(out...), leave, nil
}

// checkGates warns about the gates on srv's tools that match none of
// the tools it listed.
func (mw *Middleware) checkGates(srv *Server, listed []agent.Tool, rc *agent.RunContext) {
	prefix := ToolPrefix(srv.Name)
	var names []string
	for _, t := range listed {
		names = append(names, t.Name)
	}
	for _, key := range mw.gates {
		p, pattern := strings.CutSuffix(key, "*")
		if !strings.HasPrefix(p, prefix) || (pattern && p == prefix) {
			continue
		}
		if slices.ContainsFunc(names, func(n string) bool { return n == key || pattern && strings.HasPrefix(n, p) }) {
			continue
		}
		mw.m.lg.Warn("interrupt_on names an MCP tool that its server does not list: the gate applies to nothing (a typo?)",
			zap.String("agent", mw.agent), zap.String("interrupt-on", key), zap.String("mcp-server", srv.Name),
			zap.Strings("tools", names), zap.String("run-id", rc.RunID))
	}
}

// toolsOf lists a session's tools as agent tools. When the server could
// not be listed it returns why, with the tools that report it.
func (m *Manager) toolsOf(ctx context.Context, s *session) (_ []agent.Tool, down error) {
	listed, err := s.list(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		s.lg.Warn("MCP server unavailable at run start", zap.Error(err))
		return unavailable(s, err), err
	}
	var out []agent.Tool
	seen := map[string]bool{}
	for _, t := range listed {
		name := toolName(s.srv.Name, t.Name)
		if seen[name] {
			s.lg.Warn("MCP tool skipped: its name clashes with another tool's once made model-safe", zap.String("mcp-tool", t.Name), zap.String("tool", name))
			continue
		}
		seen[name] = true
		schema, err := inputSchema(t.InputSchema)
		if err != nil {
			// OpenAI-compatible providers reject a whole request that has
			// one such tool: offering it would fail every run that may use
			// the server.
			s.lg.Warn("MCP tool dropped: model providers take only object input schemas", zap.String("mcp-tool", t.Name), zap.String("tool", name), zap.Error(err))
			continue
		}
		out = append(out, tool(s, name, t, schema))
	}
	return out, nil
}

// tool is the agent tool of MCP tool t, whose input schema is schema.
func tool(s *session, name string, t *sdk.Tool, schema json.RawMessage) agent.Tool {
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	if len(desc) > maxDescriptionChars {
		desc = desc[:maxDescriptionChars] + "…"
	}
	at := agent.Tool{
		Name:         name,
		Description:  fmt.Sprintf("[MCP server %s] %s", s.srv.Name, desc),
		Schema:       schema,
		Timeout:      s.srv.timeout(),
		Func:         caller(s, t.Name),
		Capabilities: s.srv.Capabilities(),
	}
	if _, err := jsonschema.Compile(at.Schema); err != nil {
		// The server validates its own input; the model still sees the
		// schema as the server wrote it.
		s.lg.Info("MCP tool schema is beyond plumb's validator; only the object shape is checked", zap.String("tool", name), zap.Error(err))
		at.ValidationSchema = json.RawMessage(`{"type":"object"}`)
	}
	return at
}

// inputSchema renders a listed input schema as an object schema: none
// is an object without properties, one without a type gets "object". A
// schema that is not a JSON object, or whose type is not "object", is an
// error: the model can only send an object of arguments.
func inputSchema(v any) (json.RawMessage, error) {
	if v == nil {
		return json.RawMessage(`{"type":"object","properties":{}}`), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return nil, fmt.Errorf("the input schema is not a JSON object: %.100s", b)
	}
	switch typ, ok := m["type"]; {
	case !ok:
		m["type"] = "object"
		b, _ = json.Marshal(m)
	case typ != "object":
		return nil, fmt.Errorf("the input schema's type is %v, not object", typ)
	}
	return b, nil
}

func caller(s *session, mcpName string) agent.ToolFunc {
	return func(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
		res, err := s.call(ctx, mcpName, req.Call.Args)
		if err != nil {
			return agent.ToolResult{}, err
		}
		return render(s.srv.Name, res, s.srv.maxResultChars()), nil
	}
}

// unavailable is what a server that could not be listed offers: its
// configured tools with a permissive schema, or one tool that says why;
// their calls retry the server.
func unavailable(s *session, cause error) []agent.Tool {
	if len(s.srv.Tools) > 0 {
		var out []agent.Tool
		for _, t := range s.srv.Tools {
			name := toolName(s.srv.Name, t)
			out = append(out, agent.Tool{
				Name: name,
				Description: fmt.Sprintf("[MCP server %s] Tool %s. The server could not be listed when this run started (%s), so its description and schema are unknown; a call retries the server.",
					s.srv.Name, t, oneLine(cause)),
				Schema:       json.RawMessage(`{"type":"object"}`),
				Timeout:      s.srv.timeout() + s.srv.startupTimeout(),
				Capabilities: s.srv.Capabilities(),
				Func: func(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
					if _, err := s.list(ctx); err != nil {
						return agent.ToolResult{}, err
					}
					return caller(s, t)(ctx, req)
				},
			})
		}
		return out
	}
	return []agent.Tool{{
		Name: ToolPrefix(s.srv.Name) + "unavailable",
		Description: fmt.Sprintf("MCP server %s could not be reached when this run started, so its tools are missing: %s. Calling this tool retries the server and reports the outcome; its tools are offered again from the next run.",
			s.srv.Name, oneLine(cause)),
		Schema:       json.RawMessage(`{"type":"object","properties":{}}`),
		Timeout:      s.srv.startupTimeout() + s.srv.timeout(),
		Capabilities: s.srv.Capabilities(),
		Func: func(ctx context.Context, _ *agent.ToolRequest) (agent.ToolResult, error) {
			tools, err := s.list(ctx)
			if err != nil {
				return agent.ToolResult{}, err
			}
			names := make([]string, len(tools))
			for i, t := range tools {
				names[i] = toolName(s.srv.Name, t.Name)
			}
			return agent.ToolResult{Content: fmt.Sprintf("MCP server %s answers now; its tools (%s) are offered from the next run or subagent on.", s.srv.Name, strings.Join(names, ", "))}, nil
		},
	}}
}

// oneLine renders err on one line of at most about 1,000 bytes. A longer
// one keeps its head and its tail, where a stdio server's last stderr
// lines are (the reason it failed, more often than not).
func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	const head, tail = 300, 700
	if len(s) > head+tail {
		s = strings.ToValidUTF8(s[:head], "") + " … " + strings.ToValidUTF8(s[len(s)-tail:], "")
	}
	return s
}
