package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost"
	"github.com/plumbhq/plumb/internal/server/agentsvc"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/agent/deep"
	"github.com/plumbhq/plumb/pkg/agent/profile"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/model/openai"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/encoding/protojson"
)

// agentd serves the real AgentService on loopback: the deep runtime with
// write_file gated behind an approval, a SQLite thread store, and a
// scripted OpenAI-compatible model server.
func agentd(t *testing.T) (addr string, model *modeltest.Server) {
	t.Helper()
	model = modeltest.New(t)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "threads.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := openai.New(openai.Config{BaseURL: model.URL(), Model: "gpt-test",
		Retry: openai.RetryConfig{MaxAttempts: 1, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond}},
		openai.WithHTTPClient(model.Client()))
	if err != nil {
		t.Fatal(err)
	}
	lg := zaptest.NewLogger(t)
	rt, err := deep.New(deep.Config{
		DefaultModel: "smart", Models: map[string]deep.Model{"smart": {Chat: m, Name: "gpt-test"}},
		Store: st, Backend: deep.StateBackends(),
		Limits: agent.Limits{CancelGrace: time.Second},
		Agents: map[string]profile.Profile{profile.Main: {InterruptOn: map[string]profile.InterruptRule{
			"write_file": {Description: "Writes a file"},
		}}},
	}, deep.WithLogger(lg))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := agentsvc.New(agentsvc.Config{Runtime: rt, Config: runhost.Config{Threads: runhost.DurableThreads(st)},
		Schedules: st, SchedulePoll: 20 * time.Millisecond}, agentsvc.WithLogger(lg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = svc.Shutdown(ctx)
	})
	return serve(t, svc), model
}

var threadLine = regexp.MustCompile(`▶ thread (\S+) · run`)

func threadOf(t *testing.T, out string) string {
	t.Helper()
	m := threadLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no thread id in:\n%s", out)
	}
	return m[1]
}

var spaces = regexp.MustCompile(` {2,}`)

// wantLines checks that out holds each of lines, runs of spaces (table
// alignment) aside.
func wantLines(t *testing.T, out string, lines ...string) {
	t.Helper()
	flat := spaces.ReplaceAllString(out, " ")
	for _, l := range lines {
		if !strings.Contains(flat, spaces.ReplaceAllString(l, " ")) {
			t.Errorf("output lacks %q:\n%s", l, out)
		}
	}
}

// A run with a tool call and an approval interrupt answered by
// --approve-all, end to end against agentd's service.
func TestEndToEndApproveAll(t *testing.T) {
	addr, model := agentd(t)
	model.Script("main",
		modeltest.Turn{Text: []string{"Writing ", "the file."}, Calls: []modeltest.Call{{ID: "c1", Name: "write_file", Args: `{"file_path":"/hello.txt","content":"hi\n"}`}}, Usage: &modeltest.Usage{FromContent: true}},
		modeltest.Text("Saved /hello.txt."))
	ctx := testCtx(t)
	c := &cli{}
	if err := c.run(ctx, addr, "run", "--approve-all", "--label", "team=core", "write hello"); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, c.out.String(), c.err.String())
	}
	out := c.out.String()
	wantLines(t, out, "Writing the file.", "⏸ waiting for a decision on 1 call", "write_file /hello.txt [approve/edit/reject/respond]",
		"▶ resumed thread", "→ write_file /hello.txt", "✓ write_file /hello.txt", "Saved /hello.txt.", "usage: prompt ", "■ completed")
	thread := threadOf(t, out)

	c = &cli{}
	if err := c.run(ctx, addr, "threads", "show", thread, "--full"); err != nil {
		t.Fatal(err)
	}
	wantLines(t, c.out.String(), "status    idle", "labels    team=core", "→ write_file /hello.txt (call c1)", "/hello.txt  3 bytes", "final     Saved /hello.txt.")

	c = &cli{}
	if err := c.run(ctx, addr, "threads", "ls", "--label", "team=core"); err != nil {
		t.Fatal(err)
	}
	wantLines(t, c.out.String(), thread+"  idle")
}

// Without a terminal and without decision flags the run stops with exit
// code 3; agentctl resume then answers the interrupt.
func TestEndToEndPendingThenResume(t *testing.T) {
	addr, model := agentd(t)
	model.Script("main",
		modeltest.Calls(modeltest.Call{ID: "c1", Name: "write_file", Args: `{"file_path":"/a.txt","content":"x"}`}),
		modeltest.Text("Skipped it."))
	ctx := testCtx(t)
	c := &cli{}
	err := c.run(ctx, addr, "run", "write a")
	if exitCode(err) != exitPending {
		t.Fatalf("run: %v\n%s", err, c.err.String())
	}
	thread := threadOf(t, c.out.String())
	wantLines(t, c.err.String(), "Writes a file", "agentctl resume --thread "+thread)

	c = &cli{}
	if err := c.run(ctx, addr, "threads", "ls", "--status", "interrupted"); err != nil {
		t.Fatal(err)
	}
	wantLines(t, c.out.String(), thread+"  interrupted")

	c = &cli{}
	if err := c.run(ctx, addr, "resume", "--thread", thread, "--reject-all=not now", "--json"); err != nil {
		t.Fatalf("resume: %v\n%s", err, c.err.String())
	}
	wantLines(t, c.out.String(), `"resumed":true`, `"origin":"TOOL_RESULT_ORIGIN_REJECTED"`, `"status":"RUN_STATUS_COMPLETED"`)
	if n := strings.Count(c.out.String(), "\n"); n < 4 {
		t.Fatalf("%d JSON lines", n)
	}

	c = &cli{}
	if err := c.run(ctx, addr, "threads", "show", thread); err != nil {
		t.Fatal(err)
	}
	wantLines(t, c.out.String(), "status    idle")
	if strings.Contains(c.out.String(), "interrupt ") {
		t.Fatalf("still pending:\n%s", c.out.String())
	}
}

// threads checkpoints lists a thread's checkpoints; threads fork makes a
// thread ending at one of them, says that no workspace snapshot was taken
// (no sandbox here), and an unknown checkpoint is an error naming it.
func TestEndToEndCheckpointsAndFork(t *testing.T) {
	addr, model := agentd(t)
	model.Script("main", modeltest.Text("first"))
	ctx := testCtx(t)
	c := &cli{}
	if err := c.run(ctx, addr, "run", "--label", "team=core", "one"); err != nil {
		t.Fatalf("run: %v\n%s", err, c.err.String())
	}
	thread := threadOf(t, c.out.String())
	model.Script("main", modeltest.Text("second"))
	c = &cli{}
	if err := c.run(ctx, addr, "run", "--thread", thread, "two"); err != nil {
		t.Fatalf("run: %v\n%s", err, c.err.String())
	}

	c = &cli{}
	if err := c.run(ctx, addr, "threads", "checkpoints", thread, "--json"); err != nil {
		t.Fatal(err)
	}
	var cps plumbv1.ListCheckpointsResponse
	if err := protojson.Unmarshal(c.out.Bytes(), &cps); err != nil {
		t.Fatalf("%v:\n%s", err, c.out.String())
	}
	var first *plumbv1.Checkpoint
	for _, cp := range cps.GetCheckpoints() {
		if cp.GetPhase() == plumbv1.CheckpointPhase_CHECKPOINT_PHASE_FINAL {
			first = cp
			break
		}
	}
	if first == nil || first.GetMessageCount() != 2 {
		t.Fatalf("no FINAL checkpoint after the first run: %v", cps.GetCheckpoints())
	}
	c = &cli{}
	if err := c.run(ctx, addr, "threads", "checkpoints", thread); err != nil {
		t.Fatal(err)
	}
	wantLines(t, c.out.String(), fmt.Sprintf("  %d  run %s", first.GetId(), first.GetRunId()))

	c = &cli{}
	if err := c.run(ctx, addr, "threads", "fork", thread, "--checkpoint", fmt.Sprint(first.GetId()), "--label", "branch=b"); err != nil {
		t.Fatalf("fork: %v\n%s", err, c.err.String())
	}
	fork := strings.TrimSpace(c.out.String())
	wantLines(t, c.err.String(), fmt.Sprintf("forked at checkpoint %d", first.GetId()), "its sandbox starts empty")
	c = &cli{}
	if err := c.run(ctx, addr, "threads", "show", fork, "--full"); err != nil {
		t.Fatal(err)
	}
	wantLines(t, c.out.String(), "team=core", "branch=b", "first")
	if strings.Contains(c.out.String(), "second") {
		t.Errorf("the fork holds the later run:\n%s", c.out.String())
	}

	c = &cli{}
	err := c.run(ctx, addr, "threads", "fork", thread, "--checkpoint", "99999")
	if err == nil || !strings.Contains(err.Error(), "99999") {
		t.Errorf("fork at an unknown checkpoint: %v", err)
	}
}
