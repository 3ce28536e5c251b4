package postgres

import (
	"testing"

	"github.com/plumbhq/plumb/pkg/store"
	"github.com/plumbhq/plumb/pkg/store/postgres/pgtest"
)

// TestTenantMigrationKeepsRowsAsDefault: a database written before
// tenancy (schema version 1) opens with its threads owned by "default".
func TestTenantMigrationKeepsRowsAsDefault(t *testing.T) {
	ctx := hangGuard(t)
	dsn := pgtest.New(t)
	c := conn(t, dsn)
	for _, q := range []string{`CREATE TABLE schema_version (version INTEGER NOT NULL)`, `INSERT INTO schema_version (version) VALUES (1)`,
		migrations[0], `INSERT INTO threads (id, created_at, updated_at) VALUES ('old', 1, 1)`} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s := open(t, dsn, Options{})
	th, err := s.Thread(ctx, "old")
	if err != nil || th.Tenant != store.DefaultTenant {
		t.Fatalf("old thread tenant %q, %v", th.Tenant, err)
	}
	list, _, err := s.ListThreads(ctx, store.ListQuery{Tenant: store.DefaultTenant})
	if err != nil || len(list) != 1 {
		t.Fatalf("default tenant lists %d threads, %v", len(list), err)
	}
}
