package sandboxsvc_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/snapshot"
)

// Snapshots through the API: taken, listed, restored, suspended and woken
// for their tenant; another tenant gets NOT_FOUND; bad input is
// INVALID_ARGUMENT naming the field; a corrupt snapshot is DATA_LOSS and
// creates nothing; over the quota is RESOURCE_EXHAUSTED naming it.
func TestSnapshotsThroughTheAPI(t *testing.T) {
	dir := t.TempDir()
	store, err := snapshot.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := snapshot.NewRepo(store, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{Snapshots: repo})
	c := wk.Client
	base, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	as := func(name string) context.Context {
		return metadata.AppendToOutgoingContext(base, tenant.MetadataKey, name)
	}
	acme, beta := as("acme"), as("beta")
	code := func(err error) codes.Code { return status.Code(err) }

	sb, err := c.CreateSandbox(acme, &plumbv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.GetSandbox().GetId()
	if _, err := c.Execute(acme, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "echo v1 > /workspace/f"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SnapshotSandbox(beta, &plumbv1.SnapshotSandboxRequest{SandboxId: id}); code(err) != codes.NotFound {
		t.Errorf("another tenant snapshots: %v", err)
	}
	snap, err := c.SnapshotSandbox(acme, &plumbv1.SnapshotSandboxRequest{SandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	sid := snap.GetSnapshot().GetId()
	if snap.GetSnapshot().GetSizeBytes() != 3 || snap.GetSnapshot().GetSandboxId() != id {
		t.Errorf("snapshot: %v", snap.GetSnapshot())
	}
	if l, err := c.ListSnapshots(beta, &plumbv1.ListSnapshotsRequest{}); err != nil || len(l.GetSnapshots()) != 0 {
		t.Errorf("another tenant lists %v (%v)", l, err)
	}
	if l, err := c.ListSnapshots(acme, &plumbv1.ListSnapshotsRequest{}); err != nil || len(l.GetSnapshots()) != 1 {
		t.Errorf("list %v (%v)", l, err)
	}
	if _, err := c.CreateSandbox(beta, &plumbv1.CreateSandboxRequest{SnapshotId: sid}); code(err) != codes.NotFound {
		t.Errorf("another tenant restores: %v", err)
	}
	_, err = c.CreateSandbox(acme, &plumbv1.CreateSandboxRequest{SnapshotId: "../etc"})
	if code(err) != codes.InvalidArgument || len(pbconv.FieldViolations(err)) != 1 || pbconv.FieldViolations(err)[0].Field != "snapshot_id" {
		t.Errorf("a malformed snapshot id: %v", err)
	}
	if _, err := c.SuspendSandbox(acme, &plumbv1.SuspendSandboxRequest{SandboxId: id, Mode: 99}); code(err) != codes.InvalidArgument {
		t.Errorf("an unknown mode: %v", err)
	}
	if _, err := c.SuspendSandbox(beta, &plumbv1.SuspendSandboxRequest{SandboxId: id, Mode: plumbv1.SuspendMode_SUSPEND_MODE_HIBERNATE}); code(err) != codes.NotFound {
		t.Errorf("another tenant suspends: %v", err)
	}
	res, err := c.SuspendSandbox(acme, &plumbv1.SuspendSandboxRequest{SandboxId: id, Mode: plumbv1.SuspendMode_SUSPEND_MODE_HIBERNATE})
	if err != nil {
		t.Fatal(err)
	}
	if res.GetProcessesKept() || res.GetSandbox().GetState() != plumbv1.SandboxState_SANDBOX_STATE_HIBERNATED || res.GetSnapshotId() == "" {
		t.Errorf("hibernate: %v", res)
	}
	out, err := c.Execute(acme, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "cat /workspace/f"}})
	if err != nil || string(out.GetResult().GetOutput()) != "v1\n" {
		t.Errorf("execute on a hibernated box: %v %v", out, err)
	}
	res, err = c.SuspendSandbox(acme, &plumbv1.SuspendSandboxRequest{SandboxId: id, Mode: plumbv1.SuspendMode_SUSPEND_MODE_PAUSE})
	if err != nil || !res.GetProcessesKept() || res.GetSandbox().GetState() != plumbv1.SandboxState_SANDBOX_STATE_PAUSED {
		t.Errorf("pause: %v %v", res, err)
	}
	if r, err := c.ResumeSandbox(acme, &plumbv1.ResumeSandboxRequest{SandboxId: id}); err != nil || r.GetSandbox().GetState() != plumbv1.SandboxState_SANDBOX_STATE_RUNNING {
		t.Errorf("resume: %v %v", r, err)
	}

	// Over the quota: 64 MiB of random bytes do not compress.
	if _, err := c.Execute(acme, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "dd if=/dev/urandom of=/workspace/big bs=1048576 count=70 2>/dev/null"}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.SnapshotSandbox(acme, &plumbv1.SnapshotSandboxRequest{SandboxId: id})
	if code(err) != codes.ResourceExhausted || pbconv.Reason(err) != string(sandbox.CodeQuota) {
		t.Errorf("over the snapshot quota: %v", err)
	}

	// Corrupt every chunk: a restore is DATA_LOSS and creates nothing.
	_ = filepath.WalkDir(filepath.Join(dir, "chunks"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			b[len(b)-1] ^= 1
			return os.WriteFile(p, b, 0o600)
		}
		return err
	})
	n := len(wk.Manager.List(nil))
	if _, err := c.CreateSandbox(acme, &plumbv1.CreateSandboxRequest{SnapshotId: sid}); code(err) != codes.DataLoss {
		t.Errorf("restore of a corrupt snapshot: %v", err)
	}
	if len(wk.Manager.List(nil)) != n {
		t.Error("a failed restore left a sandbox")
	}
	if _, err := c.DeleteSnapshot(beta, &plumbv1.DeleteSnapshotRequest{SnapshotId: sid}); code(err) != codes.NotFound {
		t.Errorf("another tenant deletes: %v", err)
	}
	for _, s := range []string{sid, res.GetSnapshotId()} {
		_, _ = c.DeleteSnapshot(acme, &plumbv1.DeleteSnapshotRequest{SnapshotId: s})
	}
}
