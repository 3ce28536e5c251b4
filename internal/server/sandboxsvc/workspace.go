package sandboxsvc

import (
	"context"
	"fmt"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/snapshot"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Snapshots and suspend (docs/workspaces.md): tenancy is checked here for
// sandboxes (own) and in the snapshot repo for snapshots (another tenant's
// id is not found).

func summaryToPB(s snapshot.Summary) *plumbv1.Snapshot {
	out := &plumbv1.Snapshot{
		Id: s.ID, SandboxId: s.Sandbox, Template: s.Template, SizeBytes: s.Size, StoredBytes: s.StoredBytes,
		ParentId: s.Parent, Corrupt: s.Corrupt,
	}
	if !s.Created.IsZero() {
		out.CreatedAt = timestamppb.New(s.Created)
	}
	return out
}

func manifestToPB(m *snapshot.Manifest) *plumbv1.Snapshot {
	return summaryToPB(snapshot.Summary{ID: m.ID, Sandbox: m.Sandbox, Template: m.Template, Parent: m.Parent, Created: m.Created, Size: m.Size, StoredBytes: m.StoredBytes})
}

// SnapshotSandbox captures a sandbox's workspace.
func (s *Service) SnapshotSandbox(ctx context.Context, req *plumbv1.SnapshotSandboxRequest) (*plumbv1.SnapshotSandboxResponse, error) {
	if err := s.own(ctx, req.GetSandboxId()); err != nil {
		return nil, s.fail("SnapshotSandbox", err)
	}
	m, err := s.m.Snapshot(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.fail("SnapshotSandbox", err)
	}
	return &plumbv1.SnapshotSandboxResponse{Snapshot: manifestToPB(m)}, nil
}

// ListSnapshots lists the caller's snapshots.
func (s *Service) ListSnapshots(ctx context.Context, _ *plumbv1.ListSnapshotsRequest) (*plumbv1.ListSnapshotsResponse, error) {
	l, err := s.m.ListSnapshots(ctx, tenant.From(ctx))
	if err != nil {
		return nil, s.fail("ListSnapshots", err)
	}
	out := &plumbv1.ListSnapshotsResponse{}
	for _, x := range l {
		out.Snapshots = append(out.Snapshots, summaryToPB(x))
	}
	return out, nil
}

// DeleteSnapshot removes one of the caller's snapshots.
func (s *Service) DeleteSnapshot(ctx context.Context, req *plumbv1.DeleteSnapshotRequest) (*plumbv1.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, s.fail("DeleteSnapshot", &sandbox.Error{Code: sandbox.CodeInvalid, Field: "snapshot_id", Message: "snapshot_id is required"})
	}
	if err := s.m.DeleteSnapshot(ctx, tenant.From(ctx), req.GetSnapshotId()); err != nil {
		return nil, s.fail("DeleteSnapshot", err)
	}
	return &plumbv1.DeleteSnapshotResponse{}, nil
}

var suspendModes = map[plumbv1.SuspendMode]sandbox.SuspendMode{
	plumbv1.SuspendMode_SUSPEND_MODE_UNSPECIFIED: sandbox.SuspendPause,
	plumbv1.SuspendMode_SUSPEND_MODE_PAUSE:       sandbox.SuspendPause,
	plumbv1.SuspendMode_SUSPEND_MODE_HIBERNATE:   sandbox.SuspendHibernate,
}

// SuspendSandbox pauses or hibernates a sandbox.
func (s *Service) SuspendSandbox(ctx context.Context, req *plumbv1.SuspendSandboxRequest) (*plumbv1.SuspendSandboxResponse, error) {
	mode, ok := suspendModes[req.GetMode()]
	if !ok {
		return nil, s.fail("SuspendSandbox", &sandbox.Error{Code: sandbox.CodeInvalid, Field: "mode", Message: fmt.Sprintf("unknown suspend mode %d", req.GetMode())})
	}
	if err := s.own(ctx, req.GetSandboxId()); err != nil {
		return nil, s.fail("SuspendSandbox", err)
	}
	res, err := s.m.Suspend(ctx, req.GetSandboxId(), mode)
	if err != nil {
		return nil, s.fail("SuspendSandbox", err)
	}
	return &plumbv1.SuspendSandboxResponse{Sandbox: sandboxToPB(res.Info), ProcessesKept: res.ProcessesKept, SnapshotId: res.Snapshot}, nil
}

// ResumeSandbox wakes a suspended sandbox.
func (s *Service) ResumeSandbox(ctx context.Context, req *plumbv1.ResumeSandboxRequest) (*plumbv1.ResumeSandboxResponse, error) {
	if err := s.own(ctx, req.GetSandboxId()); err != nil {
		return nil, s.fail("ResumeSandbox", err)
	}
	info, err := s.m.Resume(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.fail("ResumeSandbox", err)
	}
	return &plumbv1.ResumeSandboxResponse{Sandbox: sandboxToPB(info)}, nil
}
