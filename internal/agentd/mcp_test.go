package agentd

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent/tools/mcptool/mcptest"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// TestMCPEndToEnd: with mcp_servers configured, the model sees an HTTP
// server's tools as mcp__srv__<tool> (the header secret comes from
// agentd's environment), calls them and gets their results; a hang (on
// server slow, the one with a 2 s call timeout), a huge result, a stdio server on a thread that cannot run processes and
// a server whose secret is missing end as tool errors and the run
// completes. An agent whose allow-list leaves MCP out is not offered the
// tools; one allowed mcp__srv__* with interrupt_on mcp__srv__add* is
// gated on add.
func TestMCPEndToEnd(t *testing.T) {
	var conns atomic.Int32 // open connections to the MCP server
	ts := httptest.NewUnstartedServer(mcptest.Handler(mcptest.Options{}, "Bearer test-key"))
	ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			conns.Add(-1)
		}
	}
	ts.Start()
	t.Cleanup(ts.Close)
	var s *stack
	closed := func(when string) {
		t.Helper()
		if n := s.core.MCP.OpenSessions(); n != 0 {
			t.Errorf("%s: %d MCP sessions open", when, n)
		}
		// The server sees agentd's connections close a moment later.
		deadline := time.Now().Add(30 * time.Second)
		for conns.Load() != 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := conns.Load(); n != 0 {
			t.Errorf("%s: agentd keeps %d connections to the MCP server", when, n)
		}
	}
	s = startStack(t, nil, fmt.Sprintf(`mcp_servers:
  srv: {url: %[1]s, headers: {Authorization: "Bearer ${TEST_MODEL_KEY}"}, max_result_chars: 200}
  slow: {url: %[1]s, headers: {Authorization: "Bearer ${TEST_MODEL_KEY}"}, timeout: 2s}
  loc: {command: /usr/local/bin/mcpserver, args: [-mode, serve]}
  nokey: {url: %[1]s, headers: {Authorization: "Bearer ${MISSING_TOKEN}"}}
agents:
  offline: {description: no MCP, tools: ["@read"]}
  gh: {description: one server, tools: ["@read", "mcp__srv__*"], interrupt_on: {"mcp__srv__add*": true}}
`, ts.URL))
	s.model.Script("main",
		modeltest.Calls(
			mcall("e1", "mcp__srv__echo", `{"text":"hello from MCP"}`),
			mcall("a1", "mcp__srv__add", `{"a":1,"b":41}`),
			mcall("a2", "mcp__srv__add", `{"a":"x"}`),
			mcall("h1", "mcp__slow__hang", `{}`),
			mcall("u1", "mcp__srv__huge", `{"chars":100000}`),
			mcall("l1", "mcp__loc__unavailable", `{}`),
			mcall("k1", "mcp__nokey__unavailable", `{}`),
		),
		modeltest.Text("all done"))
	_, results := s.mustRun(input("", "Use the MCP tools."))
	closed("after the run")
	wantResult(t, results, "e1", false, "hello from MCP")
	wantResult(t, results, "a1", false, `{"sum":42}`)
	wantResult(t, results, "a2", true, "Invalid arguments for mcp__srv__add")
	wantResult(t, results, "h1", true, "tool mcp__slow__hang timed out after 2s")
	wantResult(t, results, "u1", false, "[output cut: the first 200 of 100000 characters")
	wantResult(t, results, "l1", true, "this thread's backend cannot run processes")
	wantResult(t, results, "k1", true, "MCP server nokey is not usable", "MISSING_TOKEN")
	names := offered(s, "main")
	for _, n := range []string{"mcp__srv__echo", "mcp__srv__add", "mcp__slow__hang", "mcp__loc__unavailable", "mcp__nokey__unavailable"} {
		if !slices.Contains(names, n) {
			t.Errorf("main was not offered %s (offered %v)", n, names)
		}
	}

	s.model.Script("offline", modeltest.Calls(mcall("o1", "mcp__srv__echo", `{"text":"x"}`)), modeltest.Text("ok"))
	req := input("", "no MCP here")
	req.Agent = "offline"
	_, results = s.mustRun(req)
	wantResult(t, results, "o1", true, `Unknown tool "mcp__srv__echo"`)
	for _, n := range offered(s, "offline") {
		if strings.HasPrefix(n, "mcp__") {
			t.Errorf("offline was offered %s", n)
		}
	}

	s.model.Script("gh", modeltest.Calls(mcall("g1", "mcp__srv__echo", `{"text":"free"}`), mcall("g2", "mcp__srv__add", `{"a":2,"b":2}`)))
	req = input("", "gated")
	req.Agent = "gh"
	evs, results, err := s.run(req)
	if err != nil {
		t.Fatal(err)
	}
	wantResult(t, results, "g1", false, "free")
	last := evs[len(evs)-1].GetInterrupted()
	if last == nil || len(last.GetRequests()) != 1 || last.GetRequests()[0].GetToolName() != "mcp__srv__add" {
		t.Errorf("last event %v, want an interrupt for mcp__srv__add", evs[len(evs)-1])
	}
	closed("after the interrupted run")
	if names := offered(s, "gh"); slices.Contains(names, "mcp__loc__unavailable") || !slices.Contains(names, "mcp__srv__echo") {
		t.Errorf("gh offered %v", names)
	}
}

func offered(s *stack, key string) []string {
	var names []string
	for _, tool := range s.model.Requests(key)[0].Body.Tools {
		names = append(names, tool.Function.Name)
	}
	return names
}

// TestMCPConfigErrors: bad mcp_servers entries and allow-list entries
// that name no configured server fail Build with their YAML path.
func TestMCPConfigErrors(t *testing.T) {
	for extra, want := range map[string]string{
		"mcp_servers:\n  x: {}\n":                                                      "mcp_servers.x: set command",
		"mcp_servers:\n  x: {command: a, url: http://h}\n":                             "mcp_servers.x: command and url are exclusive",
		"mcp_servers:\n  a__b: {command: a}\n":                                         "mcp_servers.a__b: name",
		"mcp_servers:\n  x: {command: a, tiemout: 1s}\n":                               "mcp_servers.x.tiemout: unknown key",
		"mcp_servers:\n  x: {command: a}\nagents:\n  main: {tools: [\"mcp__y__*\"]}\n": `unknown tool "mcp__y__*"`,
		"agents:\n  main: {interrupt_on: {mcp__x__a: true}}\n":                         `unknown tool "mcp__x__a"`,
	} {
		cfg, err := Parse([]byte("version: 1\n" + extra))
		if err == nil {
			_, err = Build(t.Context(), cfg, Options{Env: func(string) string { return "" }, TempDir: t.TempDir()})
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %q: error %v, want %q", extra, err, want)
		}
	}
}
