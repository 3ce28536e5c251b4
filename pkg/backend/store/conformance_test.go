package store

import (
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend/backendtest"
)

// TestConformance runs the shared suite on a real SQLite file. Store has
// media reads; it has no symlinks, modes, special files or execute.
//
// InProcess is left false although the Store runs in this process: H07
// bounds cumulative allocation, and the SQLite driver returns every chunk
// in a fresh slice, so a streaming read allocates what it streams while
// holding one chunk at a time. TestReadMemory bounds the live heap of the
// same reads instead.
func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) *backendtest.Harness {
		skipEmptyDirCases(t)
		db, _ := openDB(t)
		return &backendtest.Harness{Backend: newBackend(t, db, "conformance"), Caps: []backendtest.Capability{backendtest.Media}}
	})
}

// skipEmptyDirCases skips the cases that need a directory to outlive its
// last file. State and Store have no directory entries: §4 says a
// directory exists iff some key lies under it, so after deleting /d/x the
// directory /d is gone and deleting it is file_not_found. backendtest has
// no capability tag for empty directories yet; until it does, the case is
// skipped here, by name, with this reason.
func skipEmptyDirCases(t *testing.T) {
	if strings.HasSuffix(t.Name(), "/X11_delete_counts") {
		t.Skip("§4: State/Store directories exist only while a key lies under them; there are no empty directories")
	}
}
