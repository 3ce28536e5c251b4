package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/model"
	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
	"github.com/plumbhq/plumb/pkg/store/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// hangGuard bounds a test's database calls so a lock bug fails instead of
// hanging the run; it is no speed requirement.
func hangGuard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, dsn string, o Options) *Store {
	t.Helper()
	s, err := Open(hangGuard(t), dsn, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// conn is a direct connection to the test database, for holding locks and
// looking at tables.
func conn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(hangGuard(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func msg(role model.Role, text string) agent.Message {
	return agent.Message{Message: model.Message{Role: role, Content: text}, CreatedAt: t0}
}

// TestStoreConformance runs the agent package's shared Store suite against
// a real PostgreSQL server, a fresh database per case.
func TestStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) agent.Store { return open(t, pgtest.New(t), Options{}) })
}

// TestThreadsConformance runs the durable stores' suite against a real
// PostgreSQL server.
func TestThreadsConformance(t *testing.T) {
	storetest.RunThreads(t, func(t *testing.T, retention int) store.Threads {
		return open(t, pgtest.New(t), Options{CheckpointRetention: retention})
	})
}

// TestPersistsAcrossReopen: what one store committed, another opened later
// on the same database reads back, and reopening does not migrate again.
func TestPersistsAcrossReopen(t *testing.T) {
	ctx := hangGuard(t)
	dsn := pgtest.New(t)
	s := open(t, dsn, Options{})
	if err := s.CreateThread(ctx, agent.Thread{ID: "th1", CreatedAt: t0, Metadata: map[string]string{"tenant": "a"}}); err != nil {
		t.Fatal(err)
	}
	asst := msg(model.RoleAssistant, "")
	asst.ToolCalls = []model.ToolCall{{ID: "c1", Name: "write_file", Args: `{"file_path":"/a"}`}}
	cp := agent.Checkpoint{ThreadID: "th1", Phase: agent.PhaseInterrupt, Append: []agent.Message{msg(model.RoleUser, "hi"), asst},
		Interrupt: &agent.PendingInterrupt{InterruptID: "i1", RunID: "r1"}, Run: agent.RunRecord{RunID: "r1", Status: agent.StatusInterrupted}, CreatedAt: t0.Add(time.Second)}
	if err := s.SaveCheckpoint(ctx, &cp); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = open(t, dsn, Options{})
	d, err := s.LoadThread(ctx, "th1")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Messages) != 2 || d.Messages[1].ToolCalls[0].Args != `{"file_path":"/a"}` || d.Status() != agent.ThreadInterrupted ||
		!d.Thread.UpdatedAt.Equal(t0.Add(time.Second)) || d.Thread.Metadata["tenant"] != "a" {
		t.Fatalf("reopened thread = %+v", d)
	}
	var rows, v int
	if err := conn(t, dsn).QueryRow(ctx, `SELECT count(*), max(version) FROM schema_version`).Scan(&rows, &v); err != nil || rows != 1 || v != len(migrations) {
		t.Fatalf("schema_version: %d rows, version %d, %v; want 1 row at %d", rows, v, err, len(migrations))
	}
}

// TestConcurrentOpenersMigrateOnce: replicas starting together on an empty
// database all open it; the advisory lock makes one migrate and the others
// find the schema current.
func TestConcurrentOpenersMigrateOnce(t *testing.T) {
	const openers = 6
	dsn := pgtest.New(t)
	ctx := hangGuard(t)
	start := make(chan struct{})
	errs := make([]error, openers)
	var wg sync.WaitGroup
	for i := range openers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s, err := Open(ctx, dsn, Options{})
			if err == nil {
				s.Close()
			}
			errs[i] = err
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("opener %d: %v", i, err)
		}
	}
	var rows, v int
	if err := conn(t, dsn).QueryRow(ctx, `SELECT count(*), max(version) FROM schema_version`).Scan(&rows, &v); err != nil || rows != 1 || v != len(migrations) {
		t.Fatalf("schema_version: %d rows, version %d, %v; want 1 row at %d", rows, v, err, len(migrations))
	}
}

// TestNewerSchemaIsRefused: an agentd older than the database does not
// touch it.
func TestNewerSchemaIsRefused(t *testing.T) {
	dsn := pgtest.New(t)
	open(t, dsn, Options{}).Close()
	if _, err := conn(t, dsn).Exec(hangGuard(t), `UPDATE schema_version SET version = 999`); err != nil {
		t.Fatal(err)
	}
	_, err := Open(hangGuard(t), dsn, Options{})
	if err == nil || !strings.Contains(err.Error(), "schema version 999 is newer") {
		t.Fatalf("Open of a newer schema: %v", err)
	}
}

// lockThread holds the row lock of a thread in another transaction until
// the returned function rolls it back.
func lockThread(t *testing.T, dsn, id string) (release func()) {
	t.Helper()
	ctx := hangGuard(t)
	c := conn(t, dsn)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM threads WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := tx.Rollback(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// TestBusyIsReported: a writer that holds a thread past the busy timeout
// makes a checkpoint fail with store.ErrBusy (agentd answers UNAVAILABLE),
// and nothing is half-written.
func TestBusyIsReported(t *testing.T) {
	ctx := hangGuard(t)
	dsn := pgtest.New(t)
	s := open(t, dsn, Options{BusyTimeout: 50 * time.Millisecond})
	if err := s.CreateThread(ctx, agent.Thread{ID: "th", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	release := lockThread(t, dsn, "th")
	cp := agent.Checkpoint{ThreadID: "th", Append: []agent.Message{msg(model.RoleUser, "x")}, Run: agent.RunRecord{RunID: "r", Status: agent.StatusRunning}, CreatedAt: t0}
	if err := s.SaveCheckpoint(ctx, &cp); !errors.Is(err, store.ErrBusy) {
		t.Fatalf("checkpoint while locked: %v, want ErrBusy", err)
	}
	release()
	if d, err := s.LoadThread(ctx, "th"); err != nil || len(d.Messages)+len(d.Checkpoints) != 0 || d.LastRun != nil {
		t.Fatalf("the busy checkpoint left %+v, %v", d, err)
	}
	if err := s.SaveCheckpoint(ctx, &cp); err != nil {
		t.Fatalf("checkpoint after the lock: %v", err)
	}
}

// TestContextEndsAWait: a checkpoint waiting for a thread's lock returns
// when its context ends, long before the busy timeout, and leaves nothing.
func TestContextEndsAWait(t *testing.T) {
	dsn := pgtest.New(t)
	s := open(t, dsn, Options{BusyTimeout: time.Hour})
	if err := s.CreateThread(hangGuard(t), agent.Thread{ID: "th", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	lockThread(t, dsn, "th")

	ctx, cancel := context.WithCancel(hangGuard(t))
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- s.SaveCheckpoint(ctx, &agent.Checkpoint{ThreadID: "th", Append: []agent.Message{msg(model.RoleUser, "x")}, CreatedAt: t0})
	}()
	// Cancel once the checkpoint is waiting for the lock.
	watch := conn(t, dsn)
	for {
		var waiting int
		if err := watch.QueryRow(hangGuard(t), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'agentd' AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case err := <-errc:
			t.Fatalf("checkpoint returned while the thread was locked: %v", err)
		case <-time.After(20 * time.Millisecond): // poll interval
		}
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled checkpoint: %v, want context.Canceled", err)
	}
	if err := s.CreateThread(hangGuard(t), agent.Thread{ID: "other", CreatedAt: t0}); err != nil {
		t.Fatalf("the store is unusable after a cancelled wait: %v", err)
	}
}

// TestValuesPostgreSQLCannotHoldAreInvalidInput: a NUL in a label (which
// TEXT cannot store) is the caller's bad input, not an internal error.
func TestValuesPostgreSQLCannotHoldAreInvalidInput(t *testing.T) {
	s := open(t, pgtest.New(t), Options{})
	err := s.CreateThread(hangGuard(t), agent.Thread{ID: "th", CreatedAt: t0, Metadata: map[string]string{"tenant": "a\x00b"}})
	if !errors.Is(err, agent.ErrInvalidInput) {
		t.Fatalf("label with NUL: %v, want ErrInvalidInput", err)
	}
	if _, err := s.Thread(hangGuard(t), "th"); !errors.Is(err, agent.ErrThreadNotFound) {
		t.Fatalf("the refused thread exists: %v", err)
	}
}

// TestOpenErrorsHideThePassword: whatever goes wrong at Open, the error is
// one line that names the server and never shows the password.
func TestOpenErrorsHideThePassword(t *testing.T) {
	const secret = "s3cr3t-pw"
	live := pgtest.New(t) // postgres://postgres@127.0.0.1:<port>/<db>?sslmode=disable
	host := strings.TrimPrefix(strings.Split(live, "/")[2], "postgres@")
	tests := []struct {
		name, dsn, want string
	}{
		{"unparsable URL", "postgres://u:" + secret + "@127.0.0.1:notaport/db", "invalid PostgreSQL DSN: invalid port"},
		{"unparsable key=value", "host=127.0.0.1 password=" + secret + " port=x", "invalid PostgreSQL DSN: invalid port"},
		{"space in the URL's password", "postgres://u:" + secret + " x@127.0.0.1/db", "invalid PostgreSQL DSN: failed to parse as URL"},
		{"refused", "postgres://u:" + secret + "@127.0.0.1:1/db?sslmode=disable", "postgres://u@127.0.0.1:1/db"},
		{"unknown database", "postgres://postgres:" + secret + "@" + host + "/nope?sslmode=disable", "postgres://postgres@" + host + "/nope"},
		{"key=value refused", "host=127.0.0.1 port=1 user=u dbname=db sslmode=disable password=" + secret, "postgres://u@127.0.0.1:1/db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(hangGuard(t), tt.dsn, Options{})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			msg := err.Error()
			if strings.Contains(msg, secret) || strings.Contains(msg, "\n") || !strings.Contains(msg, tt.want) {
				t.Fatalf("error %q: want one line naming %q without the password", msg, tt.want)
			}
			if d := Describe(tt.dsn); strings.Contains(d, secret) {
				t.Fatalf("Describe shows the password: %q", d)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct{ dsn, want string }{
		{"postgres://agentd:pw@db.plumb.svc:5433/plumb?sslmode=require", "postgres://agentd@db.plumb.svc:5433/plumb"},
		{"postgresql://agentd@[::1]/plumb", "postgres://agentd@[::1]:5432/plumb"},
		{"host=/var/run/postgresql user=agentd dbname=plumb password=pw", "postgres://agentd@%2Fvar%2Frun%2Fpostgresql:5432/plumb"},
	}
	for _, tt := range tests {
		if got := Describe(tt.dsn); got != tt.want {
			t.Errorf("Describe(%q) = %q, want %q", tt.dsn, got, tt.want)
		}
	}
}

// proxy forwards loopback connections to addr until closed, which cuts
// every connection it carries: a database that went away.
type proxy struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newProxy(t *testing.T, addr string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(up, c); up.Close() }()
			go func() { defer p.wg.Done(); io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) close() {
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestLostDatabaseIsBusy: when the server goes away, store calls fail with
// store.ErrBusy (agentd answers UNAVAILABLE: retry later), not as internal
// errors.
func TestLostDatabaseIsBusy(t *testing.T) {
	dsn := pgtest.New(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port))
	s := open(t, strings.Replace(dsn, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), p.l.Addr().String(), 1), Options{})
	ctx := hangGuard(t)
	if err := s.CreateThread(ctx, agent.Thread{ID: "th", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	p.close()
	for i, call := range []func() error{
		func() error { _, err := s.LoadThread(ctx, "th"); return err },
		func() error { return s.SaveCheckpoint(ctx, &agent.Checkpoint{ThreadID: "th", CreatedAt: t0}) },
		func() error { _, err := s.Thread(ctx, "th"); return err },
	} {
		if err := call(); !errors.Is(err, store.ErrBusy) {
			t.Errorf("call %d without a database: %v, want ErrBusy", i, err)
		}
	}
}

// TestClassify covers the SQLSTATEs the real-server tests cannot provoke
// on demand.
func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want error // nil: passed through
	}{
		{"serialization failure", &pgconn.PgError{Code: "40001"}, store.ErrBusy},
		{"deadlock", &pgconn.PgError{Code: "40P01"}, store.ErrBusy},
		{"lock timeout", &pgconn.PgError{Code: "55P03"}, store.ErrBusy},
		{"too many connections", &pgconn.PgError{Code: "53300"}, store.ErrBusy},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, store.ErrBusy},
		{"connection failure", &pgconn.PgError{Code: "08006"}, store.ErrBusy},
		{"NUL in text", &pgconn.PgError{Code: "22021"}, agent.ErrInvalidInput},
		{"unique violation", &pgconn.PgError{Code: "23505"}, nil},
		{"cancelled", fmt.Errorf("checkpoint: %w", context.Canceled), context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := classify(fmt.Errorf("op: %w", tt.err))
			if !errors.Is(got, tt.err) {
				t.Fatalf("classify lost the cause: %v", got)
			}
			for _, sentinel := range []error{store.ErrBusy, agent.ErrInvalidInput} {
				if errors.Is(got, sentinel) != (sentinel == tt.want) {
					t.Errorf("classify = %v; is %v: %t, want %t", got, sentinel, !(sentinel == tt.want), sentinel == tt.want)
				}
			}
		})
	}
}

// TestSchemaFromDSN: search_path in the DSN puts the tables in that schema,
// so deployments can share a database.
func TestSchemaFromDSN(t *testing.T) {
	ctx := hangGuard(t)
	dsn := pgtest.New(t)
	c := conn(t, dsn)
	if _, err := c.Exec(ctx, `CREATE SCHEMA tenant_a`); err != nil {
		t.Fatal(err)
	}
	s := open(t, dsn+"&search_path=tenant_a", Options{})
	if err := s.CreateThread(ctx, agent.Thread{ID: "th", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	rows, err := c.Query(ctx, `SELECT schemaname FROM pg_tables WHERE tablename = 'threads'`)
	if err != nil {
		t.Fatal(err)
	}
	if schemas, err := pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || fmt.Sprint(schemas) != "[tenant_a]" {
		t.Fatalf("threads tables in schemas %v, %v; want [tenant_a]", schemas, err)
	}
}

// TestLeasesConformance runs the lease suite against a real PostgreSQL
// server.
func TestLeasesConformance(t *testing.T) {
	storetest.RunLeases(t, func(t *testing.T) storetest.LeaseStore { return open(t, pgtest.New(t), Options{}) })
}

// TestSessionsConformance runs the browser session suite against a real
// PostgreSQL server.
func TestSessionsConformance(t *testing.T) {
	storetest.RunSessions(t, func(t *testing.T) store.Sessions { return open(t, pgtest.New(t), Options{}) })
}

// TestPreviewsConformance runs the preview suite against a real PostgreSQL
// server.
func TestPreviewsConformance(t *testing.T) {
	storetest.RunPreviews(t, func(t *testing.T) storetest.PreviewStore { return open(t, pgtest.New(t), Options{}) })
}

// TestSchedulesConformance runs the schedule suite against a real
// PostgreSQL server.
func TestSchedulesConformance(t *testing.T) {
	storetest.RunSchedules(t, func(t *testing.T) storetest.ScheduleStore { return open(t, pgtest.New(t), Options{}) })
}

// TestSteersConformance runs the steer suite against a real PostgreSQL
// server.
func TestSteersConformance(t *testing.T) {
	storetest.RunSteers(t, func(t *testing.T) storetest.SteerStore { return open(t, pgtest.New(t), Options{}) })
}

// TestRunsConformance runs the run-record suite against a real PostgreSQL
// server.
func TestRunsConformance(t *testing.T) {
	storetest.RunRuns(t, func(t *testing.T) storetest.RunStore { return open(t, pgtest.New(t), Options{}) })
}

// TestEgressConformance runs the egress records suite against a real
// PostgreSQL server.
func TestEgressConformance(t *testing.T) {
	storetest.RunEgress(t, func(t *testing.T) store.EgressRecords { return open(t, pgtest.New(t), Options{}) })
}

// TestWebhooksConformance runs the webhook suite against a real PostgreSQL
// server.
func TestWebhooksConformance(t *testing.T) {
	storetest.RunWebhooks(t, func(t *testing.T) store.Webhooks { return open(t, pgtest.New(t), Options{}) })
}

// TestRetentionConformance runs the retention suite against a real
// PostgreSQL database.
func TestRetentionConformance(t *testing.T) {
	storetest.RunRetention(t, func(t *testing.T) storetest.RetentionStore { return open(t, pgtest.New(t), Options{}) })
}

// TestLedgerConformance runs the usage ledger suite against a real
// PostgreSQL server.
func TestLedgerConformance(t *testing.T) {
	storetest.RunLedger(t, func(t *testing.T) store.Ledger { return open(t, pgtest.New(t), Options{}) })
}

// TestQuotaCountsConformance runs the quota counts suite against a real
// PostgreSQL server.
func TestQuotaCountsConformance(t *testing.T) {
	storetest.RunQuotaCounts(t, func(t *testing.T) storetest.QuotaStore { return open(t, pgtest.New(t), Options{}) })
}

// TestRunEventRetentionConformance runs the run event retention suite
// against a real PostgreSQL server.
func TestRunEventRetentionConformance(t *testing.T) {
	storetest.RunEventRetention(t, func(t *testing.T) storetest.RunEventStore { return open(t, pgtest.New(t), Options{}) })
}

// TestAgentRetentionConformance runs the per-agent retention suite
// against a real PostgreSQL server.
func TestAgentRetentionConformance(t *testing.T) {
	storetest.RunAgentRetention(t, func(t *testing.T, keep int, agents map[string]int) storetest.AgentRetentionStore {
		return open(t, pgtest.New(t), Options{CheckpointRetention: keep, AgentCheckpointRetention: agents})
	})
}

// TestStoredBytesConformance runs the stored bytes suite against a real
// PostgreSQL server.
func TestStoredBytesConformance(t *testing.T) {
	storetest.RunStoredBytes(t, func(t *testing.T) storetest.StoredStore { return open(t, pgtest.New(t), Options{}) })
}

// TestSandboxLedgerConformance runs the sandbox ledger suite against a
// real PostgreSQL server.
func TestSandboxLedgerConformance(t *testing.T) {
	storetest.RunSandboxLedger(t, func(t *testing.T) store.SandboxLedger { return open(t, pgtest.New(t), Options{}) })
}

// TestThreadSnapshotsConformance runs the thread snapshot suite against a
// real PostgreSQL server.
func TestThreadSnapshotsConformance(t *testing.T) {
	storetest.RunThreadSnapshots(t, func(t *testing.T, retention int) storetest.SnapshotStore {
		return open(t, pgtest.New(t), Options{CheckpointRetention: retention})
	})
}

// TestDeliveryAgentMigration: the migration that gives webhook deliveries
// their agent fills it in for the deliveries recorded before, from their
// run's record ("" for a run that named none, or whose record is gone).
func TestDeliveryAgentMigration(t *testing.T) {
	ctx := hangGuard(t)
	dsn := pgtest.New(t)
	s := open(t, dsn, Options{})
	if err := s.CreateThread(ctx, agent.Thread{ID: "th", CreatedAt: t0, UpdatedAt: t0}); err != nil {
		t.Fatal(err)
	}
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
	// Back to the schema before the migration, then open again.
	c := conn(t, dsn)
	if _, err := c.Exec(ctx, `ALTER TABLE webhook_deliveries DROP COLUMN agent; UPDATE schema_version SET version = version - 1`); err != nil {
		t.Fatal(err)
	}
	s = open(t, dsn, Options{})
	list, _, err := s.ListDeliveries(ctx, store.DeliveryQuery{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range list {
		got[d.RunID] = d.Agent
	}
	want := map[string]string{"r-brief": "brief", "r-none": "", "r-gone": ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("agents after the migration %v; want %v", got, want)
	}
}
