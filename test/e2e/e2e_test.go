// Package e2e runs plumb as a user does: real agentd, sandboxd and agentctl
// processes, a scripted OpenAI-compatible model, and real containers on the
// local Docker Engine.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon/daemontest"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
)

var bins map[string]string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "plumb-e2e")
	if err != nil {
		panic(err)
	}
	bins, err = daemontest.BuildCommands(dir, "agentd", "sandboxd", "sandbox-agent", "agentctl")
	if err != nil {
		panic(err)
	}
	// The server the preview tests run in a box.
	if bins["previewserver"], err = daemontest.BuildStatic(dir, "github.com/plumbhq/plumb/test/previewserver"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// stack is a running sandboxd + agentd pair talking to a scripted model.
type stack struct {
	model    *modeltest.Server
	agentd   string
	sandboxd string
	// sandboxdHTTP is sandboxd's HTTP address (agentd's is proc.HTTPAddr).
	sandboxdHTTP string
	conn         *grpc.ClientConn
	cfgPath      string
	dir          string
	proc         *daemontest.Proc
}

// Tokens of the e2e daemons.
const (
	agentdToken   = "e2e-agentd-token"
	sandboxdToken = "e2e-sandboxd-token"
)

// extraConfig is appended to the agentd config of the next start, and
// extraArgs to agentd's command line.
var (
	extraConfig string
	extraArgs   []string
)

func start(t *testing.T) *stack {
	t.Helper()
	// Both daemons require bearer tokens, as a real deployment should.
	dir := t.TempDir()
	daemontest.WriteToken(t, dir, "agentd.token", agentdToken)
	sd := daemontest.StartSandboxd(t, bins["sandboxd"], dir, daemontest.WriteToken(t, dir, "sandboxd.token", sandboxdToken))

	model := modeltest.New(t)
	cfg := fmt.Sprintf(`version: 1
server: {shutdown_grace: 2s}
storage: {sqlite_path: %s}
models:
  scripted:
    base_url: %s
    api_key_env: E2E_MODEL_KEY
    model: scripted-model
    retry: {max_attempts: 2, initial_backoff: 10ms, max_backoff: 20ms}
defaults: {model: scripted}
sandbox:
  address: %s
  template: {memory: 256Mi, ttl: 30m}
backends:
  default: sandbox
  routes:
    /large_tool_results/: {type: state}
    /conversation_history/: {type: state}
`, filepath.Join(dir, "agentd.db"), model.URL(), sd.GRPCAddr) + extraConfig
	cfgPath := filepath.Join(dir, "agentd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("E2E_MODEL_KEY", "test-key")
	s := &stack{model: model, sandboxd: sd.GRPCAddr, sandboxdHTTP: sd.HTTPAddr, cfgPath: cfgPath, dir: dir}
	s.startAgentd(t)
	return s
}

// startAgentd starts (or restarts) agentd on the stack's config and thread
// store.
func (s *stack) startAgentd(t *testing.T) {
	t.Helper()
	args := append([]string{"--config", s.cfgPath, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--log-format", "json", "--shutdown-grace", "2s",
		"--token-file", filepath.Join(s.dir, "agentd.token"), "--sandboxd-token-file", filepath.Join(s.dir, "sandboxd.token")}, extraArgs...)
	s.proc = daemontest.Start(t, bins["agentd"], args...)
	s.agentd, s.conn = s.proc.GRPCAddr, daemontest.Dial(t, s.proc.GRPCAddr, agentdToken)
}

// agentctl runs the CLI against the stack and returns stdout.
func (s *stack) agentctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins["agentctl"], append([]string{"--agentd", s.agentd, "--sandboxd", s.sandboxd}, args...)...)
	cmd.Env = append(os.Environ(), "AGENTCTL_TOKEN="+agentdToken)
	var out, errb bytes.Buffer
	cmd.Stdin = strings.NewReader("") // a script's pipe: no terminal to ask
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%w: %s", err, errb.String())
	}
	return out.String(), err
}

func events(t *testing.T, out string) []*plumbv1.Event {
	t.Helper()
	var evs []*plumbv1.Event
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		ev := &plumbv1.Event{}
		if err := protojson.Unmarshal([]byte(line), ev); err != nil {
			t.Fatalf("agentctl --json printed a line that is not an event: %q: %v", line, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// resultAndFinish returns, from agentctl --json's output, the result of
// tool call id and the run's finish (nil when absent).
func resultAndFinish(t *testing.T, out, id string) (*plumbv1.ToolResult, *plumbv1.RunFinished) {
	t.Helper()
	var res *plumbv1.ToolResult
	var fin *plumbv1.RunFinished
	for _, ev := range events(t, out) {
		if r := ev.GetToolResult(); r != nil && r.GetId() == id {
			res = r
		}
		if f := ev.GetRunFinished(); f != nil {
			fin = f
		}
	}
	return res, fin
}

// TestAgentWorksInASandbox: the model writes a script, runs it with sh in
// the thread's sandbox, reads the output, delegates a subtask to a
// subagent, and finishes; the event stream, the thread store and the
// container's filesystem agree.
func TestAgentWorksInASandbox(t *testing.T) {
	s := start(t)
	s.model.Script("main",
		modeltest.Calls(modeltest.Call{ID: "c1", Name: "write_file", Args: `{"file_path":"/workspace/hello.sh","content":"echo hello from $(id -u)\n"}`}),
		modeltest.Calls(modeltest.Call{ID: "c2", Name: "execute", Args: `{"command":"sh /workspace/hello.sh > /workspace/out.txt && cat /workspace/out.txt"}`}),
		modeltest.Calls(modeltest.Call{ID: "c3", Name: "read_file", Args: `{"file_path":"/workspace/out.txt"}`}),
		modeltest.Calls(modeltest.Call{ID: "t1", Name: "task", Args: `{"subagent_type":"general-purpose","description":"Count the lines of /workspace/hello.sh"}`}),
		modeltest.Text("All done: the script greets uid 1000."),
	)
	s.model.Script("main/general-purpose",
		modeltest.Calls(modeltest.Call{ID: "s1", Name: "read_file", Args: `{"file_path":"/workspace/hello.sh"}`}),
		modeltest.Text("It has 1 line."),
	)

	out, err := s.agentctl(t, "run", "--json", "--label", "suite=e2e", "Write a greeting script, run it and check it.")
	if err != nil {
		t.Fatal(err)
	}
	evs := events(t, out)
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	results := map[string]*plumbv1.ToolResult{}
	var sawSubStart, sawSubFinish bool
	var finished *plumbv1.RunFinished
	threadID := evs[0].GetThreadId()
	for i, ev := range evs {
		if ev.GetSequence() != uint64(i+1) {
			t.Fatalf("event %d has sequence %d", i, ev.GetSequence())
		}
		switch {
		case ev.GetToolResult() != nil:
			results[ev.GetToolResult().GetId()] = ev.GetToolResult()
		case ev.GetSubagentStarted() != nil:
			sawSubStart = ev.GetParentToolCallId() == "t1"
		case ev.GetSubagentFinished() != nil:
			sawSubFinish = ev.GetParentToolCallId() == "t1"
		case ev.GetRunFinished() != nil:
			finished = ev.GetRunFinished()
		}
	}
	for id, want := range map[string]string{"c1": "hello.sh", "c2": "hello from 1000", "c3": "hello from 1000", "s1": "echo hello", "t1": "It has 1 line."} {
		r := results[id]
		if r == nil || r.GetIsError() || !strings.Contains(r.GetContent(), want) {
			t.Errorf("tool result %s = %+v, want success mentioning %q", id, r, want)
		}
	}
	if results["c2"].GetExitCode() != 0 {
		t.Errorf("execute exit code = %d", results["c2"].GetExitCode())
	}
	if !sawSubStart || !sawSubFinish {
		t.Errorf("subagent events: started %v finished %v", sawSubStart, sawSubFinish)
	}
	if finished == nil || finished.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || !strings.Contains(finished.GetFinalText(), "All done") {
		t.Fatalf("run_finished = %+v", finished)
	}

	// The thread store agrees.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	th, err := plumbv1.NewAgentServiceClient(s.conn).GetThread(ctx, &plumbv1.GetThreadRequest{ThreadId: threadID, View: plumbv1.ThreadView_THREAD_VIEW_FULL})
	if err != nil {
		t.Fatal(err)
	}
	thread := th.GetThread()
	if thread.GetSandboxId() == "" || thread.GetLastRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || thread.GetMetadata()["suite"] != "e2e" {
		t.Fatalf("thread = %v", thread)
	}
	var toolMsgs int
	for _, m := range thread.GetMessages() {
		if m.GetRole() == "tool" {
			toolMsgs++
		}
	}
	if toolMsgs != 4 { // c1, c2, c3, t1 (the subagent's own log is not the thread's)
		t.Errorf("%d tool messages in the thread log, want 4", toolMsgs)
	}

	// The container's filesystem agrees.
	sc := plumbv1.NewSandboxServiceClient(daemontest.Dial(t, s.sandboxd, sandboxdToken))
	rd, err := sc.Read(ctx, &plumbv1.ReadRequest{SandboxId: thread.GetSandboxId(), Path: "/workspace/out.txt"})
	if err != nil || rd.GetContent() != "hello from 1000" {
		t.Fatalf("out.txt in the container = %q, %v", rd.GetContent(), err)
	}

	// A second run on the same thread reuses the sandbox.
	s.model.Script("main", modeltest.Calls(modeltest.Call{ID: "c9", Name: "execute", Args: `{"command":"cat /workspace/out.txt"}`}), modeltest.Text("still there"))
	out, err = s.agentctl(t, "run", "--json", "--thread", threadID, "Is the output still there?")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := resultAndFinish(t, out, "c9")
	if again == nil || !strings.Contains(again.GetContent(), "hello from 1000") {
		t.Fatalf("second run's execute = %+v", again)
	}

	// Deleting the thread deletes its sandbox.
	if _, err := s.agentctl(t, "threads", "rm", threadID); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.GetSandbox(ctx, &plumbv1.GetSandboxRequest{SandboxId: thread.GetSandboxId()}); err == nil {
		t.Fatal("the thread's sandbox survived DeleteThread")
	}
}

// grpcurlPath finds the pinned grpcurl (make tools puts it in .cache/bin).
func grpcurlPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("grpcurl"); err == nil {
		return p
	}
	if p, err := filepath.Abs("../../.cache/bin/grpcurl"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("grpcurl not found under CI=true (make tools installs it)")
	}
	t.Skip("grpcurl not installed; run make tools")
	return ""
}

// TestAnyGRPCClient drives AgentService/Run with grpcurl: JSON in, the
// event stream out, through server reflection and no plumb code.
func TestAnyGRPCClient(t *testing.T) {
	grpcurl := grpcurlPath(t)
	s := start(t)
	s.model.Script("main", modeltest.Text("Hello from a generic client"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, grpcurl, "-plaintext", "-H", "authorization: Bearer "+agentdToken,
		"-d", `{"input":[{"content":"hi"}],"metadata":{"client":"grpcurl"}}`, s.agentd, "plumb.v1.AgentService/Run")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("grpcurl: %v\n%s", err, out)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	var kinds []string
	var final string
	for dec.More() {
		var resp struct {
			Event map[string]json.RawMessage `json:"event"`
		}
		if err := dec.Decode(&resp); err != nil {
			t.Fatalf("grpcurl output is not a JSON stream: %v\n%s", err, out)
		}
		for k, v := range resp.Event {
			switch k {
			case "sequence", "timestamp", "runId", "threadId", "agentPath", "parentToolCallId":
				continue
			case "runFinished":
				var rf struct {
					Status    string `json:"status"`
					FinalText string `json:"finalText"`
				}
				_ = json.Unmarshal(v, &rf)
				final = rf.Status + ": " + rf.FinalText
			}
			kinds = append(kinds, k)
		}
	}
	if len(kinds) < 3 || kinds[0] != "runStarted" || kinds[len(kinds)-1] != "runFinished" {
		t.Fatalf("event kinds = %v", kinds)
	}
	if final != "RUN_STATUS_COMPLETED: Hello from a generic client" {
		t.Fatalf("run_finished = %q", final)
	}
}

// TestInterruptSurvivesRestart: a run paused for approval is resumed by a
// new agentd process after the old one was killed; no committed step is
// lost and the approved call runs in the same sandbox.
func TestInterruptSurvivesRestart(t *testing.T) {
	extraConfig = "agents:\n  main:\n    interrupt_on: {write_file: true}\n"
	defer func() { extraConfig = "" }()
	s := start(t)
	s.model.Script("main",
		modeltest.Calls(modeltest.Call{ID: "c0", Name: "execute", Args: `{"command":"echo before > /workspace/before.txt"}`}),
		modeltest.Calls(modeltest.Call{ID: "c1", Name: "write_file", Args: `{"file_path":"/workspace/approved.txt","content":"yes"}`}),
		modeltest.Text("written"),
	)
	out, err := s.agentctl(t, "run", "--json", "Write the file.")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("run ended with %v, want exit 3 (pending approval)", err)
	}
	evs := events(t, out)
	last := evs[len(evs)-1]
	if last.GetInterrupted() == nil || last.GetInterrupted().GetRequests()[0].GetToolCallId() != "c1" {
		t.Fatalf("last event = %v, want the interrupt for c1", last)
	}
	threadID := last.GetThreadId()

	// Crash agentd and start a new one on the same thread store.
	if err := s.proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.proc.Wait(2 * time.Minute)
	s.startAgentd(t)

	out, err = s.agentctl(t, "resume", "--json", "--thread", threadID, "--approve-all")
	if err != nil {
		t.Fatal(err)
	}
	wrote, finished := resultAndFinish(t, out, "c1")
	if wrote == nil || wrote.GetIsError() || finished.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("after restart: write %v, finished %v", wrote, finished)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	th, err := plumbv1.NewAgentServiceClient(s.conn).GetThread(ctx, &plumbv1.GetThreadRequest{ThreadId: threadID})
	if err != nil {
		t.Fatal(err)
	}
	sc := plumbv1.NewSandboxServiceClient(daemontest.Dial(t, s.sandboxd, sandboxdToken))
	for path, want := range map[string]string{"/workspace/before.txt": "before", "/workspace/approved.txt": "yes"} {
		rd, err := sc.Read(ctx, &plumbv1.ReadRequest{SandboxId: th.GetThread().GetSandboxId(), Path: path})
		if err != nil || rd.GetContent() != want {
			t.Fatalf("%s = %q, %v; want %q", path, rd.GetContent(), err, want)
		}
	}
}
