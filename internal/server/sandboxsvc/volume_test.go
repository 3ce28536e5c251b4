package sandboxsvc_test

import (
	"context"
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

// Forks and named volumes through the API: every status a client can
// meet, with its reason and the field it names.
func TestForksAndVolumesThroughTheAPI(t *testing.T) {
	store, err := snapshot.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo, err := snapshot.NewRepo(store, 0)
	if err != nil {
		t.Fatal(err)
	}
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{Snapshots: repo, Volumes: sandbox.VolumeConfig{PerTenantBytes: 24 << 20}})
	c := wk.Client
	base, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	as := func(name string) context.Context {
		return metadata.AppendToOutgoingContext(base, tenant.MetadataKey, name)
	}
	acme, beta := as("acme"), as("beta")
	field := func(err error) string {
		if vs := pbconv.FieldViolations(err); len(vs) == 1 {
			return vs[0].Field
		}
		return ""
	}

	vol, err := c.CreateVolume(acme, &plumbv1.CreateVolumeRequest{Name: "data", SizeBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	vid := vol.GetVolume().GetId()
	sb, err := c.CreateSandbox(acme, &plumbv1.CreateSandboxRequest{Volumes: []*plumbv1.VolumeMount{{Name: "data", MountPath: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.GetSandbox().GetId()
	if vs := sb.GetSandbox().GetVolumes(); len(vs) != 1 || vs[0].GetName() != "data" || vs[0].GetMountPath() != "/data" {
		t.Errorf("the sandbox's volumes: %v", vs)
	}
	if _, err := c.Execute(acme, &plumbv1.ExecuteRequest{SandboxId: id, Command: &plumbv1.Command{Command: "echo w > /workspace/w; echo v > /data/v"}}); err != nil {
		t.Fatal(err)
	}
	snap, err := c.SnapshotSandbox(acme, &plumbv1.SnapshotSandboxRequest{SandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	sid := snap.GetSnapshot().GetId()
	if snap.GetSnapshot().GetVolumesIncluded() {
		t.Error("a snapshot says it includes volumes")
	}

	for _, tt := range []struct {
		name   string
		call   func() error
		code   codes.Code
		reason sandbox.Code
		field  string
	}{
		{"volume of another tenant, by name", func() error {
			_, err := c.CreateSandbox(beta, &plumbv1.CreateSandboxRequest{Volumes: []*plumbv1.VolumeMount{{Name: "data", MountPath: "/data"}}})
			return err
		}, codes.NotFound, sandbox.CodeVolumeNotFound, "volumes[0].name"},
		{"delete another tenant's volume", func() error {
			_, err := c.DeleteVolume(beta, &plumbv1.DeleteVolumeRequest{Name: vid})
			return err
		}, codes.NotFound, sandbox.CodeVolumeNotFound, ""},
		{"delete a volume in use", func() error {
			_, err := c.DeleteVolume(acme, &plumbv1.DeleteVolumeRequest{Name: "data"})
			return err
		}, codes.FailedPrecondition, sandbox.CodeVolumeInUse, ""},
		{"same name twice", func() error {
			_, err := c.CreateVolume(acme, &plumbv1.CreateVolumeRequest{Name: "data", SizeBytes: 4 << 20})
			return err
		}, codes.AlreadyExists, sandbox.CodeVolumeExists, ""},
		{"over the tenant's volume quota", func() error {
			_, err := c.CreateVolume(acme, &plumbv1.CreateVolumeRequest{Name: "more", SizeBytes: 16 << 20})
			return err
		}, codes.ResourceExhausted, sandbox.CodeQuota, ""},
		{"bad volume name", func() error {
			_, err := c.CreateVolume(acme, &plumbv1.CreateVolumeRequest{Name: "../x"})
			return err
		}, codes.InvalidArgument, sandbox.CodeInvalid, "name"},
		{"negative size", func() error {
			_, err := c.CreateVolume(acme, &plumbv1.CreateVolumeRequest{Name: "neg", SizeBytes: -1})
			return err
		}, codes.InvalidArgument, sandbox.CodeInvalid, "size_bytes"},
		{"mount over a system directory", func() error {
			_, err := c.CreateSandbox(acme, &plumbv1.CreateSandboxRequest{Volumes: []*plumbv1.VolumeMount{{Name: "data", MountPath: "/usr/bin"}}})
			return err
		}, codes.InvalidArgument, sandbox.CodeInvalid, "volumes[0].mount_path"},
		{"fork of another tenant's snapshot", func() error {
			_, err := c.ForkSandbox(beta, &plumbv1.ForkSandboxRequest{SnapshotId: sid, Count: 2})
			return err
		}, codes.NotFound, sandbox.CodeSnapshotNotFound, ""},
		{"fork count 0", func() error {
			_, err := c.ForkSandbox(acme, &plumbv1.ForkSandboxRequest{SnapshotId: sid})
			return err
		}, codes.InvalidArgument, sandbox.CodeInvalid, "count"},
		{"fork with a mount over the workspace", func() error {
			_, err := c.ForkSandbox(acme, &plumbv1.ForkSandboxRequest{SnapshotId: sid, Count: 1, Sandbox: &plumbv1.CreateSandboxRequest{
				Volumes: []*plumbv1.VolumeMount{{Name: "data", MountPath: "/workspace/v"}}}})
			return err
		}, codes.InvalidArgument, sandbox.CodeInvalid, "sandbox.volumes[0].mount_path"},
		{"fork with a bad resource", func() error {
			_, err := c.ForkSandbox(acme, &plumbv1.ForkSandboxRequest{SnapshotId: sid, Count: 1, Sandbox: &plumbv1.CreateSandboxRequest{Resources: &plumbv1.Resources{Pids: 3}}})
			return err
		}, codes.InvalidArgument, sandbox.CodeInvalid, "sandbox.resources.pids"},
		{"fork naming another snapshot", func() error {
			_, err := c.ForkSandbox(acme, &plumbv1.ForkSandboxRequest{SnapshotId: sid, Count: 1, Sandbox: &plumbv1.CreateSandboxRequest{SnapshotId: "snap-000000000000000000000000"}})
			return err
		}, codes.InvalidArgument, sandbox.CodeInvalid, "sandbox.snapshot_id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := len(wk.Manager.List(nil))
			err := tt.call()
			if status.Code(err) != tt.code || pbconv.Reason(err) != string(tt.reason) || field(err) != tt.field {
				t.Errorf("got %v (reason %q, field %q), want %s %q %q", err, pbconv.Reason(err), field(err), tt.code, tt.reason, tt.field)
			}
			if len(wk.Manager.List(nil)) != n {
				t.Error("a refused call left a sandbox")
			}
		})
	}

	forks, err := c.ForkSandbox(acme, &plumbv1.ForkSandboxRequest{SnapshotId: sid, Count: 2, Sandbox: &plumbv1.CreateSandboxRequest{
		Volumes: []*plumbv1.VolumeMount{{Name: vid, MountPath: "/mnt/v", ReadOnly: true}}}})
	if err != nil || len(forks.GetSandboxes()) != 2 {
		t.Fatalf("fork: %v %v", forks, err)
	}
	for _, f := range forks.GetSandboxes() {
		out, err := c.Execute(acme, &plumbv1.ExecuteRequest{SandboxId: f.GetId(), Command: &plumbv1.Command{Command: "cat /workspace/w /mnt/v/v"}})
		if err != nil || string(out.GetResult().GetOutput()) != "w\nv\n" {
			t.Errorf("fork %s: %v %v", f.GetId(), out, err)
		}
	}
	l, err := c.ListVolumes(acme, &plumbv1.ListVolumesRequest{})
	if err != nil || len(l.GetVolumes()) != 1 || len(l.GetVolumes()[0].GetSandboxIds()) != 3 {
		t.Errorf("list: %v %v", l, err)
	}
	if l, err := c.ListVolumes(beta, &plumbv1.ListVolumesRequest{}); err != nil || len(l.GetVolumes()) != 0 {
		t.Errorf("another tenant lists %v %v", l, err)
	}
	for _, s := range append(forks.GetSandboxes(), sb.GetSandbox()) {
		if _, err := c.DeleteSandbox(acme, &plumbv1.DeleteSandboxRequest{SandboxId: s.GetId()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.DeleteVolume(acme, &plumbv1.DeleteVolumeRequest{Name: "data"}); err != nil {
		t.Errorf("delete the unused volume: %v", err)
	}
}
