package agentd

import (
	"slices"
	"testing"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
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
// too), a gate on delete gates write_file (it writes files too), with
// the gate's settings, while read tools run; `python: false` exempts
// python explicitly.
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
	if got, want := interruptedTools(t, evs), []string{"mcp__box__unavailable", "python", "write_file"}; !slices.Equal(got, want) {
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
