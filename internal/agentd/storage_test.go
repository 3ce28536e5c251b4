package agentd

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/store/postgres"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
	"github.com/plumbhq/plumb/pkg/store/sqlite"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestStorageChoosesTheStore: storage.postgres_dsn puts threads in
// PostgreSQL, where a restarted agentd finds them (and fails the runs the
// old one left running); without it threads stay in SQLite.
func TestStorageChoosesTheStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	env := func(string) string { return "" }
	build := func(storage StorageConfig) *Agentd {
		t.Helper()
		a, err := Build(ctx, &Config{Storage: storage}, Options{Env: env, TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}

	a := build(StorageConfig{})
	if _, ok := a.Store.(*sqlite.Store); !ok {
		t.Fatalf("no storage config: the store is %T", a.Store)
	}
	a.Close()

	storage := StorageConfig{PostgresDSN: pgtest.New(t), SQLitePath: filepath.Join(t.TempDir(), "unused.db")}
	a = build(storage)
	if _, ok := a.Store.(*postgres.Store); !ok {
		t.Fatalf("storage.postgres_dsn: the store is %T", a.Store)
	}
	if err := a.Store.CreateThread(ctx, agent.Thread{ID: "th", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	cp := &agent.Checkpoint{ThreadID: "th", Phase: agent.PhaseInput, Run: agent.RunRecord{RunID: "r1", Status: agent.StatusRunning}}
	if err := a.Store.SaveCheckpoint(ctx, cp); err != nil {
		t.Fatal(err)
	}
	a.Close()

	a = build(storage)
	defer a.Close()
	d, err := a.Store.LoadThread(ctx, "th")
	if err != nil {
		t.Fatalf("thread after a restart: %v", err)
	}
	if d.LastRun.Status != agent.StatusFailed || d.LastRun.Error.Message != "agentd restarted" {
		t.Fatalf("run left running = %+v, want it failed by the restart", d.LastRun)
	}
}

// TestPostgresWithStoreRoutesSaysWhereTheyLive: store routes are not in
// PostgreSQL yet; agentd starts and warns that their files stay in a
// per-replica SQLite file.
func TestPostgresWithStoreRoutesSaysWhereTheyLive(t *testing.T) {
	cfg, err := Load("testdata/spec-example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Storage.PostgresDSN = pgtest.New(t)
	core, logs := observer.New(zapcore.InfoLevel)
	env := map[string]string{"OPENAI_API_KEY": "sk-test", "VLLM_API_KEY": "x"}
	a, err := Build(context.Background(), cfg, Options{Env: func(k string) string { return env[k] }, Logger: zap.New(core), TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if logs.FilterMessageSnippet("store routes keep their files in SQLite").Len() != 1 {
		t.Fatalf("no warning about store routes: %v", logs.All())
	}
	if e := logs.FilterMessage("threads are kept in PostgreSQL").All(); len(e) != 1 || !strings.HasPrefix(e[0].ContextMap()["postgres"].(string), "postgres://postgres@127.0.0.1:") {
		t.Fatalf("the PostgreSQL server is not logged: %v", e)
	}
}

// TestUnreachablePostgresStopsBuild: a DSN that cannot connect is a config
// error naming storage.postgres_dsn and the server, never the password.
func TestUnreachablePostgresStopsBuild(t *testing.T) {
	cfg := &Config{Storage: StorageConfig{PostgresDSN: "postgres://agentd:s3cret@127.0.0.1:1/plumb?sslmode=disable"}}
	a, err := Build(context.Background(), cfg, Options{Env: func(string) string { return "" }, TempDir: t.TempDir()})
	if err == nil {
		a.Close()
		t.Fatal("Build succeeded")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "storage.postgres_dsn: ") || !strings.Contains(msg, "postgres://agentd@127.0.0.1:1/plumb") || strings.Contains(msg, "s3cret") || strings.Contains(msg, "\n") {
		t.Fatalf("error = %q", msg)
	}
}
