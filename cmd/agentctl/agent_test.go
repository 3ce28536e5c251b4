package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// sameProto fails the test when got and want differ.
func sameProto(t *testing.T, what string, want, got proto.Message) {
	t.Helper()
	if !proto.Equal(want, got) {
		t.Fatalf("%s:\ngot  %s\nwant %s", what, prototext.Format(got), prototext.Format(want))
	}
}

func decisions(ds ...*plumbv1.Decision) *plumbv1.ResumeRequest {
	return &plumbv1.ResumeRequest{Decisions: ds}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func exitCode(err error) int {
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if err != nil {
		return 1
	}
	return 0
}

func TestParseRun(t *testing.T) {
	dir := t.TempDir()
	local := filepath.Join(dir, "notes.md")
	if err := os.WriteFile(local, []byte("# notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		stdin   string
		want    *plumbv1.RunRequest
		json    bool
		reject  *optString
		stdinIn bool
		err     string
	}{
		{
			name: "plain prompt words",
			args: []string{"fix", "the", "bug"},
			want: &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "fix the bug"}}},
		},
		{
			name: "every flag, some after the prompt",
			args: []string{"--agent", "plan", "--thread=th-9", "--label", "team=core", "Do it", "--model", "fast", "--label", "env=dev",
				"--file", "/notes.md=" + local, "--max-iterations", "7", "--run-timeout", "90s", "--detach", "--abandon-interrupt", "--json"},
			want: &plumbv1.RunRequest{
				Agent: "plan", ThreadId: "th-9", Model: "fast", Metadata: map[string]string{"team": "core", "env": "dev"},
				Files: map[string]string{"/notes.md": "# notes\n"}, MaxIterations: 7, Timeout: durationpb.New(90 * time.Second),
				Detach: true, AbandonInterrupt: true, Input: []*plumbv1.InputMessage{{Content: "Do it"}},
			},
			json: true,
		},
		{
			name: "prompt from stdin",
			args: []string{"--reject-all", "-"}, stdin: "line one\nline two\n",
			want:    &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "line one\nline two\n"}}},
			reject:  &optString{set: true},
			stdinIn: true,
		},
		{
			name:   "reject-all with a message",
			args:   []string{"--reject-all=not now", "go"},
			want:   &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "go"}}},
			reject: &optString{set: true, value: "not now"},
		},
		{
			name: "dash dash keeps flags as prompt text",
			args: []string{"--", "--json", "is", "a", "flag"},
			want: &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: "--json is a flag"}}},
		},
		{
			name: "queue behind a busy thread",
			args: []string{"--thread", "th-9", "--on-busy", "enqueue", "then this"},
			want: &plumbv1.RunRequest{ThreadId: "th-9", OnBusy: plumbv1.OnBusy_ON_BUSY_ENQUEUE, Input: []*plumbv1.InputMessage{{Content: "then this"}}},
		},
		{
			name: "interrupt the thread's run",
			args: []string{"--thread", "th-9", "--on-busy", "interrupt", "instead"},
			want: &plumbv1.RunRequest{ThreadId: "th-9", OnBusy: plumbv1.OnBusy_ON_BUSY_INTERRUPT, Input: []*plumbv1.InputMessage{{Content: "instead"}}},
		},
		{
			name: "roll the thread's run back",
			args: []string{"--thread", "th-9", "--on-busy", "rollback", "forget that"},
			want: &plumbv1.RunRequest{ThreadId: "th-9", OnBusy: plumbv1.OnBusy_ON_BUSY_ROLLBACK, Input: []*plumbv1.InputMessage{{Content: "forget that"}}},
		},
		{
			name: "steer the thread's run",
			args: []string{"--thread", "th-9", "--on-busy", "steer", "also this"},
			want: &plumbv1.RunRequest{ThreadId: "th-9", OnBusy: plumbv1.OnBusy_ON_BUSY_STEER, Input: []*plumbv1.InputMessage{{Content: "also this"}}},
		},
		{name: "unknown busy strategy", args: []string{"--on-busy", "later", "x"}, err: "want reject, enqueue, interrupt, rollback or steer"},
		{name: "missing prompt", args: []string{"--json"}, err: "missing prompt"},
		{name: "empty stdin prompt", args: []string{"-"}, stdin: " \n", err: "prompt is empty"},
		{name: "bad label", args: []string{"--label", "nokey", "x"}, err: "want key=value"},
		{name: "bad file", args: []string{"--file", "/a", "x"}, err: "want PATH=LOCALFILE"},
		{name: "missing local file", args: []string{"--file", "/a=" + filepath.Join(dir, "nope"), "x"}, err: "no such file"},
		{name: "negative limit", args: []string{"--max-iterations", "-1", "x"}, err: "negative"},
		{name: "unknown flag", args: []string{"--frobnicate", "x"}, err: "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseRun(tt.args, strings.NewReader(tt.stdin))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sameProto(t, "request", tt.want, o.req)
			if o.json != tt.json || o.stdinUsed != tt.stdinIn {
				t.Errorf("json, stdinUsed = %v, %v", o.json, o.stdinUsed)
			}
			if tt.reject != nil && o.decisions.rejectAll != *tt.reject {
				t.Errorf("reject-all = %+v, want %+v", o.decisions.rejectAll, *tt.reject)
			}
		})
	}
}

func TestParseArgs(t *testing.T) {
	fs := newFlags("x")
	full := fs.Bool("full", false, "")
	pos, err := parseArgs(fs, []string{"a", "--full", "b", "--", "--full", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if !*full || strings.Join(pos, ",") != "a,b,--full,c" {
		t.Fatalf("full=%v pos=%q", *full, pos)
	}
	if _, err := parseArgs(newFlags("x"), []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
}

func TestDecisionFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "d.json")
	if err := os.WriteFile(file, []byte(`[{"type":"approve"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		flags     decisionFlags
		terminal  bool
		stdinUsed bool
		want      string // %T of the decider, "" for none
		err       string
	}{
		{name: "nothing, no terminal", want: ""},
		{name: "nothing, terminal", terminal: true, want: "*main.prompter"},
		{name: "terminal but stdin held the prompt", terminal: true, stdinUsed: true, want: ""},
		{name: "approve all", flags: decisionFlags{approveAll: true}, terminal: true, want: "main.blanket"},
		{name: "reject all", flags: decisionFlags{rejectAll: optString{set: true}}, want: "main.blanket"},
		{name: "file", flags: decisionFlags{file: file}, want: "*main.fileDecider"},
		{name: "two modes", flags: decisionFlags{approveAll: true, file: file}, err: "only one"},
		{name: "stdin twice", flags: decisionFlags{file: "-"}, stdinUsed: true, err: "both come from stdin"},
		{name: "bad file", flags: decisionFlags{file: file + ".missing"}, err: "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := tt.flags.decider(stdio{in: strings.NewReader(""), terminal: tt.terminal, getenv: func(string) string { return "" }}, nil, tt.stdinUsed)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if d != nil {
				got = fmt.Sprintf("%T", d)
			}
			if got != tt.want {
				t.Fatalf("decider = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestRunApproveAll(t *testing.T) {
	f := &fakeAgent{segments: interruptedRun(approval())}
	addr := serve(t, f)
	c := &cli{}
	if err := c.run(testCtx(t), addr, "run", "--approve-all", "--label", "team=core", "clean up"); err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, c.err.String())
	}
	if len(f.runs) != 1 || f.runs[0].GetInput()[0].GetContent() != "clean up" || f.runs[0].GetMetadata()["team"] != "core" {
		t.Fatalf("runs = %v", f.runs)
	}
	if len(f.resumes) != 1 {
		t.Fatalf("resumes = %d", len(f.resumes))
	}
	sameProto(t, "resume", &plumbv1.ResumeRequest{ThreadId: "th-1", InterruptId: "int-1", Decisions: []*plumbv1.Decision{
		{ToolCallId: "c2", AgentPath: "main", Type: decApprove},
		{ToolCallId: "g1", AgentPath: "main/general-purpose", Type: decApprove},
	}}, f.resumes[0])
	out := c.out.String()
	for _, s := range []string{"▶ thread th-1", "⏸ waiting for a decision on 2 calls (interrupt int-1)",
		"» approve execute make clean\n» approve delete /old in main/general-purpose\n▶ resumed thread th-1",
		"✓ execute make clean", "Cleaned.", "usage: prompt 10, completion 2, total 12 tokens", "■ completed"} {
		if !strings.Contains(out, s) {
			t.Errorf("stdout lacks %q:\n%s", s, out)
		}
	}
}

func TestRunPendingWithoutTerminal(t *testing.T) {
	f := &fakeAgent{segments: interruptedRun(approval())}
	addr := serve(t, f)
	c := &cli{stdin: "a\n"} // not a terminal: agentctl must not read it
	err := c.run(testCtx(t), addr, "run", "clean up")
	if exitCode(err) != exitPending {
		t.Fatalf("err = %v, want exit %d", err, exitPending)
	}
	if len(f.resumes) != 0 {
		t.Fatal("resumed without decisions")
	}
	for _, s := range []string{"[1/2] execute · approval · main (call c2)", `"command": "make clean"`, "agentctl resume --thread th-1"} {
		if !strings.Contains(c.err.String(), s) {
			t.Errorf("stderr lacks %q:\n%s", s, c.err.String())
		}
	}
}

// --approve-all cannot answer a client tool, which only allows respond
// and reject: the interrupt stays pending.
func TestRunApproveAllCannotAnswerClientTool(t *testing.T) {
	f := &fakeAgent{segments: interruptedRun(clientTool())}
	addr := serve(t, f)
	c := &cli{}
	err := c.run(testCtx(t), addr, "run", "--approve-all", "where am I")
	if exitCode(err) != exitPending || len(f.resumes) != 0 {
		t.Fatalf("err = %v, resumes = %d", err, len(f.resumes))
	}
	if !strings.Contains(c.err.String(), "approve is not allowed here") {
		t.Errorf("stderr: %s", c.err.String())
	}
}

func TestRunDecisionsFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "d.json")
	data := `[{"tool_call_id":"c2","type":"edit","args":{"command":"make  clean -n"}},{"type":"reject","message":"keep it"}]`
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &fakeAgent{segments: interruptedRun(approval())}
	addr := serve(t, f)
	c := &cli{}
	if err := c.run(testCtx(t), addr, "run", "--decisions", file, "clean up"); err != nil {
		t.Fatalf("run: %v\n%s", err, c.err.String())
	}
	if len(f.resumes) != 1 {
		t.Fatalf("resumes = %d", len(f.resumes))
	}
	sameProto(t, "decisions", decisions(
		&plumbv1.Decision{ToolCallId: "c2", AgentPath: "main", Type: decEdit, EditedArgsJson: `{"command":"make  clean -n"}`},
		&plumbv1.Decision{ToolCallId: "g1", AgentPath: "main/general-purpose", Type: decReject, Message: "keep it"},
	), decisions(f.resumes[0].GetDecisions()...))
}

func TestRunInteractive(t *testing.T) {
	f := &fakeAgent{segments: interruptedRun(approval())}
	addr := serve(t, f)
	c := &cli{terminal: true, stdin: "maybe\nr\ntoo risky\na\n"}
	if err := c.run(testCtx(t), addr, "run", "clean up"); err != nil {
		t.Fatalf("run: %v\n%s", err, c.err.String())
	}
	if len(f.resumes) != 1 {
		t.Fatalf("resumes = %d", len(f.resumes))
	}
	sameProto(t, "decisions", decisions(
		&plumbv1.Decision{ToolCallId: "c2", AgentPath: "main", Type: decReject, Message: "too risky"},
		&plumbv1.Decision{ToolCallId: "g1", AgentPath: "main/general-purpose", Type: decApprove},
	), decisions(f.resumes[0].GetDecisions()...))
	out := c.out.String()
	for _, s := range []string{"decision [a]pprove, [e]dit, [r]eject, re[s]pond: ", `"maybe" is not one of the choices`,
		"decision [a]pprove, [r]eject: ", "reason (optional): "} {
		if !strings.Contains(out, s) {
			t.Errorf("stdout lacks %q:\n%s", s, out)
		}
	}
}

func TestRunJSON(t *testing.T) {
	f := &fakeAgent{segments: interruptedRun(approval())}
	addr := serve(t, f)
	c := &cli{terminal: true, stdin: "a\na\n"}
	if err := c.run(testCtx(t), addr, "run", "--json", "clean up"); err != nil {
		t.Fatalf("run: %v\n%s", err, c.err.String())
	}
	lines := strings.Split(strings.TrimSpace(c.out.String()), "\n")
	if len(lines) != 10 {
		t.Fatalf("%d lines of JSON, want 10:\n%s", len(lines), c.out.String())
	}
	for i, l := range lines {
		var ev plumbv1.Event
		if err := protojson.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, l)
		}
		if ev.GetSequence() != uint64(i+1) {
			t.Errorf("line %d has sequence %d", i, ev.GetSequence())
		}
	}
	// Questions go to stderr so that stdout stays JSON.
	if !strings.Contains(c.err.String(), "decision [a]pprove") {
		t.Errorf("stderr: %s", c.err.String())
	}
}

func TestRunEndings(t *testing.T) {
	tests := []struct {
		name string
		last func(*seg) *plumbv1.Event
		code int
		line string
	}{
		{"completed", func(s *seg) *plumbv1.Event { return s.finished(plumbv1.RunStatus_RUN_STATUS_COMPLETED) }, 0, "■ completed"},
		{"max iterations", func(s *seg) *plumbv1.Event { return s.finished(plumbv1.RunStatus_RUN_STATUS_MAX_ITERATIONS) }, 0, "■ stopped: iteration limit reached"},
		{"cancelled", func(s *seg) *plumbv1.Event { return s.finished(plumbv1.RunStatus_RUN_STATUS_CANCELLED) }, exitCancelled, "■ cancelled"},
		{"deadline", func(s *seg) *plumbv1.Event { return s.finished(plumbv1.RunStatus_RUN_STATUS_DEADLINE_EXCEEDED) }, exitDeadline, "■ stopped: run deadline exceeded"},
		{"error", func(s *seg) *plumbv1.Event { return s.failed("MODEL_AUTH") }, exitFailed, "■ failed: MODEL_AUTH: boom"},
		{"no terminal event", nil, 1, "▶ thread th-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &seg{thread: "th-1"}
			events := append([]*plumbv1.Event{s.started(false)}, s.text(1, "hi")...)
			if tt.last != nil {
				events = append(events, tt.last(s))
			}
			addr := serve(t, &fakeAgent{segments: [][]*plumbv1.Event{events}})
			c := &cli{}
			err := c.run(testCtx(t), addr, "run", "hi")
			if exitCode(err) != tt.code {
				t.Fatalf("err = %v, want exit %d", err, tt.code)
			}
			if !strings.Contains(c.out.String(), tt.line) {
				t.Errorf("stdout lacks %q:\n%s", tt.line, c.out.String())
			}
		})
	}
}

func TestRunPendingInterruptHint(t *testing.T) {
	st, err := status.New(codes.FailedPrecondition, "thread th-1 has a pending interrupt").
		WithDetails(&errdetails.ErrorInfo{Reason: "PENDING_INTERRUPT", Domain: "plumb.dev", Metadata: map[string]string{"interrupt_id": "int-1"}})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, &fakeAgent{runErr: st.Err()})
	c := &cli{}
	err = c.run(testCtx(t), addr, "run", "--thread", "th-1", "go on")
	if err == nil || !strings.Contains(err.Error(), "pending interrupt (FailedPrecondition); answer it with agentctl resume") {
		t.Fatalf("err = %v", err)
	}
}

// An Attach past the replay retention says which --after follows the rest.
func TestAttachOutOfRangeHint(t *testing.T) {
	st, err := status.New(codes.OutOfRange, "thread th-1: after_sequence 0 is older than the replay log (oldest event: 12)").
		WithDetails(&errdetails.ErrorInfo{Reason: "REPLAY_OUT_OF_RANGE", Domain: "plumb.dev", Metadata: map[string]string{"thread_id": "th-1", "oldest_sequence": "12"}})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, &fakeAgent{attachErr: st.Err()})
	c := &cli{}
	err = c.run(testCtx(t), addr, "attach", "th-1")
	if err == nil || !strings.Contains(err.Error(), "(OutOfRange); agentctl attach --after 11 follows the rest of the run") {
		t.Fatalf("err = %v", err)
	}
}

// Ctrl-C closes the stream; agentd sees the client go away.
func TestRunCtrlC(t *testing.T) {
	for _, detach := range []bool{false, true} {
		t.Run(map[bool]string{false: "attached", true: "detached"}[detach], func(t *testing.T) {
			s := &seg{thread: "th-1"}
			f := &fakeAgent{segments: [][]*plumbv1.Event{{s.started(false)}}, hold: true, sent: make(chan struct{}), gone: make(chan struct{})}
			addr := serve(t, f)
			ctx, cancel := context.WithCancel(testCtx(t))
			// Ctrl-C once the run's first event is on the screen.
			c := &cli{onOut: func(p []byte) {
				if strings.Contains(string(p), "▶ thread th-1") {
					cancel()
				}
			}}
			args := []string{"run", "work"}
			if detach {
				args = []string{"run", "--detach", "work"}
			}
			err := c.run(ctx, addr, args...)
			if exitCode(err) != exitSignal {
				t.Fatalf("err = %v", err)
			}
			<-f.gone
			want := "agentd cancels the run on thread th-1"
			if detach {
				want = "agentctl attach th-1 --after 1"
			}
			if !strings.Contains(c.err.String(), want) {
				t.Errorf("stderr: %s", c.err.String())
			}
		})
	}
}

func TestResume(t *testing.T) {
	pending := &plumbv1.Thread{Id: "th-1", Status: plumbv1.ThreadStatus_THREAD_STATUS_INTERRUPTED, PendingInterrupt: approval()}
	t.Run("reject all", func(t *testing.T) {
		f := &fakeAgent{thread: pending, segments: interruptedRun(approval())[1:]}
		addr := serve(t, f)
		c := &cli{}
		if err := c.run(testCtx(t), addr, "resume", "--thread", "th-1", "--reject-all=not today"); err != nil {
			t.Fatalf("resume: %v\n%s", err, c.err.String())
		}
		want := &plumbv1.ResumeRequest{ThreadId: "th-1", InterruptId: "int-1", Decisions: []*plumbv1.Decision{
			{ToolCallId: "c2", AgentPath: "main", Type: decReject, Message: "not today"},
			{ToolCallId: "g1", AgentPath: "main/general-purpose", Type: decReject, Message: "not today"},
		}}
		if len(f.resumes) != 1 {
			t.Fatalf("resumes = %d", len(f.resumes))
		}
		sameProto(t, "resume", want, f.resumes[0])
		if !strings.Contains(c.out.String(), "■ completed") {
			t.Errorf("stdout: %s", c.out.String())
		}
	})
	t.Run("no terminal, no flags", func(t *testing.T) {
		addr := serve(t, &fakeAgent{thread: pending})
		c := &cli{}
		if err := c.run(testCtx(t), addr, "resume", "--thread", "th-1"); exitCode(err) != exitPending {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("stale interrupt id", func(t *testing.T) {
		addr := serve(t, &fakeAgent{thread: pending})
		c := &cli{}
		err := c.run(testCtx(t), addr, "resume", "--thread", "th-1", "--interrupt", "int-0", "--approve-all")
		if err == nil || !strings.Contains(err.Error(), "interrupt int-0 is not pending (current: int-1)") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("nothing pending", func(t *testing.T) {
		addr := serve(t, &fakeAgent{thread: &plumbv1.Thread{Id: "th-1"}})
		c := &cli{}
		err := c.run(testCtx(t), addr, "resume", "--thread", "th-1", "--approve-all")
		if err == nil || !strings.Contains(err.Error(), "has no pending interrupt") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("missing thread", func(t *testing.T) {
		c := &cli{}
		if err := c.run(testCtx(t), "127.0.0.1:1", "resume", "--approve-all"); err == nil || !strings.Contains(err.Error(), "want --thread") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestAttach(t *testing.T) {
	s := &seg{thread: "th-1"}
	events := append([]*plumbv1.Event{s.started(false)}, s.text(1, "hello")...)
	events = append(events, s.finished(plumbv1.RunStatus_RUN_STATUS_COMPLETED))
	f := &fakeAgent{segments: [][]*plumbv1.Event{events}}
	addr := serve(t, f)
	c := &cli{}
	if err := c.run(testCtx(t), addr, "attach", "th-1", "--after", "1"); err != nil {
		t.Fatal(err)
	}
	if len(f.attach) != 1 || f.attach[0].GetThreadId() != "th-1" || f.attach[0].GetAfterSequence() != 1 {
		t.Fatalf("attach = %v", f.attach)
	}
	if got := c.out.String(); got != "hello\nusage: prompt 10, completion 2, total 12 tokens\n■ completed\n" {
		t.Fatalf("stdout = %q", got)
	}
}

// TestThreadsShowFullPages: a FULL view cut at its size budget is
// completed with ListMessages, so show --full prints the whole log.
func TestThreadsShowFullPages(t *testing.T) {
	msg := func(i int64, text string) *plumbv1.ThreadMessage {
		return &plumbv1.ThreadMessage{Index: i, Role: "user", Content: text}
	}
	f := &fakeAgent{
		thread: &plumbv1.Thread{Id: "th-1", MessageCount: 3, Messages: []*plumbv1.ThreadMessage{msg(0, "first")}, MessagesNextPageToken: "p1"},
		messages: map[string]*plumbv1.ListMessagesResponse{
			"p1": {Messages: []*plumbv1.ThreadMessage{msg(1, "second")}, NextPageToken: "p2"},
			"p2": {Messages: []*plumbv1.ThreadMessage{msg(2, "third")}},
		},
	}
	addr := serve(t, f)
	c := &cli{}
	if err := c.run(testCtx(t), addr, "threads", "show", "th-1", "--full", "--json"); err != nil {
		t.Fatal(err)
	}
	var th plumbv1.Thread
	if err := protojson.Unmarshal(c.out.Bytes(), &th); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range th.GetMessages() {
		got = append(got, m.GetContent())
	}
	if !slices.Equal(got, []string{"first", "second", "third"}) || th.GetMessagesNextPageToken() != "" {
		t.Fatalf("show --full --json: messages %v, token %q; want all three and no token", got, th.GetMessagesNextPageToken())
	}
}

func TestUnaryCommands(t *testing.T) {
	ts := func(m int) *timestamppb.Timestamp {
		return timestamppb.New(time.Date(2026, 11, 22, 10, m, 0, 0, time.UTC))
	}
	f := &fakeAgent{
		thread: &plumbv1.Thread{Id: "th-1", Status: plumbv1.ThreadStatus_THREAD_STATUS_IDLE, CreatedAt: ts(0), UpdatedAt: ts(1),
			Messages: []*plumbv1.ThreadMessage{{Index: 0, Role: "user", Content: "hello there"}}},
		pages: [][]*plumbv1.Thread{
			{{Id: "th-1", Status: plumbv1.ThreadStatus_THREAD_STATUS_IDLE}, {Id: "th-2"}},
			{{Id: "th-3"}, {Id: "th-4"}},
		},
		agents: []*plumbv1.AgentInfo{{Name: "main", Kind: plumbv1.AgentKind_AGENT_KIND_PRIMARY, Model: "smart"}},
		cancel: &plumbv1.CancelResponse{RunId: "run-7", WasRunning: true},
	}
	addr := serve(t, f)
	ctx := testCtx(t)

	c := &cli{}
	if err := c.run(ctx, addr, "threads", "ls", "--label", "team=core", "--status", "interrupted", "--limit", "3"); err != nil {
		t.Fatal(err)
	}
	if len(f.lists) != 2 || f.lists[0].GetPageSize() != 3 || f.lists[0].GetLabels()["team"] != "core" ||
		f.lists[0].GetStatus() != plumbv1.ThreadStatus_THREAD_STATUS_INTERRUPTED || f.lists[1].GetPageToken() != "page1" {
		t.Fatalf("list requests = %v", f.lists)
	}
	out := c.out.String()
	if !strings.Contains(out, "th-3") || strings.Contains(out, "th-4") || !strings.HasPrefix(out, "ID ") {
		t.Fatalf("threads ls:\n%s", out)
	}

	c = &cli{}
	if err := c.run(ctx, addr, "threads", "ls", "--status", "busy"); err == nil || !strings.Contains(err.Error(), "want idle, running or interrupted") {
		t.Fatalf("bad status: %v", err)
	}

	c = &cli{}
	if err := c.run(ctx, addr, "threads", "show", "th-1", "--full"); err != nil {
		t.Fatal(err)
	}
	if g := f.gets[len(f.gets)-1]; g.GetThreadId() != "th-1" || g.GetView() != plumbv1.ThreadView_THREAD_VIEW_FULL {
		t.Fatalf("get = %v", g)
	}
	if !strings.Contains(c.out.String(), "hello there") || !strings.Contains(c.out.String(), "status    idle") {
		t.Fatalf("threads show:\n%s", c.out.String())
	}

	c = &cli{}
	if err := c.run(ctx, addr, "threads", "show", "th-1", "--json"); err != nil {
		t.Fatal(err)
	}
	var th plumbv1.Thread
	if err := protojson.Unmarshal(c.out.Bytes(), &th); err != nil || !proto.Equal(&th, f.thread) {
		t.Fatalf("threads show --json: %v\n%s", err, c.out.String())
	}

	c = &cli{}
	if err := c.run(ctx, addr, "threads", "rm", "th-1", "th-2", "--force"); err != nil {
		t.Fatal(err)
	}
	if len(f.deletes) != 2 || !f.deletes[1].GetForce() || c.out.String() != "th-1\nth-2\n" {
		t.Fatalf("deletes = %v, out %q", f.deletes, c.out.String())
	}

	c = &cli{}
	if err := c.run(ctx, addr, "agents"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.out.String(), "main  primary  smart") {
		t.Fatalf("agents:\n%s", c.out.String())
	}

	c = &cli{}
	if err := c.run(ctx, addr, "cancel", "th-1"); err != nil {
		t.Fatal(err)
	}
	if c.out.String() != "cancelled run run-7\n" || f.cancels[0].GetThreadId() != "th-1" {
		t.Fatalf("cancel: %q", c.out.String())
	}

	c = &cli{}
	if err := c.run(ctx, addr, "threads", "frob"); err == nil {
		t.Fatal("unknown threads command accepted")
	}
	c = &cli{}
	if err := c.run(ctx, addr, "run", "--help"); !errors.Is(err, flag.ErrHelp) || !strings.Contains(c.out.String(), "agentctl run [--agent NAME]") {
		t.Fatalf("run --help: %v\n%s", err, c.out.String())
	}
}
