//go:build linux && (amd64 || arm64)

package fileops_test

import (
	"testing"

	"github.com/plumbhq/plumb/pkg/backend/backendtest"
	"github.com/plumbhq/plumb/pkg/backend/fileops"
)

// TestConformanceRawCalls runs the suite as the sandbox agent runs the
// engine: no fsync, and the fast path's calls made raw
// (fileops.UseRawCalls). The observable behaviour is the same.
func TestConformanceRawCalls(t *testing.T) {
	fileops.SetRawCalls(true)
	t.Cleanup(func() { fileops.SetRawCalls(false) })
	backendtest.Run(t, func(t *testing.T) *backendtest.Harness {
		h, _ := hostHarness(t, fileops.WithSync(false))
		return h
	})
}
