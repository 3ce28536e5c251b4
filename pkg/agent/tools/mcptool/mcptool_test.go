package mcptool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/middleware/hitl"
	"github.com/plumbhq/plumb/pkg/agent/tools/mcptool"
	"github.com/plumbhq/plumb/pkg/agent/tools/mcptool/mcptest"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/backendtest"
	"github.com/plumbhq/plumb/pkg/backend/state"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/model/openai"
)

// sandboxLike is a backend that runs processes (locally).
type sandboxLike struct {
	backend.Backend
	*backendtest.LocalProcesses
}

// stdio is a stdio server that runs this test binary in mode.
func stdio(name, mode string) mcptool.Server {
	return mcptool.Server{
		Name: name, Command: os.Args[0], Args: []string{"-test.run=^$"},
		Env:     map[string]string{"MCPTEST_SERVER": mode},
		Timeout: 2 * time.Second, StartupTimeout: 30 * time.Second,
	}
}

type harness struct {
	t      *testing.T
	srv    *modeltest.Server
	mgr    *mcptool.Manager
	local  *backendtest.LocalProcesses
	runner *agent.Runner
	logs   *observer.ObservedLogs // the manager's warnings
	allow  func(string) bool
	// gates, when set, gate the root's calls of these tools (hitl).
	gates map[string]hitl.Rule
	// sub, when set, adds a "task" tool that runs subagent "sub" with its
	// own mcp middleware (allowed by sub).
	sub func(prefix string) bool
}

func newHarness(t *testing.T, b backend.Backend, servers ...mcptool.Server) *harness {
	t.Helper()
	h := &harness{t: t, srv: modeltest.New(t), local: &backendtest.LocalProcesses{}}
	core, logs := observer.New(zapcore.WarnLevel)
	h.logs = logs
	lg := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
	mgr, err := mcptool.NewManager(servers, lg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mgr.Close)
	h.mgr = mgr
	if b == nil {
		b = sandboxLike{state.New(), h.local}
	}
	m, err := openai.New(openai.Config{BaseURL: h.srv.URL(), Model: "test-model"}, openai.WithHTTPClient(h.srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	h.runner = agent.NewRunner(agent.NewMemoryStore(), func(context.Context, agent.ConfigureRequest) (*agent.Config, error) {
		cfg := &agent.Config{Agent: "main", Model: m, Backend: b, Allow: h.allow,
			Middleware: []agent.Middleware{mgr.Middleware(nil), hitl.New(h.gates, nil)}}
		if h.sub != nil {
			cfg.Tools = append(cfg.Tools, agent.Tool{Name: "task", Subagent: true, Timeout: -1,
				Func: func(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
					out := agent.RunSubagent(ctx, req, agent.SubagentRequest{Name: "sub", Description: "work", Config: &agent.Config{
						Agent: "sub", Model: m, Allow: h.allow, Middleware: []agent.Middleware{mgr.Middleware(h.sub)},
					}})
					return agent.ToolResult{Content: out.Text}, out.Err
				}})
		}
		return cfg, nil
	}, agent.WithLogger(lg))
	return h
}

// run runs input and returns the tool results by call id.
func (h *harness) run() (*agent.RunResult, map[string]agent.ToolResultEvent) {
	h.t.Helper()
	var mu sync.Mutex
	results := map[string]agent.ToolResultEvent{}
	res, err := h.runner.Run(context.Background(), agent.RunInput{Input: []string{"go"}}, func(e agent.Event) {
		if r, ok := e.Payload.(agent.ToolResultEvent); ok {
			mu.Lock()
			results[r.ID] = r
			mu.Unlock()
		}
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if res.Status != agent.StatusCompleted {
		h.t.Fatalf("run ended %s (%+v)", res.Status, res.Error)
	}
	if n := h.mgr.OpenSessions(); n != 0 {
		h.t.Errorf("%d MCP sessions still open after the run", n)
	}
	if n := h.local.Running(); n != 0 {
		h.t.Errorf("%d server processes still running after the run", n)
	}
	return res, results
}

func (h *harness) offered(key string) []string {
	var names []string
	for _, tool := range h.srv.Requests(key)[0].Body.Tools {
		names = append(names, tool.Function.Name)
	}
	return names
}

func want(t *testing.T, results map[string]agent.ToolResultEvent, id string, isError bool, parts ...string) agent.ToolResultEvent {
	t.Helper()
	r, ok := results[id]
	if !ok {
		t.Errorf("no result for %s", id)
		return r
	}
	t.Logf("%s: %.300s", id, r.Content)
	if r.IsError != isError {
		t.Errorf("%s: is_error %v, want %v: %s", id, r.IsError, isError, r.Content)
	}
	for _, p := range parts {
		if !strings.Contains(r.Content, p) {
			t.Errorf("%s: %q lacks %q", id, r.Content, p)
		}
	}
	return r
}

func call(id, name, args string) modeltest.Call {
	return modeltest.Call{ID: id, Name: name, Args: args}
}

// TestStdioServer: a stdio server started through the backend's process
// starter lists its tools as mcp__loc__<tool> with their schemas; calls
// return text, structured and summarized content; isError is a tool
// error; a hang times out; a huge result is cut with a note; garbage on
// stdout breaks the connection as a tool error and the next call
// reconnects (a new process); at the end no process is left.
func TestStdioServer(t *testing.T) {
	srv := stdio("loc", mcptest.ModeServe)
	srv.MaxResultChars = 1000
	h := newHarness(t, nil, srv)
	h.srv.Script("main",
		modeltest.Calls(
			call("e1", "mcp__loc__echo", `{"text":"hello"}`),
			call("a1", "mcp__loc__add", `{"a":2,"b":3}`),
			call("a2", "mcp__loc__add", `{"a":"two"}`),
			call("f1", "mcp__loc__fail", `{}`),
			call("i1", "mcp__loc__image", `{}`),
			call("u1", "mcp__loc__huge", `{"chars":5000}`),
			call("h1", "mcp__loc__hang", `{}`),
			call("p1", "mcp__loc__pid", `{}`),
		),
		modeltest.Calls(call("g1", "mcp__loc__garbage", `{}`)),
		modeltest.Calls(call("e2", "mcp__loc__echo", `{"text":"again"}`), call("p2", "mcp__loc__pid", `{}`)),
		modeltest.Text("done"))
	res, results := h.run()
	want(t, results, "e1", false, "hello")
	want(t, results, "a1", false, `{"sum":5}`)
	want(t, results, "a2", true, "Invalid arguments for mcp__loc__add")
	want(t, results, "f1", true, "it failed on purpose")
	want(t, results, "i1", false, "a pixel:", "[image image/png, ", "bytes, not shown]", "[resource link file:///pixel.png (pixel)]")
	u := want(t, results, "u1", false, "[output cut: the first 1000 of 5000 characters are shown")
	if len(u.Content) > 1300 {
		t.Errorf("huge result is %d bytes", len(u.Content))
	}
	want(t, results, "h1", true, "tool mcp__loc__hang timed out after 2s")
	want(t, results, "g1", true, "mcp__loc__garbage failed: MCP server loc broke the connection", "; the next call reconnects")
	want(t, results, "e2", false, "again")
	p1, p2 := results["p1"].Content, results["p2"].Content
	if p1 == "" || p1 == p2 {
		t.Errorf("pid before garbage %q, after %q: want a new process", p1, p2)
	}
	if n := h.local.Started(); n != 2 {
		t.Errorf("%d processes started, want 2", n)
	}
	for _, pid := range h.local.Pids() {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("process %d still exists", pid)
		}
	}
	offered := h.offered("main")
	wantNames := []string{"mcp__loc__add", "mcp__loc__echo", "mcp__loc__env", "mcp__loc__fail", "mcp__loc__garbage", "mcp__loc__hang", "mcp__loc__huge", "mcp__loc__image", "mcp__loc__pid"}
	if !slices.Equal(offered, wantNames) {
		t.Errorf("offered %v, want %v", offered, wantNames)
	}
	for _, tool := range h.srv.Requests("main")[0].Body.Tools {
		if tool.Function.Name == "mcp__loc__echo" {
			if !strings.Contains(tool.Function.Description, "[MCP server loc] Echoes text.") {
				t.Errorf("description %q", tool.Function.Description)
			}
			if b, _ := json.Marshal(tool.Function.Parameters); !strings.Contains(string(b), `"text"`) {
				t.Errorf("echo schema %s", b)
			}
		}
	}
	if res.FinalText != "done" {
		t.Errorf("final text %q", res.FinalText)
	}
}

// TestBadServers: a server that exits, speaks garbage, never answers the
// handshake, or cannot start because the backend runs no processes is
// offered as mcp__<name>__unavailable (or as its configured tools); a
// call is a tool error that says why, the run completes, and no process
// is left.
func TestBadServers(t *testing.T) {
	noProc := state.New()
	cases := []struct {
		name    string
		srv     mcptool.Server
		b       backend.Backend
		tool    string
		offered []string
		parts   []string
	}{
		{
			name: "exits", srv: stdio("bad", mcptest.ModeExit), tool: "mcp__bad__unavailable",
			parts: []string{"MCP server bad", "cannot open the database"},
		},
		{
			name: "garbage", srv: stdio("bad", mcptest.ModeGarbage), tool: "mcp__bad__unavailable",
			parts: []string{"MCP server bad failed the MCP handshake", "invalid character"},
		},
		{
			name: "silent", srv: func() mcptool.Server {
				s := stdio("bad", mcptest.ModeSilent)
				s.StartupTimeout = time.Second
				return s
			}(), tool: "mcp__bad__unavailable",
			parts: []string{"MCP server bad did not complete the MCP handshake within 1s"},
		},
		{
			name: "no processes", srv: stdio("bad", mcptest.ModeServe), b: noProc, tool: "mcp__bad__unavailable",
			parts: []string{"this thread's backend cannot run processes"},
		},
		{
			name: "configured tools", srv: func() mcptool.Server {
				s := stdio("bad", mcptest.ModeExit)
				s.Tools = []string{"echo", "add"}
				return s
			}(), tool: "mcp__bad__echo", offered: []string{"mcp__bad__add", "mcp__bad__echo"},
			parts: []string{"mcp__bad__echo failed: MCP server bad", "cannot open the database"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.b, tc.srv)
			h.srv.Script("main", modeltest.Calls(call("c1", tc.tool, `{}`)), modeltest.Text("ok"))
			_, results := h.run()
			want(t, results, "c1", true, tc.parts...)
			offered := tc.offered
			if offered == nil {
				offered = []string{tc.tool}
			}
			if got := h.offered("main"); !slices.Equal(got, offered) {
				t.Errorf("offered %v, want %v", got, offered)
			}
			for _, tool := range h.srv.Requests("main")[0].Body.Tools {
				if tc.offered == nil && !strings.Contains(tool.Function.Description, "could not be reached when this run started") {
					t.Errorf("description %q", tool.Function.Description)
				}
			}
		})
	}
}

// TestStartFailureShowsStderrEnd: a stdio server that dies at startup
// after a long log is offered as unavailable with the last lines of its
// stderr, which hold the reason, in both the tool's description (what
// the model sees at run start) and the call's error; older lines are
// left out.
func TestStartFailureShowsStderrEnd(t *testing.T) {
	h := newHarness(t, nil, stdio("bad", mcptest.ModeCrash))
	h.srv.Script("main", modeltest.Calls(call("c1", "mcp__bad__unavailable", `{}`)), modeltest.Text("ok"))
	_, results := h.run()
	r := want(t, results, "c1", true, "MCP server bad", "its stderr ends with: ", mcptest.CrashLine)
	if strings.Contains(r.Content, "module 189") || !strings.Contains(r.Content, "module 199") {
		t.Errorf("the stderr note is not the last lines: %s", r.Content)
	}
	tools := h.srv.Requests("main")[0].Body.Tools
	if len(tools) != 1 || !strings.Contains(tools[0].Function.Description, mcptest.CrashLine) {
		t.Errorf("the description lacks the end of stderr: %+v", tools)
	}
}

// TestMessageLimit: a result over the server's message limit breaks the
// connection as a tool error naming the limit; the next call reconnects.
func TestMessageLimit(t *testing.T) {
	srv := stdio("loc", mcptest.ModeServe)
	srv.MaxMessageBytes = 64 << 10
	h := newHarness(t, nil, srv)
	h.srv.Script("main",
		modeltest.Calls(call("u1", "mcp__loc__huge", `{"chars":200000}`)),
		modeltest.Calls(call("e1", "mcp__loc__echo", `{"text":"still here"}`)),
		modeltest.Text("ok"))
	_, results := h.run()
	want(t, results, "u1", true, "MCP server loc broke the connection", "maximum line length", "at most 65536 bytes")
	want(t, results, "e1", false, "still here")
}

// TestHTTPServer: a streamable-HTTP server on loopback gets the
// configured headers; its tools work like a stdio server's, a hang times
// out and the session is closed at the end of the run (goleak checks the
// connections). Wrong credentials make it unavailable.
func TestHTTPServer(t *testing.T) {
	ts := httptest.NewServer(mcptest.Handler(mcptest.Options{}, "Bearer s3cret"))
	t.Cleanup(ts.Close)
	for _, tc := range []struct {
		name string
		auth string
	}{{"ok", "Bearer s3cret"}, {"unauthorized", "Bearer nope"}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := mcptool.Server{Name: "web", URL: ts.URL, Headers: map[string]string{"Authorization": tc.auth},
				Timeout: 2 * time.Second, StartupTimeout: 30 * time.Second, MaxResultChars: 100, MaxMessageBytes: 64 << 10}
			h := newHarness(t, state.New(), srv)
			if tc.auth != "Bearer s3cret" {
				h.srv.Script("main", modeltest.Calls(call("x1", "mcp__web__unavailable", `{}`)), modeltest.Text("ok"))
				_, results := h.run()
				want(t, results, "x1", true, "MCP server web", "Unauthorized")
				return
			}
			h.srv.Script("main",
				modeltest.Calls(
					call("e1", "mcp__web__echo", `{"text":"over http"}`),
					call("a1", "mcp__web__add", `{"a":40,"b":2}`),
					call("h1", "mcp__web__hang", `{}`),
					call("u1", "mcp__web__huge", `{"chars":1000}`),
					call("f1", "mcp__web__fail", `{}`),
				),
				modeltest.Calls(call("b1", "mcp__web__huge", `{"chars":200000}`)),
				modeltest.Calls(call("e2", "mcp__web__echo", `{"text":"after the big one"}`)),
				modeltest.Text("ok"))
			_, results := h.run()
			want(t, results, "e1", false, "over http")
			want(t, results, "a1", false, `{"sum":42}`)
			want(t, results, "h1", true, "tool mcp__web__hang timed out after 2s")
			want(t, results, "u1", false, "[output cut: the first 100 of 1000 characters")
			want(t, results, "f1", true, "it failed on purpose")
			want(t, results, "b1", true, "MCP server web answered with more than 65536 bytes")
			want(t, results, "e2", false, "after the big one")
		})
	}
}

// TestNonObjectSchemaDropped: a listed tool whose input schema is not an
// object (which OpenAI-compatible providers reject, failing the whole
// request) is not offered, with a warning naming it; the server's other
// tools are offered and work.
func TestNonObjectSchemaDropped(t *testing.T) {
	ts := httptest.NewServer(mcptest.Handler(mcptest.Options{BadSchemas: true}, ""))
	t.Cleanup(ts.Close)
	h := newHarness(t, state.New(), mcptool.Server{Name: "web", URL: ts.URL, Timeout: 10 * time.Second})
	h.srv.Script("main", modeltest.Calls(call("e1", "mcp__web__echo", `{"text":"still here"}`)), modeltest.Text("ok"))
	_, results := h.run()
	want(t, results, "e1", false, "still here")
	offered := h.offered("main")
	if slices.Contains(offered, "mcp__web__scalar") || slices.Contains(offered, "mcp__web__list") || !slices.Contains(offered, "mcp__web__add") {
		t.Errorf("offered %v", offered)
	}
	var dropped []string
	for _, e := range h.logs.FilterMessageSnippet("MCP tool dropped").All() {
		dropped = append(dropped, e.ContextMap()["tool"].(string))
	}
	slices.Sort(dropped)
	if !slices.Equal(dropped, []string{"mcp__web__list", "mcp__web__scalar"}) {
		t.Errorf("warned about %v, want the two tools with bad schemas", dropped)
	}
}

// TestApprovedCallWhenServerIsDown: a call approved while its server was
// up, resumed after the server went down, fails saying the server is
// unavailable and why, not that the tool is unknown.
func TestApprovedCallWhenServerIsDown(t *testing.T) {
	ts := httptest.NewServer(mcptest.Handler(mcptest.Options{}, ""))
	t.Cleanup(ts.Close)
	h := newHarness(t, state.New(), mcptool.Server{Name: "web", URL: ts.URL, Timeout: 10 * time.Second, StartupTimeout: 10 * time.Second})
	h.gates = map[string]hitl.Rule{"mcp__web__add": {}}
	h.srv.Script("main", modeltest.Calls(call("a1", "mcp__web__add", `{"a":1,"b":2}`)), modeltest.Text("done"))
	res, err := h.runner.Run(context.Background(), agent.RunInput{Input: []string{"go"}}, func(agent.Event) {})
	if err != nil || res.Status != agent.StatusInterrupted {
		t.Fatalf("run: %v, %+v", err, res)
	}
	ts.Close() // the server goes down while the call waits for approval
	var got *agent.ToolResultEvent
	res, err = h.runner.Resume(context.Background(), agent.ResumeInput{ThreadID: res.ThreadID, InterruptID: res.Interrupt.InterruptID,
		Decisions: []agent.Decision{{ToolCallID: "a1", Type: agent.DecisionApprove}}}, func(e agent.Event) {
		if r, ok := e.Payload.(agent.ToolResultEvent); ok && r.ID == "a1" {
			got = &r
		}
	})
	if err != nil || res.Status != agent.StatusCompleted {
		t.Fatalf("resume: %v, %+v", err, res)
	}
	t.Logf("a1: %+v", got)
	if got == nil || !got.IsError || !strings.Contains(got.Content, "MCP server web is unavailable, so mcp__web__add was not called: ") ||
		strings.Contains(got.Content, "Unknown tool") {
		t.Fatalf("a1 after the server went down: %+v", got)
	}
}

// TestHTTPFailureKeepsItsCause: an HTTP error answer that is no JSON-RPC
// message (a 502 from a proxy) is reported with its status and the start
// of its body, where the configured header values are redacted, instead
// of the SDK's bare "rejected by transport".
func TestHTTPFailureKeepsItsCause(t *testing.T) {
	inner := mcptest.Handler(mcptest.Options{}, "Bearer s3cret-token")
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if bytes.Contains(b, []byte(`"tools/call"`)) {
			http.Error(w, "the backend database is down (you sent "+r.Header.Get("Authorization")+")", http.StatusBadGateway)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	h := newHarness(t, state.New(), mcptool.Server{Name: "web", URL: ts.URL, Headers: map[string]string{"Authorization": "Bearer s3cret-token"}, Timeout: 10 * time.Second})
	h.srv.Script("main", modeltest.Calls(call("a1", "mcp__web__add", `{"a":1,"b":2}`)), modeltest.Text("done"))
	_, results := h.run()
	r := want(t, results, "a1", true, "MCP server web", "Bad Gateway", "HTTP 502 Bad Gateway: the backend database is down (you sent [redacted])")
	if strings.Contains(r.Content, "s3cret") {
		t.Errorf("the header's secret reached the result: %s", r.Content)
	}
}

// TestSharedAcrossContexts: a subagent of the run reuses the run's
// session (one process for root and subagent); a subagent whose
// allow-list leaves the server out neither connects nor sees its tools;
// the root's allow-list filters single tools.
func TestSharedAcrossContexts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sub       func(string) bool
		subTools  []string
		processes int
	}{
		{"shared", func(p string) bool { return p == "mcp__loc__" }, []string{"mcp__loc__add", "mcp__loc__echo"}, 1},
		{"not allowed", func(string) bool { return false }, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := stdio("loc", mcptest.ModeServe)
			srv.Tools = []string{"echo", "add", "pid"}
			h := newHarness(t, nil, srv)
			h.allow = func(name string) bool { return name != "mcp__loc__pid" }
			h.sub = tc.sub
			h.srv.Script("main", modeltest.Calls(call("t1", "task", `{}`)), modeltest.Calls(call("e1", "mcp__loc__echo", `{"text":"root"}`)), modeltest.Text("ok"))
			h.srv.Script("main/sub", modeltest.Calls(call("s1", "mcp__loc__echo", `{"text":"sub"}`)), modeltest.Text("sub done"))
			_, results := h.run()
			want(t, results, "e1", false, "root")
			if tc.subTools != nil {
				want(t, results, "s1", false, "sub")
			} else {
				want(t, results, "s1", true, `Unknown tool "mcp__loc__echo"`)
			}
			if got := h.offered("main/sub"); !slices.Equal(got, tc.subTools) {
				t.Errorf("subagent offered %v, want %v", got, tc.subTools)
			}
			if got := h.offered("main"); !slices.Equal(got, []string{"mcp__loc__add", "mcp__loc__echo", "task"}) {
				t.Errorf("root offered %v", got)
			}
			if n := h.local.Started(); n != tc.processes {
				t.Errorf("%d processes started, want %d", n, tc.processes)
			}
		})
	}
}

// TestServerValidation names the bad field.
func TestServerValidation(t *testing.T) {
	for _, tc := range []struct {
		srv  mcptool.Server
		want string
	}{
		{mcptool.Server{Name: "a__b", Command: "x"}, "name"},
		{mcptool.Server{Name: "", Command: "x"}, "name"},
		{mcptool.Server{Name: "a"}, "set command"},
		{mcptool.Server{Name: "a", Command: "x", URL: "http://h"}, "exclusive"},
		{mcptool.Server{Name: "a", URL: "ftp://h"}, "url"},
		{mcptool.Server{Name: "a", URL: "http://h", Env: map[string]string{"A": "b"}}, "stdio servers only"},
		{mcptool.Server{Name: "a", Command: "x", Headers: map[string]string{"A": "b"}}, "HTTP servers only"},
		{mcptool.Server{Name: "a", Command: "x", Timeout: -1}, "positive"},
	} {
		if err := tc.srv.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.srv, err, tc.want)
		}
	}
	if _, err := mcptool.NewManager([]mcptool.Server{{Name: "a", Command: "x"}, {Name: "a", URL: "http://h"}}, nil); err == nil || !strings.Contains(err.Error(), "defined twice") {
		t.Errorf("duplicate: %v", err)
	}
}
