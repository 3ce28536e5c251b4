package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/storetest"
)

func open(t *testing.T, path string, o Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func msg(role model.Role, text string) agent.Message {
	return agent.Message{Message: model.Message{Role: role, Content: text}, CreatedAt: t0}
}

func newThread(t *testing.T, s *Store, id string, md map[string]string, at time.Time) {
	t.Helper()
	if err := s.CreateThread(context.Background(), agent.Thread{ID: id, CreatedAt: at, Metadata: md}); err != nil {
		t.Fatal(err)
	}
}

func TestCheckpointsPersistAcrossReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentd.db")
	s := open(t, path, Options{})
	newThread(t, s, "th1", map[string]string{"tenant": "a"}, t0)
	if err := s.CreateThread(ctx, agent.Thread{ID: "th1", CreatedAt: t0}); !errors.Is(err, agent.ErrConflict) {
		t.Fatalf("duplicate thread: %v", err)
	}

	asst := msg(model.RoleAssistant, "")
	asst.ToolCalls = []model.ToolCall{{ID: "c1", Name: "write_file", Args: `{"file_path":"/a"}`}}
	steps := []agent.Checkpoint{
		{ThreadID: "th1", Phase: agent.PhaseInput, Base: 0, Append: []agent.Message{msg(model.RoleUser, "hi")},
			Run: agent.RunRecord{RunID: "r1", Status: agent.StatusRunning}, CreatedAt: t0.Add(time.Second)},
		{ThreadID: "th1", Phase: agent.PhaseModel, Step: 1, Base: 1, Append: []agent.Message{asst},
			Files: map[string]json.RawMessage{"/a.txt": json.RawMessage(`{"content":"x"}`), "/b.txt": json.RawMessage(`{"content":"y"}`)},
			Todos: []agent.Todo{{Content: "x", Status: agent.TodoInProgress}},
			Run:   agent.RunRecord{RunID: "r1", Status: agent.StatusRunning, Usage: model.Usage{Prompt: 10, Completion: 5, Total: 15}}, CreatedAt: t0.Add(2 * time.Second)},
		{ThreadID: "th1", Phase: agent.PhaseInterrupt, Step: 1, Base: 2, EditCalls: []agent.CallEdit{{MessageIndex: 1, CallID: "c1", Args: `{"file_path":"/b"}`}},
			Todos:     []agent.Todo{{Content: "x", Status: agent.TodoInProgress}},
			Interrupt: &agent.PendingInterrupt{InterruptID: "i1", RunID: "r1"},
			Files:     map[string]json.RawMessage{"/b.txt": nil},
			Run:       agent.RunRecord{RunID: "r1", Status: agent.StatusInterrupted, Usage: model.Usage{Prompt: 10, Completion: 5, Total: 15}}, CreatedAt: t0.Add(3 * time.Second)},
	}
	for i := range steps {
		if err := s.SaveCheckpoint(ctx, &steps[i]); err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
	}
	// A stale base changes nothing.
	stale := agent.Checkpoint{ThreadID: "th1", Phase: agent.PhaseTools, Base: 1, Append: []agent.Message{msg(model.RoleUser, "lost")}, CreatedAt: t0.Add(4 * time.Second)}
	if err := s.SaveCheckpoint(ctx, &stale); !errors.Is(err, agent.ErrConflict) {
		t.Fatalf("stale base: %v, want ErrConflict", err)
	}
	bad := agent.Checkpoint{ThreadID: "th1", Base: 2, EditCalls: []agent.CallEdit{{MessageIndex: 1, CallID: "nope"}}, Append: []agent.Message{msg(model.RoleUser, "lost")}}
	if err := s.SaveCheckpoint(ctx, &bad); !errors.Is(err, agent.ErrConflict) {
		t.Fatalf("edit of unknown call: %v, want ErrConflict", err)
	}
	if err := s.SaveCheckpoint(ctx, &agent.Checkpoint{ThreadID: "nope"}); !errors.Is(err, agent.ErrThreadNotFound) {
		t.Fatalf("unknown thread: %v", err)
	}
	s.Close()

	s = open(t, path, Options{})
	d, err := s.LoadThread(ctx, "th1")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Messages) != 2 || d.Messages[0].Content != "hi" || d.Messages[1].ToolCalls[0].Args != `{"file_path":"/b"}` {
		t.Fatalf("messages = %+v", d.Messages)
	}
	if d.Status() != agent.ThreadInterrupted || d.Interrupt.InterruptID != "i1" || len(d.Todos) != 1 {
		t.Fatalf("state = status %s interrupt %+v todos %+v", d.Status(), d.Interrupt, d.Todos)
	}
	if d.LastRun == nil || d.LastRun.Status != agent.StatusInterrupted || d.Usage.Total != 15 {
		t.Fatalf("run = %+v usage %+v", d.LastRun, d.Usage)
	}
	if len(d.Files) != 1 || string(d.Files["/a.txt"]) != `{"content":"x"}` {
		t.Fatalf("files = %v", d.Files)
	}
	if len(d.Checkpoints) != 3 || d.Checkpoints[2].Phase != agent.PhaseInterrupt || d.Checkpoints[2].MessageCount != 2 {
		t.Fatalf("checkpoints = %+v", d.Checkpoints)
	}
	if !d.Thread.UpdatedAt.Equal(t0.Add(3*time.Second)) || d.Thread.Metadata["tenant"] != "a" {
		t.Fatalf("thread = %+v", d.Thread)
	}
	if _, err := s.LoadThread(ctx, "nope"); !errors.Is(err, agent.ErrThreadNotFound) {
		t.Fatalf("load unknown: %v", err)
	}
}

func TestFailRunningRunsAndRetention(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "db"), Options{CheckpointRetention: 3})
	newThread(t, s, "th", nil, t0)
	for i := range 5 {
		cp := agent.Checkpoint{ThreadID: "th", Phase: agent.PhaseTools, Step: i, Base: i, Append: []agent.Message{msg(model.RoleUser, fmt.Sprint(i))},
			Run: agent.RunRecord{RunID: "r", Status: agent.StatusRunning}, CreatedAt: t0}
		if err := s.SaveCheckpoint(ctx, &cp); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.FailRunningRuns(ctx, "agentd restarted")
	if err != nil || n != 1 {
		t.Fatalf("FailRunningRuns = %d, %v", n, err)
	}
	d, err := s.LoadThread(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	if d.LastRun.Status != agent.StatusFailed || d.LastRun.Error.Message != "agentd restarted" {
		t.Fatalf("run = %+v", d.LastRun)
	}
	if len(d.Checkpoints) != 3 || d.Checkpoints[0].Step != 2 || len(d.Messages) != 5 {
		t.Fatalf("checkpoints %+v, %d messages", d.Checkpoints, len(d.Messages))
	}
}

func TestConcurrentCheckpoints(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "db"), Options{})
	const threads, steps = 8, 20
	for i := range threads {
		newThread(t, s, fmt.Sprintf("t%d", i), nil, t0)
	}
	var wg sync.WaitGroup
	errs := make(chan error, threads)
	for i := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range steps {
				cp := agent.Checkpoint{ThreadID: fmt.Sprintf("t%d", i), Base: j, Append: []agent.Message{msg(model.RoleUser, fmt.Sprint(j))}, CreatedAt: t0}
				if err := s.SaveCheckpoint(ctx, &cp); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range threads {
		d, err := s.LoadThread(ctx, fmt.Sprintf("t%d", i))
		if err != nil || len(d.Messages) != steps || d.Messages[steps-1].Content != fmt.Sprint(steps-1) {
			t.Fatalf("thread %d: %v", i, err)
		}
	}
}

func TestMigrationsAreRecorded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	s := open(t, path, Options{})
	var v int
	if err := s.db.QueryRow(`SELECT version FROM schema_version`).Scan(&v); err != nil || v != len(migrations) {
		t.Fatalf("version = %d, %v", v, err)
	}
	if _, err := s.db.Exec(`UPDATE schema_version SET version = 999`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(context.Background(), path, Options{}); err == nil {
		t.Fatal("opened a database from a newer agentd")
	}
}

// TestStoreConformance runs the agent package's shared Store suite against
// a real SQLite file.
func TestStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) agent.Store {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{})
	})
}

// TestThreadsConformance runs the durable stores' suite (listing,
// deletion, sandboxes, retention) against a real SQLite file.
func TestThreadsConformance(t *testing.T) {
	storetest.RunThreads(t, func(t *testing.T, retention int) store.Threads {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{CheckpointRetention: retention})
	})
}

// TestBusyIsReported: a writer that holds the database past the busy
// timeout makes a checkpoint fail with ErrBusy (agentd answers
// UNAVAILABLE), and nothing is half-written.
func TestBusyIsReported(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	s := open(t, path, Options{BusyTimeout: 50 * time.Millisecond})
	newThread(t, s, "th", nil, t0)

	other := open(t, path, Options{})
	conn, err := other.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	cp := agent.Checkpoint{ThreadID: "th", Base: 0, Append: []agent.Message{msg(model.RoleUser, "x")}, CreatedAt: t0}
	if err := s.SaveCheckpoint(ctx, &cp); !errors.Is(err, store.ErrBusy) {
		t.Fatalf("checkpoint while locked: %v, want ErrBusy", err)
	}
	if _, err := conn.ExecContext(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveCheckpoint(ctx, &cp); err != nil {
		t.Fatalf("checkpoint after the lock: %v", err)
	}
}

// TestLeasesConformance runs the lease suite against a real SQLite file.
func TestLeasesConformance(t *testing.T) {
	storetest.RunLeases(t, func(t *testing.T) storetest.LeaseStore {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{})
	})
}

// TestPreviewsConformance runs the preview suite against a real SQLite
// file.
func TestPreviewsConformance(t *testing.T) {
	storetest.RunPreviews(t, func(t *testing.T) storetest.PreviewStore {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{})
	})
}

// TestSessionsConformance runs the browser session suite against a real
// SQLite file.
func TestSessionsConformance(t *testing.T) {
	storetest.RunSessions(t, func(t *testing.T) store.Sessions {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{})
	})
}

// TestSchedulesConformance runs the schedule suite against a real SQLite
// file.
func TestSchedulesConformance(t *testing.T) {
	storetest.RunSchedules(t, func(t *testing.T) storetest.ScheduleStore {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{})
	})
}

// TestSteersConformance runs the steer suite against a real SQLite file.
func TestSteersConformance(t *testing.T) {
	storetest.RunSteers(t, func(t *testing.T) storetest.SteerStore {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{})
	})
}

// TestRunsConformance runs the run-record suite against a real SQLite
// file.
func TestRunsConformance(t *testing.T) {
	storetest.RunRuns(t, func(t *testing.T) storetest.RunStore {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{})
	})
}

// TestEgressConformance runs the egress records suite against a real
// SQLite file.
func TestEgressConformance(t *testing.T) {
	storetest.RunEgress(t, func(t *testing.T) store.EgressRecords {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{})
	})
}

// TestWebhooksConformance runs the webhook suite against a real SQLite
// file.
func TestWebhooksConformance(t *testing.T) {
	storetest.RunWebhooks(t, func(t *testing.T) store.Webhooks {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{})
	})
}

// TestRetentionConformance runs the retention suite against a real SQLite
// file.
func TestRetentionConformance(t *testing.T) {
	storetest.RunRetention(t, func(t *testing.T) storetest.RetentionStore {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{})
	})
}

// TestLedgerConformance runs the usage ledger suite against a real SQLite
// file.
func TestLedgerConformance(t *testing.T) {
	storetest.RunLedger(t, func(t *testing.T) store.Ledger {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{})
	})
}

// TestQuotaCountsConformance runs the quota counts suite against a real
// SQLite file.
func TestQuotaCountsConformance(t *testing.T) {
	storetest.RunQuotaCounts(t, func(t *testing.T) storetest.QuotaStore {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{})
	})
}

// TestRunEventRetentionConformance runs the run event retention suite
// against a real SQLite file.
func TestRunEventRetentionConformance(t *testing.T) {
	storetest.RunEventRetention(t, func(t *testing.T) storetest.RunEventStore {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{})
	})
}

// TestAgentRetentionConformance runs the per-agent retention suite
// against a real SQLite file.
func TestAgentRetentionConformance(t *testing.T) {
	storetest.RunAgentRetention(t, func(t *testing.T, keep int, agents map[string]int) storetest.AgentRetentionStore {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{CheckpointRetention: keep, AgentCheckpointRetention: agents})
	})
}

// TestStoredBytesConformance runs the stored bytes suite against a real
// SQLite file.
func TestStoredBytesConformance(t *testing.T) {
	storetest.RunStoredBytes(t, func(t *testing.T) storetest.StoredStore {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{})
	})
}

// TestSandboxLedgerConformance runs the sandbox ledger suite against a
// real SQLite file.
func TestSandboxLedgerConformance(t *testing.T) {
	storetest.RunSandboxLedger(t, func(t *testing.T) store.SandboxLedger {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{})
	})
}

// TestThreadSnapshotsConformance runs the thread snapshot suite against a
// real SQLite file.
func TestThreadSnapshotsConformance(t *testing.T) {
	storetest.RunThreadSnapshots(t, func(t *testing.T, retention int) storetest.SnapshotStore {
		return open(t, filepath.Join(t.TempDir(), "agentd.db"), Options{CheckpointRetention: retention})
	})
}

// TestDeliveryAgentMigration: the migration that gives webhook deliveries
// their agent fills it in for the deliveries recorded before, from their
// run's record ("" for a run that named none, or whose record is gone).
func TestDeliveryAgentMigration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentd.db")
	s := open(t, path, Options{})
	newThread(t, s, "th", nil, t0)
	for _, r := range []struct{ id, agent string }{{"r-brief", "brief"}, {"r-none", ""}} {
		cp := agent.Checkpoint{ThreadID: "th", Run: agent.RunRecord{RunID: r.id, Status: agent.StatusCompleted, StartedAt: t0, Spec: agent.RunSpec{Agent: r.agent}}, CreatedAt: t0}
		if err := s.SaveCheckpoint(ctx, &cp); err != nil {
			t.Fatal(err)
		}
	}
	for _, run := range []string{"r-brief", "r-none", "r-gone"} {
		d := store.Delivery{ID: "d-" + run, Tenant: "acme", ThreadID: "th", RunID: run, Agent: "set", Event: "run.succeeded", URL: "https://h.example/",
			Payload: []byte(`{}`), NextAttempt: t0, GiveUp: t0.Add(time.Hour), Created: t0}
		if _, err := s.EnqueueDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	// Back to the schema before the migration, then reopen.
	if _, err := s.db.ExecContext(ctx, `ALTER TABLE webhook_deliveries DROP COLUMN agent; UPDATE schema_version SET version = version - 1`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path, Options{})
	list, _, err := s.ListDeliveries(ctx, store.DeliveryQuery{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range list {
		got[d.RunID] = d.Agent
	}
	if want := map[string]string{"r-brief": "brief", "r-none": "", "r-gone": ""}; !maps.Equal(got, want) {
		t.Fatalf("agents after the migration %v; want %v", got, want)
	}
}
