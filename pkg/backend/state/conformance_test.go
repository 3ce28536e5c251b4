package state

import (
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend/backendtest"
)

// TestConformance runs the shared suite. State has media reads; it has no
// symlinks, modes, special files or execute (§1 allows skipping those).
func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) *backendtest.Harness {
		skipEmptyDirCases(t)
		return &backendtest.Harness{Backend: New(), Caps: []backendtest.Capability{backendtest.Media}, InProcess: true}
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
