package replicas

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/daemon/daemontest"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"google.golang.org/protobuf/types/known/durationpb"
)

// startSingle starts one agentd on SQLite (no PostgreSQL, no leases) with
// the fleet's sandboxd worker and scripted model; it is f.a (f.b is nil).
func startSingle(t *testing.T) *fleet {
	t.Helper()
	dir := t.TempDir()
	agentdTokens := daemontest.WriteToken(t, dir, "agentd.token", agentdToken)
	sandboxdTokens := daemontest.WriteToken(t, dir, "sandboxd.token", sandboxdToken)
	sd := daemontest.StartSandboxd(t, bins["sandboxd"], dir, sandboxdTokens)
	p := &policy{holds: map[string]*hold{}}
	model := modeltest.New(t)
	turns := make([]modeltest.Turn, 1000)
	for i := range turns {
		turns[i] = modeltest.Dynamic(p.turn)
	}
	model.Script("main", turns...)
	t.Setenv("FLEET_MODEL_KEY", "test-key")
	ctx, cancel := context.WithTimeout(t.Context(), hangGuard)
	t.Cleanup(cancel)
	worker := daemontest.Dial(t, sd.GRPCAddr, sandboxdToken)
	f := &fleet{policy: p, sandbox: plumbv1.NewSandboxServiceClient(worker), worker: worker, ctx: ctx}
	doc := fmt.Sprintf(`version: 1
storage: {sqlite_path: %s}
models:
  scripted:
    base_url: %s
    api_key_env: FLEET_MODEL_KEY
    model: scripted-model
    headers: {%s: a}
    first_byte_timeout: 10m
    retry: {max_attempts: 1}
defaults: {model: scripted}
sandbox:
  address: %s
  template: {memory: 256Mi, ttl: 30m}
backends: {default: sandbox}
`, filepath.Join(dir, "agentd.db"), model.URL(), replicaHeader, sd.GRPCAddr)
	path := filepath.Join(dir, "agentd.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	proc := daemontest.Start(t, bins["agentd"], "--config", path, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--log-format", "json", "--token-file", agentdTokens, "--sandboxd-token-file", sandboxdTokens)
	f.a = &replica{name: "a", proc: proc, c: plumbv1.NewAgentServiceClient(daemontest.Dial(t, proc.GRPCAddr, agentdToken))}
	f.b = f.a // stepLog reads through f.b
	t.Cleanup(func() {
		p.openAll()
		if t.Failed() {
			t.Logf("agentd logged:\n%s", tail(proc.Stderr(), 40))
		}
	})
	return f
}

// TestRunsOnSQLite: one agentd on SQLite. A detached run is waited for
// with WaitRun (a short wait returns it RUNNING, timed out); a run
// enqueued while it is busy is QUEUED, then runs after it, once; both
// records read back with GetRun.
func TestRunsOnSQLite(t *testing.T) {
	f := startSingle(t)
	const sc = "lite"
	gate := f.policy.gate(sc, "a", 1)
	rs, err := f.a.c.Run(f.ctx, &plumbv1.RunRequest{Input: []*plumbv1.InputMessage{{Content: sc}}, Detach: true})
	if err != nil {
		t.Fatal(err)
	}
	first, err := rs.Recv()
	if err != nil || first.GetEvent().GetRunStarted() == nil {
		t.Fatalf("first event %v, %v", first, err)
	}
	runID, thread := first.GetEvent().GetRunId(), first.GetEvent().GetThreadId()
	gate.wait(t, "step 2's model call")
	resp, err := f.a.c.WaitRun(f.ctx, &plumbv1.WaitRunRequest{RunId: runID, Timeout: durationpb.New(time.Second)})
	if err != nil || !resp.GetTimedOut() || resp.GetRun().GetStatus() != plumbv1.RunStatus_RUN_STATUS_RUNNING {
		t.Fatalf("a short WaitRun = %v, %v; want the RUNNING record, timed out", resp, err)
	}
	q := f.enqueue(t, f.a, thread, "lite-queued")
	gate.open()
	rec := f.waitRun(t, f.a, runID)
	if rec.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || rec.GetFinalText() != "done "+sc {
		t.Fatalf("the detached run's record = %v", rec)
	}
	qrec := f.waitRun(t, f.a, q.GetRunId())
	if qrec.GetStatus() != plumbv1.RunStatus_RUN_STATUS_COMPLETED || !qrec.GetStartedAt().AsTime().After(rec.GetFinishedAt().AsTime()) {
		t.Fatalf("the queued run's record = %v; want COMPLETED, started after %v", qrec, rec.GetFinishedAt().AsTime())
	}
	got, err := f.a.c.GetRun(f.ctx, &plumbv1.GetRunRequest{RunId: q.GetRunId()})
	if err != nil || got.GetRun().GetFinalText() != "done lite-queued" {
		t.Fatalf("GetRun of the queued run = %v, %v", got, err)
	}
	f.wantSteps(t, thread, sc, 1, 2, 3)
	f.wantSteps(t, thread, "lite-queued", 1, 2, 3)
}
