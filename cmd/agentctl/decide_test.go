package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

func TestParseDecisions(t *testing.T) {
	tests := []struct {
		name, data, err string
		entries         int
		def             bool
	}{
		{name: "explicit and default", data: `[{"tool_call_id":"c1","type":"APPROVE"},{"tool_call_id":"*","type":"DECISION_TYPE_REJECT","message":"no"}]`, entries: 1, def: true},
		{name: "edit with args", data: `[{"tool_call_id":"c1","type":"edit","args":{"a": 1}}]`, entries: 1},
		{name: "edit with edited_args_json", data: `[{"tool_call_id":"c1","type":"edit","edited_args_json":"{\"a\":1}"}]`, entries: 1},
		{name: "respond", data: `[{"tool_call_id":"k1","type":"respond","message":"Paris","is_error":false}]`, entries: 1},
		{name: "same id in two contexts", data: `[{"tool_call_id":"c1","agent_path":"main","type":"approve"},{"tool_call_id":"c1","agent_path":"main/x","type":"reject"}]`, entries: 2},
		{name: "empty list", data: `[]`},
		{name: "not a list", data: `{"type":"approve"}`, err: "want a JSON list"},
		{name: "unknown field", data: `[{"type":"approve","reason":"x"}]`, err: "unknown field"},
		{name: "unknown type", data: `[{"type":"maybe"}]`, err: "unknown decision type"},
		{name: "unspecified type", data: `[{"type":"unspecified"}]`, err: "unknown decision type"},
		{name: "edit without id", data: `[{"type":"edit","args":{}}]`, err: "must name its tool_call_id"},
		{name: "edit without args", data: `[{"tool_call_id":"c1","type":"edit"}]`, err: "not a JSON object"},
		{name: "edit with an array", data: `[{"tool_call_id":"c1","type":"edit","args":[1]}]`, err: "not a JSON object"},
		{name: "args without edit", data: `[{"tool_call_id":"c1","type":"approve","args":{}}]`, err: "only valid with edit"},
		{name: "both args forms", data: `[{"tool_call_id":"c1","type":"edit","args":{},"edited_args_json":"{}"}]`, err: "not both"},
		{name: "respond without message", data: `[{"tool_call_id":"c1","type":"respond"}]`, err: "respond needs a message"},
		{name: "is_error without respond", data: `[{"tool_call_id":"c1","type":"reject","is_error":true}]`, err: "only valid with respond"},
		{name: "two defaults", data: `[{"type":"approve"},{"type":"reject"}]`, err: "more than one default"},
		{name: "duplicate", data: `[{"tool_call_id":"c1","type":"approve"},{"tool_call_id":"c1","type":"reject"}]`, err: "duplicate decision for c1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd, err := parseDecisions([]byte(tt.data))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(fd.entries) != tt.entries || (fd.def != nil) != tt.def {
				t.Fatalf("entries = %d, default = %v", len(fd.entries), fd.def != nil)
			}
		})
	}
}

func TestFileDecider(t *testing.T) {
	in := approval()
	in.Requests = append(in.Requests, &plumbv1.InterruptRequest{ToolCallId: "c2", AgentPath: "main/other", AllowedDecisions: allFour})
	tests := []struct {
		name string
		data string
		want []string // type:message per request
		err  string
	}{
		{
			name: "explicit, path-specific and default",
			data: `[{"tool_call_id":"c2","type":"edit","args":{"command":"ls"}},{"tool_call_id":"c2","agent_path":"main/other","type":"respond","message":"done"},{"type":"reject","message":"later"}]`,
			want: []string{"DECISION_TYPE_EDIT:", "DECISION_TYPE_REJECT:later", "DECISION_TYPE_RESPOND:done"},
		},
		{
			name: "entries for other interrupts are skipped",
			data: `[{"tool_call_id":"zz","type":"reject"},{"type":"approve"}]`,
			want: []string{"DECISION_TYPE_APPROVE:", "DECISION_TYPE_APPROVE:", "DECISION_TYPE_APPROVE:"},
		},
		{name: "no entry", data: `[{"tool_call_id":"c2","type":"approve"}]`, err: "call g1 (delete in main/general-purpose): the decisions file has no entry for it"},
		{name: "not allowed", data: `[{"type":"respond","message":"x"}]`, err: "respond is not allowed here"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd, err := parseDecisions([]byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			ds, err := fd.decide(context.Background(), in)
			if tt.err != "" {
				var ue *undecidedError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want undecided %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i, d := range ds {
				if d.GetToolCallId() != in.Requests[i].GetToolCallId() || d.GetAgentPath() != in.Requests[i].GetAgentPath() {
					t.Errorf("decision %d targets %s in %s", i, d.GetToolCallId(), d.GetAgentPath())
				}
				got = append(got, d.GetType().String()+":"+d.GetMessage())
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			if tt.want[0] == "DECISION_TYPE_EDIT:" && ds[0].GetEditedArgsJson() != `{"command":"ls"}` {
				t.Fatalf("edited args %q", ds[0].GetEditedArgsJson())
			}
		})
	}
}

func TestBlanket(t *testing.T) {
	ds, err := blanket{typ: decReject, message: "no"}.decide(context.Background(), approval())
	if err != nil || len(ds) != 2 || ds[1].GetType() != decReject || ds[1].GetMessage() != "no" || ds[1].GetToolCallId() != "g1" {
		t.Fatalf("reject-all: %v %v", ds, err)
	}
	if _, err := (blanket{typ: decApprove}).decide(context.Background(), clientTool()); err == nil {
		t.Fatal("approve-all answered a client tool")
	}
	ds, err = blanket{typ: decReject}.decide(context.Background(), clientTool())
	if err != nil || len(ds) != 1 || ds[0].GetMessage() != "" {
		t.Fatalf("reject-all on a client tool: %v %v", ds, err)
	}
}

func TestJSONObject(t *testing.T) {
	tests := []struct{ in, want, err string }{
		{in: "{\n  \"a\": [1, 2]\n}\n", want: `{"a":[1,2]}`},
		{in: `{}`, want: `{}`},
		{in: `null`, err: "null"},
		{in: `[1]`, err: "not a JSON object"},
		{in: `{"a":1} {"b":2}`, err: "trailing data"},
		{in: `{"a":`, err: "not a JSON object"},
	}
	for _, tt := range tests {
		got, err := jsonObject(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("jsonObject(%q) err = %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("jsonObject(%q) = %q, %v", tt.in, got, err)
		}
	}
}

// newPrompter answers from stdin, writing questions to out.
func newPrompter(stdin string, out io.Writer, editor string, edit func(context.Context, string, string) error) *prompter {
	return &prompter{lines: newLineReader(strings.NewReader(stdin)), out: out, editor: editor, edit: edit}
}

func TestPrompter(t *testing.T) {
	tests := []struct {
		name   string
		in     *plumbv1.Interrupted
		stdin  string
		editor string
		edits  []string // what the fake editor writes, in turn
		want   []*plumbv1.Decision
		err    error
	}{
		{
			name: "words and letters, respond after going back", in: approval(),
			stdin: "s\n\nRESPOND\nit is done\napprove\n",
			want: []*plumbv1.Decision{
				{ToolCallId: "c2", AgentPath: "main", Type: decRespond, Message: "it is done"},
				{ToolCallId: "g1", AgentPath: "main/general-purpose", Type: decApprove},
			},
		},
		{
			name: "edit typed at the terminal, after a mistake", in: approval(),
			stdin: "e\n{\"command\":\n\n{\"command\":\n  \"make -n\"}\n\nr\n\n",
			want: []*plumbv1.Decision{
				{ToolCallId: "c2", AgentPath: "main", Type: decEdit, EditedArgsJson: `{"command":"make -n"}`},
				{ToolCallId: "g1", AgentPath: "main/general-purpose", Type: decReject},
			},
		},
		{
			name: "edit typed, then back to the menu", in: approval(),
			stdin: "e\n\na\na\n",
			want: []*plumbv1.Decision{
				{ToolCallId: "c2", AgentPath: "main", Type: decApprove},
				{ToolCallId: "g1", AgentPath: "main/general-purpose", Type: decApprove},
			},
		},
		{
			name: "edit in $EDITOR, fixing a mistake", in: approval(), editor: "fake-editor",
			stdin: "e\ny\nr\n\n",
			edits: []string{`{"command": `, `{"command": "make -n", "timeout": 30}`},
			want: []*plumbv1.Decision{
				{ToolCallId: "c2", AgentPath: "main", Type: decEdit, EditedArgsJson: `{"command":"make -n","timeout":30}`},
				{ToolCallId: "g1", AgentPath: "main/general-purpose", Type: decReject},
			},
		},
		{
			name: "editor given up", in: approval(), editor: "fake-editor",
			stdin: "e\nn\nr\nno\nr\n\n",
			edits: []string{`oops`},
			want: []*plumbv1.Decision{
				{ToolCallId: "c2", AgentPath: "main", Type: decReject, Message: "no"},
				{ToolCallId: "g1", AgentPath: "main/general-purpose", Type: decReject},
			},
		},
		{
			name: "edit not offered", in: approval(),
			stdin: "a\ne\nedit\nr\n\n",
			want: []*plumbv1.Decision{
				{ToolCallId: "c2", AgentPath: "main", Type: decApprove},
				{ToolCallId: "g1", AgentPath: "main/general-purpose", Type: decReject},
			},
		},
		{name: "stdin closes", in: approval(), stdin: "a\n", err: errStdinClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			edits := tt.edits
			edit := func(_ context.Context, editor, path string) error {
				if editor != tt.editor {
					t.Errorf("editor %q", editor)
				}
				cur, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				if len(edits) == len(tt.edits) && !strings.Contains(string(cur), `"command": "make clean"`) {
					t.Errorf("the editor did not get the current arguments: %q", cur)
				}
				if len(edits) == 0 {
					t.Fatal("editor opened too often")
				}
				next := edits[0]
				edits = edits[1:]
				return os.WriteFile(path, []byte(next), 0o600)
			}
			ds, err := newPrompter(tt.stdin, &out, tt.editor, edit).decide(context.Background(), tt.in)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			sameProto(t, "decisions", decisions(tt.want...), decisions(ds...))
			if len(edits) != 0 {
				t.Errorf("editor opened %d times too few", len(edits))
			}
		})
	}
}

func TestLineReaderCancel(t *testing.T) {
	pr, pw := io.Pipe()
	l := newLineReader(pr)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.line(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	// The abandoned read is picked up by the next call.
	go func() {
		_, _ = pw.Write([]byte("late\r\n"))
		_ = pw.Close()
	}()
	got, err := l.line(context.Background())
	if err != nil || got != "late" {
		t.Fatalf("line = %q, %v", got, err)
	}
	if _, err := l.line(context.Background()); !errors.Is(err, errStdinClosed) {
		t.Fatalf("after EOF: %v", err)
	}
}
