package agentd

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/agent/tools/python"
	"github.com/plumbhq/plumb/pkg/backend/backendtest"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	goopenai "github.com/sashabaranov/go-openai"
)

// pythonStack is agentd whose python interpreters run on the host (the
// test seam standing in for the sandbox's process stream).
func pythonStack(t *testing.T, local *backendtest.LocalProcesses, extra string) *stack {
	t.Helper()
	local.Dir = t.TempDir()
	return startStackWith(t, nil, extra, Options{PythonOptions: []python.Option{python.WithResolver(local.Resolver())}})
}

// noPython3 rewrites commands so that their python3 is missing.
var noPython3 = strings.NewReplacer("python3", "python3-absent-here").Replace

// offersTool reports whether the n-th model request of key offered tool.
func offersTool(s *stack, key string, n int, tool string) bool {
	reqs := s.model.Requests(key)
	if n >= len(reqs) {
		s.t.Fatalf("model saw %d requests of %s, want more than %d", len(reqs), key, n)
	}
	return slices.ContainsFunc(reqs[n].Body.Tools, func(d goopenai.Tool) bool { return d.Function.Name == tool })
}

// TestPythonToolEndToEnd: through AgentService and the scripted model,
// python is offered; its state persists across calls and runs of one
// thread; an exception is an error result; a timeout restarts the
// interpreter and says the state is lost; another thread has its own
// interpreter.
func TestPythonToolEndToEnd(t *testing.T) {
	local := &backendtest.LocalProcesses{}
	s := pythonStack(t, local, "tools:\n  python: {timeout: 20s, max_timeout: 1m}\n")
	s.model.Script("main",
		modeltest.Calls(mcall("p1", "python", `{"code":"import math\nkept = 'from run 1'\nx = 6"}`)),
		modeltest.Calls(mcall("p2", "python", `{"code":"print('x is', x)\nx * math.factorial(3) + 6"}`)),
		modeltest.Calls(mcall("p3", "python", `{"code":"{}['missing']"}`)),
		modeltest.Calls(mcall("p4", "python", `{"code":"import time\ntime.sleep(120)","timeout_s":1}`)),
		modeltest.Calls(mcall("p5", "python", `{"code":"x"}`), mcall("p6", "python", `{"code":"kept = 'from run 1 again'"}`)),
		modeltest.Text("done"),
		// the second run of the thread
		modeltest.Calls(mcall("q1", "python", `{"code":"kept"}`)),
		modeltest.Text("still there"),
		// another thread
		modeltest.Calls(mcall("r1", "python", `{"code":"kept"}`), mcall("r2", "python", `{"code":"x","timeout_s":61}`)),
		modeltest.Text("other"),
	)
	thread, results := s.mustRun(input("", "Compute with Python."))
	wantResult(t, results, "p1", false, "(no output)")
	wantResult(t, results, "p2", false, "stdout:\nx is 6\n\nvalue:\n42")
	wantResult(t, results, "p3", true, "KeyError: 'missing'")
	wantResult(t, results, "p4", true, "timed out after 1 s; the interpreter was restarted and its state (variables, imports) was lost")
	wantResult(t, results, "p5", true, "NameError: name 'x' is not defined")
	wantResult(t, results, "p6", false, "(no output)")
	if !offersTool(s, "main", 0, "python") {
		t.Error("python was not offered")
	}
	var schema struct {
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	for _, d := range s.model.Requests("main")[0].Body.Tools {
		if d.Function.Name == "python" {
			raw, _ := json.Marshal(d.Function.Parameters)
			if err := json.Unmarshal(raw, &schema); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !slices.Equal(schema.Required, []string{"code"}) || schema.Properties["timeout_s"] == nil || !strings.Contains(string(schema.Properties["timeout_s"]), `"maximum":60`) {
		t.Errorf("python schema: %+v", schema)
	}

	_, results = s.mustRun(input(thread, "And again."))
	wantResult(t, results, "q1", false, "value:\n'from run 1 again'")

	_, results = s.mustRun(input("", "Another thread."))
	wantResult(t, results, "r1", true, "NameError")
	wantResult(t, results, "r2", true, "Invalid arguments for python")
	if n := local.Started(); n != 3 {
		t.Errorf("%d interpreters started, want 3 (one restart after the timeout, one for the other thread)", n)
	}
}

// TestPythonNotOffered: python is not offered (and a call says why) when
// it is disabled, when the thread has no sandbox, or when the sandbox has
// no python3; an agent whose preset excludes exec never gets it. Bad
// tools.python values are config errors naming their path.
func TestPythonNotOffered(t *testing.T) {
	cases := []struct {
		name  string
		local *backendtest.LocalProcesses // nil: no seam, the State backend
		extra string
		agent string
		want  string
	}{
		{name: "disabled", local: &backendtest.LocalProcesses{}, extra: "tools:\n  python: {enabled: false}\n", want: `Unknown tool "python"`},
		{name: "no sandbox", want: "python is not available: this thread has no sandbox"},
		{name: "no python3", local: &backendtest.LocalProcesses{Rewrite: noPython3}, want: "sandbox image has no python3"},
		{name: "read-only agent", local: &backendtest.LocalProcesses{}, extra: "agents:\n  reader: {description: reads, permissions: read-only}\n", agent: "reader", want: `Unknown tool "python"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s *stack
			if tc.local != nil {
				s = pythonStack(t, tc.local, tc.extra)
			} else {
				s = startStack(t, nil, tc.extra)
			}
			key := "main"
			if tc.agent != "" {
				key = tc.agent
			}
			s.model.Script(key, modeltest.Calls(mcall("p1", "python", `{"code":"1"}`)), modeltest.Text("ok"))
			req := input("", "run python")
			req.Agent = tc.agent
			_, results := s.mustRun(req)
			wantResult(t, results, "p1", true, tc.want)
			if offersTool(s, key, 0, "python") || offersTool(s, key, 1, "python") {
				t.Error("python was offered")
			}
			if tc.local != nil && tc.local.Started() != 0 {
				t.Errorf("%d interpreters started", tc.local.Started())
			}
		})
	}
	for extra, want := range map[string]string{
		"tools:\n  python: {timeout: -1s}\n":                 "tools.python.timeout: durations must be positive",
		"tools:\n  python: {timeout: 2m, max_timeout: 1m}\n": "tools.python.timeout: 2m0s is longer than max_timeout 1m0s",
		"tools:\n  python: {max_interpreters: -1}\n":         "tools.python.max_interpreters",
		"tools:\n  python: {timeot: 1s}\n":                   "tools.python.timeot: unknown key",
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
