package agentd

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/model/modeltest"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/snapshot"
)

// snapshotWorker starts a worker with a snapshot store in a temporary
// directory.
func snapshotWorker(t *testing.T) *sandboxsvctest.Worker {
	t.Helper()
	st, err := snapshot.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo, err := snapshot.NewRepo(st, 0)
	if err != nil {
		t.Fatal(err)
	}
	return sandboxsvctest.StartWorker(t, sandbox.Config{Snapshots: repo})
}

// workerSnapshots lists the default tenant's snapshots on the worker.
func workerSnapshots(t *testing.T, s *stack) []string {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(s.ctx(), tenant.MetadataKey, "default")
	list, err := s.worker.Client.ListSnapshots(ctx, &plumbv1.ListSnapshotsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, sn := range list.GetSnapshots() {
		out = append(out, sn.GetId())
	}
	return out
}

// lastSnapshot is the snapshot id of the thread's newest checkpoint that
// has one, and that checkpoint's id.
func lastSnapshot(t *testing.T, s *stack, thread string) (string, int64) {
	t.Helper()
	resp, err := s.c.ListCheckpoints(s.ctx(), &plumbv1.ListCheckpointsRequest{ThreadId: thread, PageSize: 500})
	if err != nil {
		t.Fatal(err)
	}
	cps := resp.GetCheckpoints()
	for i := len(cps) - 1; i >= 0; i-- {
		if cps[i].GetSnapshotId() != "" {
			return cps[i].GetSnapshotId(), cps[i].GetId()
		}
	}
	t.Fatalf("no checkpoint of thread %s has a snapshot: %v", thread, cps)
	return "", 0
}

// TestForkThreadRestoresTheCheckpointsWorkspace (issue 19 item 5, Done
// when): a run writes a.txt (checkpoint 1), a later run changes it and
// writes b.txt (checkpoint 2); ForkThread at checkpoint 1 gives a thread
// whose box holds exactly a.txt's first content and no b.txt, the
// original thread is untouched; another tenant's thread and an unknown
// checkpoint are NOT_FOUND and make no thread; a box lost to its TTL is
// restored from the thread's latest snapshot with a notice naming it;
// deleting the threads deletes their snapshots from the worker, a shared
// one only with its last thread.
func TestForkThreadRestoresTheCheckpointsWorkspace(t *testing.T) {
	w := snapshotWorker(t)
	s := startStack(t, w, "backends: {default: sandbox}\n")
	s.model.Script("main",
		modeltest.Calls(mcall("e1", "execute", `{"command":"echo one > /workspace/a.txt"}`)),
		modeltest.Text("wrote a"),
	)
	thread, _ := s.mustRun(input("", "Write a."))
	snap1, cp1 := lastSnapshot(t, s, thread)

	s.model.Script("main",
		modeltest.Calls(mcall("e2", "execute", `{"command":"echo two > /workspace/a.txt && echo bee > /workspace/b.txt"}`)),
		modeltest.Text("wrote b"),
	)
	s.mustRun(input(thread, "Change a, write b."))
	snap2, cp2 := lastSnapshot(t, s, thread)
	if snap2 == snap1 || cp2 <= cp1 {
		t.Fatalf("second run's snapshot %s at %d; first %s at %d", snap2, cp2, snap1, cp1)
	}

	threads := func() int {
		t.Helper()
		l, err := s.c.ListThreads(s.ctx(), &plumbv1.ListThreadsRequest{PageSize: 500})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.GetThreads())
	}
	before := threads()
	for _, c := range []struct {
		name   string
		tenant string
		req    *plumbv1.ForkThreadRequest
		code   codes.Code
	}{
		{"another tenant's thread", "beta", &plumbv1.ForkThreadRequest{ThreadId: thread, CheckpointId: cp1}, codes.NotFound},
		{"unknown checkpoint", "", &plumbv1.ForkThreadRequest{ThreadId: thread, CheckpointId: cp2 + 1000}, codes.NotFound},
		{"unknown thread", "", &plumbv1.ForkThreadRequest{ThreadId: "01NOSUCHTHREAD", CheckpointId: cp1}, codes.NotFound},
		{"no thread id", "", &plumbv1.ForkThreadRequest{CheckpointId: cp1}, codes.InvalidArgument},
		{"negative checkpoint", "", &plumbv1.ForkThreadRequest{ThreadId: thread, CheckpointId: -1}, codes.InvalidArgument},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.tenant = c.tenant
			defer func() { s.tenant = "" }()
			if _, err := s.c.ForkThread(s.ctx(), c.req); status.Code(err) != c.code {
				t.Errorf("ForkThread: %v, want %s", err, c.code)
			}
		})
	}
	if n := threads(); n != before {
		t.Errorf("%d threads after the refused forks, %d before", n, before)
	}

	fork, err := s.c.ForkThread(s.ctx(), &plumbv1.ForkThreadRequest{ThreadId: thread, CheckpointId: cp1, Metadata: map[string]string{"branch": "retry"}})
	if err != nil {
		t.Fatal(err)
	}
	forkID := fork.GetThread().GetId()
	if fork.GetSnapshotId() != snap1 || fork.GetCheckpointId() != cp1 || fork.GetThread().GetMetadata()["branch"] != "retry" || forkID == thread {
		t.Fatalf("fork = %v; want snapshot %s at checkpoint %d", fork, snap1, cp1)
	}
	orig, err := s.c.GetThread(s.ctx(), &plumbv1.GetThreadRequest{ThreadId: thread})
	if err != nil {
		t.Fatal(err)
	}
	// The fork's log is the first run's: input, call, result, answer.
	if got, want := fork.GetThread().GetMessageCount(), orig.GetThread().GetMessageCount(); got >= want || got == 0 {
		t.Errorf("fork has %d messages, the original %d", got, want)
	}

	s.model.Script("main",
		modeltest.Calls(mcall("f1", "execute", `{"command":"cat /workspace/a.txt; ls /workspace"}`)),
		modeltest.Text("read"),
	)
	_, results := s.mustRun(input(forkID, "What is there?"))
	r := wantResult(t, results, "f1", false, "one", "a.txt", snap1)
	if r != nil && (strings.Contains(r.GetContent(), "two") || strings.Contains(r.GetContent(), "b.txt")) {
		t.Errorf("the fork's box holds the later run's files:\n%s", r.GetContent())
	}

	// The original is untouched; its box lost to its TTL comes back from
	// its latest snapshot, and the result says which.
	s.deleteSandboxes()
	s.model.Script("main",
		modeltest.Calls(mcall("o1", "execute", `{"command":"cat /workspace/a.txt /workspace/b.txt"}`)),
		modeltest.Text("read"),
	)
	_, results = s.mustRun(input(thread, "What is there?"))
	r = wantResult(t, results, "o1", false, "two", "bee", snap2, "background processes")
	if r != nil && strings.Contains(r.GetContent(), resetMarker) {
		t.Errorf("the restored workspace is said to be reset:\n%s", r.GetContent())
	}

	// Deleting the original deletes the snapshots only it names; the
	// fork's (snap1) stays until the fork goes too.
	if _, err := s.c.DeleteThread(s.ctx(), &plumbv1.DeleteThreadRequest{ThreadId: thread}); err != nil {
		t.Fatal(err)
	}
	left := workerSnapshots(t, s)
	if !slices.Contains(left, snap1) || slices.Contains(left, snap2) {
		t.Errorf("after deleting the original: worker holds %v; want %s and not %s", left, snap1, snap2)
	}
	if _, err := s.c.DeleteThread(s.ctx(), &plumbv1.DeleteThreadRequest{ThreadId: forkID}); err != nil {
		t.Fatal(err)
	}
	if left := workerSnapshots(t, s); slices.Contains(left, snap1) {
		t.Errorf("after deleting the fork: worker holds %v; want no %s", left, snap1)
	}
}

// TestInterruptedThreadsBoxIsSuspended (issue 19 item 6): while a run
// waits for approval, agentd pauses its box after
// sandbox.suspend_on_interrupt_after; the Resume's first call wakes it,
// with its files.
func TestInterruptedThreadsBoxIsSuspended(t *testing.T) {
	w := sandboxsvctest.StartWorker(t, sandbox.Config{})
	s := startStack(t, w, "backends: {default: sandbox}\nagents:\n  main:\n    interrupt_on: {execute: true}\n")
	s.core.Backends.cfg.Sandbox.SuspendOnInterruptAfter = time.Millisecond // before any run reads it
	s.model.Script("main",
		modeltest.Calls(mcall("w1", "write_file", `{"file_path":"/workspace/a.txt","content":"kept"}`)),
		modeltest.Calls(mcall("x1", "execute", `{"command":"cat /workspace/a.txt"}`)),
		modeltest.Text("done"),
	)
	evs, _, err := s.run(input("", "Write, then show."))
	if err != nil || len(evs) == 0 || evs[len(evs)-1].GetInterrupted() == nil {
		t.Fatalf("run: %v, %v; want an interrupt", evs, err)
	}
	in := evs[len(evs)-1].GetInterrupted()
	thread := evs[0].GetThreadId()
	th, err := s.c.GetThread(s.ctx(), &plumbv1.GetThreadRequest{ThreadId: thread})
	if err != nil {
		t.Fatal(err)
	}
	box := th.GetThread().GetSandboxId()
	state := func() plumbv1.SandboxState {
		t.Helper()
		ctx := metadata.AppendToOutgoingContext(s.ctx(), tenant.MetadataKey, "default")
		sb, err := w.Client.GetSandbox(ctx, &plumbv1.GetSandboxRequest{SandboxId: box})
		if err != nil {
			t.Fatal(err)
		}
		return sb.GetSandbox().GetState()
	}
	for st := state(); st != plumbv1.SandboxState_SANDBOX_STATE_PAUSED; st = state() {
		if s.ctx().Err() != nil {
			t.Fatalf("box %s is %s, never paused", box, st)
		}
		time.Sleep(50 * time.Millisecond) // polling the worker, not a synchronization
	}

	stream, err := s.c.Resume(s.ctx(), &plumbv1.ResumeRequest{ThreadId: thread, InterruptId: in.GetInterruptId(),
		Decisions: []*plumbv1.Decision{{ToolCallId: "x1", Type: plumbv1.DecisionType_DECISION_TYPE_APPROVE}}})
	if err != nil {
		t.Fatal(err)
	}
	var shown *plumbv1.ToolResult
	for {
		m, err := stream.Recv()
		if err != nil {
			break
		}
		if r := m.GetEvent().GetToolResult(); r != nil && r.GetId() == "x1" {
			shown = r
		}
	}
	if shown == nil || shown.GetIsError() || !strings.Contains(shown.GetContent(), "kept") {
		t.Fatalf("the approved call after the pause: %v", shown)
	}
	if st := state(); st != plumbv1.SandboxState_SANDBOX_STATE_RUNNING {
		t.Errorf("box %s is %s after the Resume, want RUNNING", box, st)
	}
}

// TestSnapshotsFollowTheirConfig: with sandbox.snapshots.at_run_end off, a
// run's end takes no snapshot; a worker without a snapshot store takes
// none either, and the run completes all the same.
func TestSnapshotsFollowTheirConfig(t *testing.T) {
	for _, c := range []struct {
		name   string
		worker func(t *testing.T) *sandboxsvctest.Worker
		off    bool
	}{
		{"at_run_end off", snapshotWorker, true},
		{"no snapshot store", func(t *testing.T) *sandboxsvctest.Worker { return sandboxsvctest.StartWorker(t, sandbox.Config{}) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := startStack(t, c.worker(t), "backends: {default: sandbox}\n")
			if c.off {
				off := false
				s.core.Backends.cfg.Sandbox.Snapshots.AtRunEnd = &off // before any run reads it
			}
			s.model.Script("main",
				modeltest.Calls(mcall("e1", "execute", `{"command":"echo x > /workspace/a.txt"}`)),
				modeltest.Text("done"),
			)
			thread, _ := s.mustRun(input("", "Write."))
			resp, err := s.c.ListCheckpoints(s.ctx(), &plumbv1.ListCheckpointsRequest{ThreadId: thread})
			if err != nil {
				t.Fatal(err)
			}
			for _, cp := range resp.GetCheckpoints() {
				if cp.GetSnapshotId() != "" {
					t.Errorf("checkpoint %d has snapshot %s", cp.GetId(), cp.GetSnapshotId())
				}
			}
			if c.off {
				if left := workerSnapshots(t, s); len(left) != 0 {
					t.Errorf("the worker holds snapshots %v", left)
				}
			}
		})
	}
}
