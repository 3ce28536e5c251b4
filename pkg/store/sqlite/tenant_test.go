package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/plumbhq/plumb/pkg/store"
)

// TestTenantMigrationKeepsRowsAsDefault: a database written before
// tenancy (schema version 2) opens with its threads owned by "default".
func TestTenantMigrationKeepsRowsAsDefault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`CREATE TABLE schema_version (version INTEGER NOT NULL)`, `INSERT INTO schema_version (version) VALUES (2)`,
		migrations[0], migrations[1], `INSERT INTO threads (id, created_at, updated_at) VALUES ('old', 1, 1)`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s := open(t, path, Options{})
	th, err := s.Thread(context.Background(), "old")
	if err != nil || th.Tenant != store.DefaultTenant {
		t.Fatalf("old thread tenant %q, %v", th.Tenant, err)
	}
	list, _, err := s.ListThreads(context.Background(), store.ListQuery{Tenant: store.DefaultTenant})
	if err != nil || len(list) != 1 {
		t.Fatalf("default tenant lists %d threads, %v", len(list), err)
	}
}
