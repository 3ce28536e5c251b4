package storefs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
)

var ctx = context.Background()

func openDB(t *testing.T) (*DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "store.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

func newBackend(t *testing.T, db *DB, ns ...string) *Backend {
	t.Helper()
	b, err := NewBackend(db, ns)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestValidateNamespace(t *testing.T) {
	tests := []struct {
		name string
		ns   []string
		ok   bool
	}{
		{"one", []string{"memories"}, true},
		{"two", []string{"acme", "memories"}, true},
		{"unicode", []string{"café", "…"}, true},
		{"dots are plain names", []string{".", ".."}, true},
		{"longest component", []string{strings.Repeat("a", MaxNamespaceComponentBytes)}, true},
		{"deepest", make16("x"), true},
		{"nil", nil, false},
		{"empty component", []string{"a", ""}, false},
		{"slash", []string{"a/b"}, false},
		{"NUL", []string{"a\x00"}, false},
		{"newline", []string{"a\nb"}, false},
		{"DEL", []string{"a\x7f"}, false},
		{"invalid UTF-8", []string{"a\xff"}, false},
		{"too long", []string{strings.Repeat("a", MaxNamespaceComponentBytes+1)}, false},
		{"too deep", append(make16("x"), "y"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateNamespace(tt.ns)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidateNamespace(%q) = %v, want ok=%v", tt.ns, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidNamespace) {
				t.Errorf("error %v does not wrap ErrInvalidNamespace", err)
			}
		})
	}
	db, _ := openDB(t)
	if _, err := NewBackend(db, []string{"a/b"}); !errors.Is(err, ErrInvalidNamespace) {
		t.Errorf("NewBackend with a bad namespace: %v", err)
	}
}

func make16(c string) []string {
	out := make([]string, MaxNamespaceDepth)
	for i := range out {
		out[i] = c
	}
	return out
}

func TestOpen(t *testing.T) {
	for _, bad := range []string{"", ":memory:", "file:x.db", "/tmp/x?mode=ro"} {
		if _, err := Open(bad); err == nil {
			t.Errorf("Open(%q) succeeded", bad)
		}
	}
	db, path := openDB(t)
	v, err := db.SchemaVersion(ctx)
	if err != nil || v != len(migrations) {
		t.Fatalf("schema version %d, %v", v, err)
	}
	b := newBackend(t, db, "t")
	if _, err := b.Write(ctx, "/keep.txt", []byte("persisted")); err != nil {
		t.Fatal(err)
	}
	db.Close()

	// Reopening migrates nothing and sees the data.
	db2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if v, _ := db2.SchemaVersion(ctx); v != len(migrations) {
		t.Errorf("schema version after reopen %d", v)
	}
	res, _ := newBackend(t, db2, "t").Download(ctx, []string{"/keep.txt"})
	if string(res[0].Content) != "persisted" {
		t.Errorf("after reopen: %+v", res[0])
	}
}

// TestOpenNewerSchema refuses a database written by a newer build.
func TestOpenNewerSchema(t *testing.T) {
	db, path := openDB(t)
	if _, err := db.db.Exec(`INSERT INTO store_schema_version (version) VALUES (?)`, len(migrations)+1); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open of a newer schema: %v", err)
	}
}

// TestNamespaces checks isolation: neither content nor directories leak
// between namespaces, including ones that share a prefix.
func TestNamespaces(t *testing.T) {
	db, _ := openDB(t)
	a, ab, a2 := newBackend(t, db, "a"), newBackend(t, db, "a", "b"), newBackend(t, db, "a2")
	for i, b := range []*Backend{a, ab, a2} {
		if _, err := b.Write(ctx, fmt.Sprintf("/f%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range []*Backend{a, ab, a2} {
		res, err := b.Ls(ctx, "/")
		if err != nil || len(res.Entries) != 1 || res.Entries[0].Path != fmt.Sprintf("/f%d", i) {
			t.Errorf("namespace %q: %+v %v", b.Namespace(), res.Entries, err)
		}
	}
	if _, err := a.Delete(ctx, "/f1"); backend.CodeOf(err) != backend.CodeFileNotFound {
		t.Errorf("delete across namespaces: %v", err)
	}
	// Two backends on one namespace share files.
	same := newBackend(t, db, "a", "b")
	if res, _ := same.Download(ctx, []string{"/f1"}); res[0].Err != nil {
		t.Errorf("shared namespace: %v", res[0].Err)
	}
}

// TestQueryPlans proves that every lookup, range and delete searches an
// index: no statement scans a table or sorts.
func TestQueryPlans(t *testing.T) {
	db, _ := openDB(t)
	for _, q := range []string{sqlStat, sqlScan, sqlGet, sqlDeleteFileChunks, sqlDeleteFile, sqlDeleteRangeChunks, sqlDeleteRange} {
		args := make([]any, strings.Count(q, "?"))
		for i := range args {
			args[i] = "x"
		}
		rows, err := db.db.Query("EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		for _, step := range plan {
			if strings.HasPrefix(step, "SCAN") || strings.Contains(step, "TEMP B-TREE") {
				t.Errorf("plan of %q: %q", q, plan)
			}
		}
		if !strings.Contains(strings.Join(plan, "; "), "SEARCH") {
			t.Errorf("plan of %q has no index search: %q", q, plan)
		}
	}
}

// TestConcurrentInstances runs edits of one file through several backends
// on the same namespace (as threads sharing a Store route do): the path
// lock does not span instances, the revision check does.
func TestConcurrentInstances(t *testing.T) {
	db, path := openDB(t)
	other, err := Open(path) // a second pool, as another process would have
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	bs := []*Backend{newBackend(t, db, "shared"), newBackend(t, db, "shared"), newBackend(t, other, "shared")}
	const n = 24
	var tokens []string
	for i := range n {
		tokens = append(tokens, fmt.Sprintf("<t%02d>", i))
	}
	if _, err := bs[0].Write(ctx, "/e.txt", []byte(strings.Join(tokens, "\n"))); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := bs[i%len(bs)].Edit(ctx, backend.EditRequest{Path: "/e.txt", Old: tokens[i], New: fmt.Sprintf("[d%02d]", i)})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	res, _ := bs[1].Download(ctx, []string{"/e.txt"})
	for i := range n {
		if !strings.Contains(string(res[0].Content), fmt.Sprintf("[d%02d]", i)) {
			t.Errorf("edit %d lost", i)
		}
	}
}

func TestClosedDB(t *testing.T) {
	db, _ := openDB(t)
	b := newBackend(t, db, "t")
	db.Close()
	_, err := b.Write(ctx, "/x", []byte("x"))
	var be *backend.Error
	if !errors.As(err, &be) || be.Code != backend.CodeInternal || be.Path != "/x" {
		t.Fatalf("write on a closed DB: %#v", err)
	}
}

// TestConcurrentWritersQueue is issue 8's "32 writes at once on a loaded
// host expect 32 successes": with SQLite's busy timeout at 1 ms, any writer
// of this process that polled the file lock instead of queueing would fail
// with "busy".
func TestConcurrentWritersQueue(t *testing.T) {
	old := busyTimeoutMS
	busyTimeoutMS = 1
	t.Cleanup(func() { busyTimeoutMS = old })
	db, _ := openDB(t)
	b := newBackend(t, db, "q")
	const n = 32
	payload := []byte(strings.Repeat("x", 3*ChunkBytes+1))
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() {
			_, err := b.Write(ctx, fmt.Sprintf("/w%02d.txt", i), payload)
			errs <- err
		})
		wg.Go(func() {
			_, err := b.Write(ctx, "/same.txt", payload)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent write: %v", err)
		}
	}
	entries, err := b.Ls(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries.Entries) != n+1 {
		t.Errorf("ls / has %d entries, want %d", len(entries.Entries), n+1)
	}
}
