package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon/daemontest"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxapi"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"github.com/plumbhq/plumb/pkg/snapshot/s3store/weedtest"
)

// snapWorker is a sandboxd worker on a fixed loopback port with a state
// directory and the shared S3 snapshot store, so that it can be restarted
// as the same worker at the same address.
type snapWorker struct {
	name, addr string
	args       []string
	proc       *daemontest.Proc
}

// freeAddr returns a loopback address free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startSnapWorker starts a worker whose snapshots go to the bucket of the
// weed server s3; tokenFile is the token it requires.
func startSnapWorker(t *testing.T, dir, tokenFile string, s3 *weedtest.Server) *snapWorker {
	t.Helper()
	cli := sandboxtest.Docker(t)
	image := sandboxtest.Image(t, cli)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	w := &snapWorker{name: "w" + hex.EncodeToString(b), addr: freeAddr(t)}
	wdir := filepath.Join(dir, w.name)
	if err := os.MkdirAll(filepath.Join(wdir, "state"), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg, err := yaml.Marshal(map[string]any{
		"version": 1, "labels": sandboxtest.Labels(w.name), "state_dir": filepath.Join(wdir, "state"),
		"snapshots": map[string]any{"s3": map[string]any{
			"endpoint": s3.Endpoint, "bucket": "plumb-e2e", "insecure": true, "create_bucket": true,
			"access_key": s3.AccessKey, "secret_key": s3.SecretKey,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(wdir, "sandboxd.yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	sandboxtest.SweepOnCleanup(t, cli, sandboxtest.LabelTest, w.name)
	sandboxtest.ReleaseImagesOnCleanup(t, cli, w.name)
	// No --delete-sandboxes-on-exit: a restarted worker adopts its boxes.
	w.args = []string{"--config", cfgPath, "--grpc-addr", w.addr, "--http-addr", "127.0.0.1:0", "--log-format", "json",
		"--worker", w.name, "--default-image", image, "--shutdown-grace", "2s", "--token-file", tokenFile}
	w.start(t)
	return w
}

func (w *snapWorker) start(t *testing.T) {
	t.Helper()
	w.proc = daemontest.Start(t, bins["sandboxd"], w.args...)
}

// stop signals the worker and waits for it to exit.
func (w *snapWorker) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := w.proc.Signal(sig); err != nil {
		t.Fatal(err)
	}
	// Wait's -1 is also a killed process's exit code: SIGKILL is not
	// checked (it cannot be ignored).
	if w.proc.Wait(3*time.Minute) == -1 && sig != syscall.SIGKILL {
		t.Fatalf("worker %s did not exit on %v", w.name, sig)
	}
}

// TestApprovalWaitSurvivesWorkerRestartTTLAndLoss (issue 19, Done when): a
// run writes files, then waits for approval; meanwhile its box's worker
// restarts, the box's TTL expires, and the worker is lost for good (and
// leaves agentd's fleet). The run, resumed with the approval, finds every
// file it wrote in a box on the other worker, restored from the snapshot
// agentd took at the interrupt (shared through a real S3-compatible
// server), and the tool result names that snapshot.
func TestApprovalWaitSurvivesWorkerRestartTTLAndLoss(t *testing.T) {
	s3 := weedtest.Start(t)
	dir := t.TempDir()
	daemontest.WriteToken(t, dir, "agentd.token", agentdToken)
	tokenFile := daemontest.WriteToken(t, dir, "sandboxd.token", sandboxdToken)
	a := startSnapWorker(t, dir, tokenFile, s3)
	b := startSnapWorker(t, dir, tokenFile, s3)

	model := modeltest.New(t)
	config := func(workers string) string {
		return fmt.Sprintf(`version: 1
server: {shutdown_grace: 2s}
storage: {sqlite_path: %s}
models:
  scripted: {base_url: %s, api_key_env: E2E_MODEL_KEY, model: scripted-model, retry: {max_attempts: 2, initial_backoff: 10ms, max_backoff: 20ms}}
defaults: {model: scripted}
sandbox:
  address: %s
  template: {memory: 256Mi, ttl: 30s}
backends: {default: sandbox}
agents:
  main:
    interrupt_on: {execute: true}
`, filepath.Join(dir, "agentd.db"), model.URL(), workers)
	}
	t.Setenv("E2E_MODEL_KEY", "test-key")
	s := &stack{model: model, dir: dir, cfgPath: filepath.Join(dir, "agentd.yaml")}
	// At first agentd knows worker b only: the thread's box lands there.
	if err := os.WriteFile(s.cfgPath, []byte(config(b.addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	s.sandboxd = b.addr
	s.startAgentd(t)

	model.Script("main",
		modeltest.Calls(modeltest.Call{ID: "w1", Name: "write_file", Args: `{"file_path":"/workspace/a.txt","content":"alpha"}`}),
		modeltest.Calls(modeltest.Call{ID: "w2", Name: "write_file", Args: `{"file_path":"/workspace/d/b.txt","content":"beta"}`}),
		modeltest.Calls(modeltest.Call{ID: "x1", Name: "execute", Args: `{"command":"cat /workspace/a.txt /workspace/d/b.txt"}`}),
		modeltest.Text("both files are there"),
	)
	out, err := s.agentctl(t, "run", "--json", "Write two files, then show them.")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("run ended with %v, want exit 3 (pending approval)", err)
	}
	evs := events(t, out)
	last := evs[len(evs)-1]
	if last.GetInterrupted() == nil || last.GetInterrupted().GetRequests()[0].GetToolCallId() != "x1" {
		t.Fatalf("last event = %v, want the interrupt for x1", last)
	}
	threadID := last.GetThreadId()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard
	defer cancel()
	ac := plumbv1.NewAgentServiceClient(s.conn)
	th, err := ac.GetThread(ctx, &plumbv1.GetThreadRequest{ThreadId: threadID})
	if err != nil {
		t.Fatal(err)
	}
	box := th.GetThread().GetSandboxId()
	if sandboxapi.WorkerOf(box) != b.name {
		t.Fatalf("the thread's box %s is not on worker %s", box, b.name)
	}
	cps, err := ac.ListCheckpoints(ctx, &plumbv1.ListCheckpointsRequest{ThreadId: threadID, PageSize: 500})
	if err != nil {
		t.Fatal(err)
	}
	at := cps.GetCheckpoints()[len(cps.GetCheckpoints())-1]
	snap := at.GetSnapshotId()
	if at.GetPhase() != plumbv1.CheckpointPhase_CHECKPOINT_PHASE_INTERRUPT || snap == "" {
		t.Fatalf("the interrupt's checkpoint %v has no snapshot", at)
	}

	// The worker restarts: it adopts the box, which keeps waiting.
	b.stop(t, syscall.SIGTERM)
	b.start(t)
	if !strings.Contains(b.proc.Stderr(), box) || !strings.Contains(b.proc.Stderr(), "adopted sandbox") {
		t.Fatalf("the restarted worker did not adopt box %s:\n%s", box, b.proc.Stderr())
	}
	bc := plumbv1.NewSandboxServiceClient(daemontest.Dial(t, b.addr, sandboxdToken))
	// Then the box's TTL ends: the worker deletes it.
	for {
		_, err := bc.GetSandbox(ctx, &plumbv1.GetSandboxRequest{SandboxId: box})
		if status.Code(err) == codes.NotFound {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("box %s outlived its TTL: %v", box, err)
		}
		time.Sleep(500 * time.Millisecond) // polling the worker, not a synchronization
	}
	// Then the worker is lost for good, and leaves agentd's fleet.
	b.stop(t, syscall.SIGKILL)
	if err := s.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.proc.Wait(3 * time.Minute)
	if err := os.WriteFile(s.cfgPath, []byte(config(a.addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	s.sandboxd = a.addr
	s.startAgentd(t)

	out, err = s.agentctl(t, "resume", "--json", "--thread", threadID, "--approve-all")
	if err != nil {
		t.Fatal(err)
	}
	shown, finished := resultAndFinish(t, out, "x1")
	if shown == nil || shown.GetIsError() || finished.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("after the worker's loss: result %v, finished %v", shown, finished)
	}
	for _, want := range []string{"alpha", "beta", snap, "background processes", "worker " + b.name + ", which is no longer part of the fleet"} {
		if !strings.Contains(shown.GetContent(), want) {
			t.Errorf("the approved call's result lacks %q:\n%s", want, shown.GetContent())
		}
	}
	th, err = plumbv1.NewAgentServiceClient(s.conn).GetThread(ctx, &plumbv1.GetThreadRequest{ThreadId: threadID})
	if err != nil {
		t.Fatal(err)
	}
	if nb := th.GetThread().GetSandboxId(); sandboxapi.WorkerOf(nb) != a.name {
		t.Errorf("the thread's new box %s is not on worker %s", nb, a.name)
	}
}
