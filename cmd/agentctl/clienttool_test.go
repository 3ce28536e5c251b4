package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/plumbhq/plumb/pkg/model/modeltest"
)

func TestSplitCommand(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: "jq .", want: []string{"jq", "."}},
		{in: "  a   b\tc ", want: []string{"a", "b", "c"}},
		{in: `sh -c 'tr a-z A-Z | rev'`, want: []string{"sh", "-c", "tr a-z A-Z | rev"}},
		{in: `echo "a \"b\" \$HOME \n"`, want: []string{"echo", `a "b" $HOME \n`}},
		{in: `a\ b ''`, want: []string{"a b", ""}},
		{in: `x'y'"z"`, want: []string{"xyz"}},
		{in: "", want: nil},
		{in: "'open", err: "unterminated '"},
		{in: `"open`, err: `unterminated "`},
		{in: `end\`, err: "trailing backslash"},
	} {
		got, err := splitCommand(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("splitCommand(%q) = %q, %v; want error %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("splitCommand(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func FuzzSplitCommand(f *testing.F) {
	for _, s := range []string{"jq .", `sh -c 'a | b'`, `"x\"y"`, `a\ b`, `'`, `"`, `\`, "a\tb\nc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		argv, err := splitCommand(s)
		if err != nil {
			return
		}
		// Words of plain characters survive a round trip through single quotes.
		var quoted []string
		for _, w := range argv {
			if strings.Contains(w, "'") {
				return
			}
			quoted = append(quoted, "'"+w+"'")
		}
		again, err := splitCommand(strings.Join(quoted, " "))
		if err != nil || !reflect.DeepEqual(again, argv) && len(argv) > 0 {
			t.Fatalf("round trip of %q: %q, %v", argv, again, err)
		}
	})
}

func TestCapped(t *testing.T) {
	c := &capped{max: 5}
	c.Write([]byte("héllo wörld"))
	c.Write([]byte("more"))
	if got := c.text(); got != "héll\n[… 12 more bytes cut]" {
		t.Errorf("text = %q", got)
	}
	c = &capped{max: 100}
	c.Write([]byte("short"))
	if got := c.text(); got != "short" {
		t.Errorf("text = %q", got)
	}
}

func TestClientToolFlags(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "spec.json")
	os.WriteFile(spec, []byte(`{"description":"Upper-cases text.","parameters":{"type":"object","required":["text"],"properties":{"text":{"type":"string"}}}}`), 0o600)
	o, err := parseRun([]string{"--client-tool", "upper=tr a-z A-Z", "--client-tool-spec", "upper=" + spec, "--client-tool", "b=cat", "go"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ct := o.req.GetClientTools()
	if len(ct) != 2 || ct[0].GetName() != "b" || ct[1].GetName() != "upper" || ct[1].GetDescription() != "Upper-cases text." ||
		!strings.Contains(ct[1].GetParametersJson(), `"required":["text"]`) || !strings.Contains(ct[0].GetDescription(), "Client-side tool b") {
		t.Fatalf("client tools %v", ct)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--client-tool", "bad name=x", "go"}, "want NAME=COMMAND"},
		{[]string{"--client-tool", "x=", "go"}, "the command is empty"},
		{[]string{"--client-tool", "x='a", "go"}, "unterminated"},
		{[]string{"--client-tool", "x=a", "--client-tool", "x=b", "go"}, "given twice"},
		{[]string{"--client-tool-spec", "x=" + spec, "go"}, "no --client-tool x=COMMAND"},
		{[]string{"--client-tool", "x=a", "--client-tool-spec", "x=/nonexistent", "go"}, "no such file"},
		{[]string{"--client-tool", "x=a", "--client-tool-timeout", "0s", "go"}, "must be positive"},
	} {
		if _, err := parseRun(c.args, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseRun(%q) = %v, want %q", c.args, err, c.want)
		}
	}
}

// TestEndToEndClientTool: agentctl declares client tools for the run and
// answers their calls by running the commands, through a real agentd on
// loopback: stdout is the result, a non-zero exit, a missing program and
// a timeout are error results with stderr, and the run goes on.
func TestEndToEndClientTool(t *testing.T) {
	addr, model := agentd(t)
	model.Script("main",
		modeltest.Calls(
			modeltest.Call{ID: "k1", Name: "upper", Args: `{"text":"hello"}`},
			modeltest.Call{ID: "k2", Name: "fails", Args: `{}`},
		),
		modeltest.Calls(
			modeltest.Call{ID: "k3", Name: "missing", Args: `{}`},
			modeltest.Call{ID: "k4", Name: "slow", Args: `{}`},
		),
		modeltest.Text("Done."))
	c := &cli{}
	err := c.run(testCtx(t), addr, "run",
		"--client-tool", "upper=tr a-z A-Z",
		"--client-tool", `fails=sh -c 'echo bad input >&2; exit 3'`,
		"--client-tool", "missing=/nonexistent/tool",
		"--client-tool", `slow=sh -c 'sleep 600; echo never'`, "--client-tool-timeout", "1s",
		"use the tools")
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, c.out.String(), c.err.String())
	}
	wantLines(t, c.out.String(), "respond upper", "Done.", "■ completed")

	reqs := model.Requests("main")
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want 3", len(reqs))
	}
	names := map[string]bool{}
	for _, tool := range reqs[0].Body.Tools {
		names[tool.Function.Name] = true
	}
	for _, n := range []string{"upper", "fails", "missing", "slow"} {
		if !names[n] {
			t.Errorf("model was not offered %s: %v", n, names)
		}
	}
	results := map[string]string{}
	for _, r := range reqs[1:] {
		for _, m := range r.Body.Messages {
			if m.Role == goopenai.ChatMessageRoleTool {
				results[m.ToolCallID] = m.Content
			}
		}
	}
	for id, want := range map[string][]string{
		"k1": {`{"TEXT":"HELLO"}`},
		"k2": {"fails failed: exit status 3", "stderr:\nbad input"},
		"k3": {"missing could not run", "/nonexistent/tool"},
		"k4": {"slow timed out after 1s"},
	} {
		for _, w := range want {
			if !strings.Contains(results[id], w) {
				t.Errorf("result of %s = %q, want %q", id, results[id], w)
			}
		}
	}
}
