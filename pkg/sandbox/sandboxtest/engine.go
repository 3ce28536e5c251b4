package sandboxtest

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest/xengine"
)

// ExperimentalEngine starts a private dockerd with experimental features
// on and the runsc runtime the shared engine has registered
// (xengine.Start), and returns a client of it and the busybox test image
// imported into it. When t ends it is stopped and nothing of it is left
// (its log is printed if t failed). Without dockerd or a runsc runtime on
// the shared engine the test fails under CI=true and is skipped otherwise.
func ExperimentalEngine(t testing.TB, shared *client.Client) (*client.Client, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path, args, ok, err := xengine.Runsc(ctx, shared)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		if os.Getenv("CI") == "true" {
			t.Fatal("the shared engine has no runsc runtime under CI=true (scripts/test-deps.sh registers it)")
		}
		t.Skip("the shared engine has no runsc runtime (scripts/test-deps.sh registers it)")
	}
	// The host's interfaces are not the private engine's to change: the
	// machine's engine keeps its bridge.
	_, bridgeErr := net.InterfaceByName("docker0")
	e, err := xengine.Start(ctx, path, args)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("experimental engine's log (last 4 KiB):\n%s", e.LogTail())
		}
		if err := e.Stop(); err != nil {
			t.Error(err)
		}
		if _, err := net.InterfaceByName("docker0"); bridgeErr == nil && err != nil {
			t.Errorf("the host's docker0 is gone after the experimental engine: %v", err)
		}
	})
	return e.Client, e.Image
}
