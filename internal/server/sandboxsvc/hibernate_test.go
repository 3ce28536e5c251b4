package sandboxsvc_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/snapshot"
)

// Through the API, a hibernated box leaves its slot of max_sandboxes to a
// create; a call on it while the worker is full is RESOURCE_EXHAUSTED
// quota_exceeded with the ErrorInfo limit max_sandboxes, and it stays
// hibernated; once there is room the call wakes it.
func TestWakeOnAFullWorkerThroughTheAPI(t *testing.T) {
	store, err := snapshot.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo, err := snapshot.NewRepo(store, 0)
	if err != nil {
		t.Fatal(err)
	}
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{Snapshots: repo, MaxSandboxes: 1})
	c := wk.Client
	base, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ctx := metadata.AppendToOutgoingContext(base, tenant.MetadataKey, "acme")
	run := func(id, cmd string) (*plumbv1.ExecuteResponse, error) {
		return c.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: cmd}})
	}

	a, err := c.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := a.GetSandbox().GetId()
	if _, err := run(id, "echo kept > /workspace/f"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SuspendSandbox(ctx, &plumbv1.SuspendSandboxRequest{SandboxId: id, Mode: plumbv1.SuspendMode_SUSPEND_MODE_HIBERNATE}); err != nil {
		t.Fatal(err)
	}
	b, err := c.CreateSandbox(ctx, &plumbv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("a create beside a hibernated box under max_sandboxes = 1: %v", err)
	}
	_, err = run(id, "true")
	wantTenantQuota(t, err, id, sandbox.LimitMaxSandboxes) // the message names the box
	got, err := c.GetSandbox(ctx, &plumbv1.GetSandboxRequest{SandboxId: id})
	if err != nil || got.GetSandbox().GetState() != plumbv1.SandboxState_SANDBOX_STATE_HIBERNATED {
		t.Fatalf("after the refused wake: %v %v", got, err)
	}
	if _, err := c.DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: b.GetSandbox().GetId()}); err != nil {
		t.Fatal(err)
	}
	res, err := run(id, "cat /workspace/f")
	if err != nil || res.GetResult().GetOutput() != "kept\n" {
		t.Fatalf("the woken box: %v %v", res, err)
	}
}
