package composite

import (
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/backendtest"
	"github.com/plumbhq/plumb/pkg/backend/state"
)

// The suite runs twice (docs/file-tools.md §1): against the default backend, with routes
// mounted that the cases must not notice, and mirrored under a route
// prefix. Both sides are State backends, in memory.

func mirrorRoutes() map[string]backend.Backend {
	return map[string]backend.Backend{
		"/memories/":         state.New(),
		"/memories/private/": state.New(),
		"/cache/":            state.New(),
	}
}

func TestConformanceDefault(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) *backendtest.Harness {
		c, err := New(state.New(), mirrorRoutes(), "/")
		if err != nil {
			t.Fatal(err)
		}
		return &backendtest.Harness{
			Backend: c, Caps: []backendtest.Capability{backendtest.Media}, InProcess: true,
			Ignore: func(p string) bool { return p == "/memories/" || p == "/cache/" },
		}
	})
}

// TestConformanceMirrored runs the cases under /cache, a plain route, and
// under /memories, a route with another route nested in it (whose mount
// point the cases must not notice).
func TestConformanceMirrored(t *testing.T) {
	for _, prefix := range []string{"/cache", "/memories"} {
		t.Run(prefix, func(t *testing.T) {
			backendtest.Run(t, func(t *testing.T) *backendtest.Harness {
				c, err := New(state.New(), mirrorRoutes(), "/")
				if err != nil {
					t.Fatal(err)
				}
				return &backendtest.Harness{
					Backend: c, Caps: []backendtest.Capability{backendtest.Media}, InProcess: true,
					Prefix: prefix,
					Ignore: func(p string) bool { return p == "/memories/private/" },
				}
			})
		})
	}
}
