package storefs

import (
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
		db, _ := openDB(t)
		return &backendtest.Harness{Backend: newBackend(t, db, "conformance"), Caps: []backendtest.Capability{backendtest.Media}}
	})
}
