package agentd

import (
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/agent/tools/mcptool/mcptest"
	"github.com/plumbhq/plumb/pkg/backend/backendtest"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

// interruptedTools returns the tool names of the run's final interrupt.
func interruptedTools(t *testing.T, evs []*plumbv1.Event) []string {
	t.Helper()
	if len(evs) == 0 || evs[len(evs)-1].GetInterrupted() == nil {
		t.Fatalf("the run did not end interrupted: %v", evs)
	}
	var names []string
	for _, r := range evs[len(evs)-1].GetInterrupted().GetRequests() {
		names = append(names, r.GetToolName())
	}
	slices.Sort(names)
	return names
}

// TestGatesCoverToolsThatCanDoAsMuch: a gate on execute also gates
// python and the tools of a stdio MCP server (they run code in the box
// too), with the gate's settings, while write_file (decided by its own
// key, although delete is gated) and read tools run; `python: false`
// exempts python explicitly.
func TestGatesCoverToolsThatCanDoAsMuch(t *testing.T) {
	s := pythonStack(t, &backendtest.LocalProcesses{}, `mcp_servers:
  box: {command: /usr/local/bin/mcpserver}
agents:
  main:
    interrupt_on:
      execute: {allowed: [approve, reject], description: "Shell command"}
      delete: true
  exempt:
    description: python without approval
    interrupt_on: {execute: true, python: false}
`)
	s.model.Script("main", modeltest.Calls(
		mcall("p1", "python", `{"code":"1"}`),
		mcall("m1", "mcp__box__unavailable", `{}`),
		mcall("w1", "write_file", `{"file_path":"/a.txt","content":"x"}`),
		mcall("l1", "ls", `{"path":"/"}`),
	))
	evs, results, err := s.run(input("", "gated"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := interruptedTools(t, evs), []string{"mcp__box__unavailable", "python"}; !slices.Equal(got, want) {
		t.Errorf("gated %v, want %v", got, want)
	}
	for _, r := range evs[len(evs)-1].GetInterrupted().GetRequests() {
		if r.GetToolName() == "python" && (r.GetDescription() != "Shell command" || len(r.GetAllowedDecisions()) != 2) {
			t.Errorf("python's gate is not execute's: %v", r)
		}
	}
	if _, ran := results["p1"]; ran {
		t.Error("python ran past the execute gate")
	}
	if results["l1"] == nil {
		t.Error("ls did not run")
	}

	s.model.Script("exempt", modeltest.Calls(mcall("p2", "python", `{"code":"6*7"}`)), modeltest.Text("ok"))
	req := input("", "exempt")
	req.Agent = "exempt"
	_, results = s.mustRun(req)
	wantResult(t, results, "p2", false, "42")
}

// TestMCPGateNames: `"mcp__srv__echo": false` exempts that tool from the
// mcp__srv__* pattern (the exact key wins) while the pattern gates the
// others; a gate naming an MCP tool the server does not list is warned
// about at run start, with its name. ListAgents lists the server's
// tools by pattern.
func TestMCPGateNames(t *testing.T) {
	ts := httptest.NewServer(mcptest.Handler(mcptest.Options{}, ""))
	t.Cleanup(ts.Close)
	core, logs := observer.New(zapcore.WarnLevel)
	s := startStackWith(t, nil, fmt.Sprintf(`mcp_servers:
  srv: {url: %s}
agents:
  gh:
    description: one server
    tools: ["@read", "mcp__srv__*"]
    interrupt_on: {"mcp__srv__*": true, "mcp__srv__echo": false, "mcp__srv__ecko": true}
`, ts.URL), Options{Logger: zap.New(core)})
	s.model.Script("gh", modeltest.Calls(mcall("e1", "mcp__srv__echo", `{"text":"free"}`), mcall("a1", "mcp__srv__add", `{"a":2,"b":2}`)))
	req := input("", "gated")
	req.Agent = "gh"
	evs, results, err := s.run(req)
	if err != nil {
		t.Fatal(err)
	}
	wantResult(t, results, "e1", false, "free")
	if got := interruptedTools(t, evs); !slices.Equal(got, []string{"mcp__srv__add"}) {
		t.Errorf("gated %v, want mcp__srv__add", got)
	}
	// ListAgents lists the server's tools as the pattern that takes them,
	// and the exemption is no gate.
	list, err := s.c.ListAgents(s.ctx(), &plumbv1.ListAgentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list.GetAgents() {
		if a.GetName() != "gh" {
			continue
		}
		var gates []string
		for _, r := range a.GetInterruptOn() {
			gates = append(gates, r.GetTool())
		}
		if !slices.Contains(a.GetTools(), "mcp__srv__*") || !slices.Equal(gates, []string{"mcp__srv__*", "mcp__srv__ecko"}) {
			t.Errorf("ListAgents gh: tools %v, gates %v", a.GetTools(), gates)
		}
	}
	warned := logs.FilterMessageSnippet("interrupt_on names an MCP tool that its server does not list").All()
	if len(warned) == 0 || warned[0].ContextMap()["interrupt-on"] != "mcp__srv__ecko" || warned[0].ContextMap()["agent"] != "gh" {
		t.Fatalf("no warning naming mcp__srv__ecko: %v", logs.All())
	}
	for _, w := range warned {
		if k := w.ContextMap()["interrupt-on"]; k != "mcp__srv__ecko" {
			t.Errorf("warned about %v, which names listed tools", k)
		}
	}
}
