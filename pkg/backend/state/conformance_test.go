package state

import (
	"testing"

	"github.com/plumbhq/plumb/pkg/backend/backendtest"
)

// TestConformance runs the shared suite. State has media reads; it has no
// symlinks, modes, special files or execute (docs/file-tools.md §1 allows skipping those).
func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) *backendtest.Harness {
		return &backendtest.Harness{Backend: New(), Caps: []backendtest.Capability{backendtest.Media}, InProcess: true}
	})
}
