package storefs

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
)

// TestDeleteModifiedBefore: files of every namespace modified before the
// cutoff go, with their content (chunks), in batches of limit; newer ones
// stay.
func TestDeleteModifiedBefore(t *testing.T) {
	db, _ := openDB(t)
	a, b := newBackend(t, db, "acme", "memories"), newBackend(t, db, "beta")
	big := strings.Repeat("x", 3*ChunkBytes+10)
	for i := range 3 {
		if _, err := a.Write(ctx, fmt.Sprintf("/a%d.txt", i), []byte(big)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Write(ctx, "/b.txt", []byte("small")); err != nil {
		t.Fatal(err)
	}
	if n, err := db.DeleteModifiedBefore(ctx, time.Now().Add(-time.Hour), 10); err != nil || n != 0 {
		t.Fatalf("DeleteModifiedBefore(an hour ago) = %d, %v; want 0", n, err)
	}
	total := 0
	for range 10 {
		n, err := db.DeleteModifiedBefore(ctx, time.Now().Add(time.Hour), 3)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if n > 3 {
			t.Fatalf("a batch of limit 3 deleted %d", n)
		}
		total += n
	}
	if total != 4 {
		t.Fatalf("deleted %d files; want 4", total)
	}
	var chunks int
	if err := db.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM store_chunks`).Scan(&chunks); err != nil || chunks != 0 {
		t.Fatalf("%d chunks left, %v; want none", chunks, err)
	}
	if _, err := a.Read(ctx, backend.ReadRequest{Path: "/a0.txt"}); err == nil {
		t.Fatal("an expired file still reads")
	}
}
