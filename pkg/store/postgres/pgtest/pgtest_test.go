package pgtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func hangGuard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(hangGuard(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// TestDatabasesAreFreshAndDropped: each New is an empty database of its
// own, gone when its test ends.
func TestDatabasesAreFreshAndDropped(t *testing.T) {
	var first string
	t.Run("first", func(t *testing.T) {
		first = New(t)
		if _, err := connect(t, first).Exec(hangGuard(t), `CREATE TABLE x (a int)`); err != nil {
			t.Fatal(err)
		}
	})
	second := New(t)
	if first == second {
		t.Fatalf("two tests got the same database %s", first)
	}
	c := connect(t, second)
	var tables, dbs int
	if err := c.QueryRow(hangGuard(t), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("the second database has %d tables, %v; want none", tables, err)
	}
	cfg, err := pgx.ParseConfig(first)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(hangGuard(t), `SELECT count(*) FROM pg_database WHERE datname = $1`, cfg.Database).Scan(&dbs); err != nil || dbs != 0 {
		t.Fatalf("the first test's database %s outlived it (%d, %v)", cfg.Database, dbs, err)
	}
}

// TestBinariesPrefersTheNewestVersion: of Debian's versioned directories,
// the newest complete one wins.
func TestBinariesPrefersTheNewestVersion(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"9.6/bin/initdb", "9.6/bin/postgres", "13/bin/initdb", "13/bin/postgres", "16/bin/initdb"} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := Root
	Root = root
	t.Cleanup(func() { Root = old })
	if got, err := Binaries(); err != nil || got != filepath.Join(root, "13", "bin") {
		t.Fatalf("Binaries() = %q, %v; want 13's (16 has no postgres)", got, err)
	}
}

// TestMissingPostgreSQL: without PostgreSQL a test is skipped, saying what
// to install, and under CI=true it fails instead. The cases run in a child
// test process that finds no PostgreSQL.
func TestMissingPostgreSQL(t *testing.T) {
	if os.Getenv("PGTEST_MISSING_CHILD") == "1" {
		Root = t.TempDir()
		New(t)
		t.Fatal("New returned without PostgreSQL")
	}
	tests := []struct {
		ci       string
		wantExit int
		want     string
	}{
		{"", 0, "--- SKIP: TestMissingPostgreSQL"},
		{"true", 1, "--- FAIL: TestMissingPostgreSQL"},
	}
	for _, tt := range tests {
		t.Run("CI="+tt.ci, func(t *testing.T) {
			cmd := exec.CommandContext(hangGuard(t), os.Args[0], "-test.run=^TestMissingPostgreSQL$", "-test.v")
			cmd.Env = append(os.Environ(), "PGTEST_MISSING_CHILD=1", "CI="+tt.ci, "PATH="+t.TempDir())
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != tt.wantExit || !strings.Contains(string(out), tt.want) ||
				!strings.Contains(string(out), "PostgreSQL is not installed: apt-get install postgresql") {
				t.Fatalf("exit %d, want %d with %q and the package to install; output:\n%s", code, tt.wantExit, tt.want, out)
			}
		})
	}
}
