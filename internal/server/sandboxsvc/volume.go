package sandboxsvc

import (
	"context"
	"errors"
	"fmt"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Forks and named volumes (docs/workspaces.md): tenancy is checked in the
// manager (a volume or snapshot of another tenant is not found).

func mountsToPB(ms []sandbox.VolumeMount) []*plumbv1.VolumeMount {
	var out []*plumbv1.VolumeMount
	for _, m := range ms {
		out = append(out, &plumbv1.VolumeMount{Name: m.Name, MountPath: m.MountPath, ReadOnly: m.ReadOnly})
	}
	return out
}

func volumeToPB(v sandbox.Volume) *plumbv1.Volume {
	return &plumbv1.Volume{
		Id: v.ID, Name: v.Name, Worker: v.Worker, SizeBytes: v.SizeBytes,
		CreatedAt: timestamppb.New(v.CreatedAt), SandboxIds: v.Sandboxes,
	}
}

// ForkSandbox creates count sandboxes from one snapshot.
func (s *Service) ForkSandbox(ctx context.Context, req *plumbv1.ForkSandboxRequest) (*plumbv1.ForkSandboxResponse, error) {
	sreq := req.GetSandbox()
	if sreq == nil {
		sreq = &plumbv1.CreateSandboxRequest{}
	}
	if id := sreq.GetSnapshotId(); id != "" && id != req.GetSnapshotId() {
		return nil, s.fail("ForkSandbox", &sandbox.Error{Code: sandbox.CodeInvalid, Field: "sandbox.snapshot_id", Message: "sandbox.snapshot_id must be empty or the fork's snapshot_id"})
	}
	if req.GetSnapshotId() == "" {
		return nil, s.fail("ForkSandbox", &sandbox.Error{Code: sandbox.CodeInvalid, Field: "snapshot_id", Message: "snapshot_id is required"})
	}
	c := proto.CloneOf(sreq)
	c.SnapshotId = req.GetSnapshotId()
	spec, err := createSpec(ctx, c)
	if err != nil {
		if sandbox.CodeOf(err) == sandbox.CodeInvalid && fieldOf(err) != "snapshot_id" {
			err = requestField(err, "sandbox.")
		}
		return nil, s.fail("ForkSandbox", err)
	}
	infos, err := s.m.Fork(ctx, spec, int(req.GetCount()))
	if err != nil {
		if f := fieldOf(err); f != "" && f != "count" && f != "snapshot_id" {
			err = requestField(err, "sandbox.")
		}
		return nil, s.fail("ForkSandbox", err)
	}
	out := &plumbv1.ForkSandboxResponse{}
	for _, i := range infos {
		out.Sandboxes = append(out.Sandboxes, sandboxToPB(i))
	}
	return out, nil
}

func fieldOf(err error) string {
	var se *sandbox.Error
	if errors.As(err, &se) {
		return se.Field
	}
	return ""
}

// CreateVolume creates a named volume of the caller's tenant.
func (s *Service) CreateVolume(ctx context.Context, req *plumbv1.CreateVolumeRequest) (*plumbv1.CreateVolumeResponse, error) {
	if req.GetSizeBytes() < 0 {
		return nil, s.fail("CreateVolume", &sandbox.Error{Code: sandbox.CodeInvalid, Field: "size_bytes", Message: fmt.Sprintf("size_bytes %d is negative", req.GetSizeBytes())})
	}
	v, err := s.m.CreateVolume(ctx, tenant.From(ctx), req.GetName(), req.GetSizeBytes())
	if err != nil {
		return nil, s.fail("CreateVolume", err)
	}
	return &plumbv1.CreateVolumeResponse{Volume: volumeToPB(v)}, nil
}

// ListVolumes lists the caller's volumes on this worker.
func (s *Service) ListVolumes(ctx context.Context, _ *plumbv1.ListVolumesRequest) (*plumbv1.ListVolumesResponse, error) {
	out := &plumbv1.ListVolumesResponse{}
	for _, v := range s.m.ListVolumes(tenant.From(ctx)) {
		out.Volumes = append(out.Volumes, volumeToPB(v))
	}
	return out, nil
}

// DeleteVolume removes one of the caller's volumes.
func (s *Service) DeleteVolume(ctx context.Context, req *plumbv1.DeleteVolumeRequest) (*plumbv1.DeleteVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, s.fail("DeleteVolume", &sandbox.Error{Code: sandbox.CodeInvalid, Field: "name", Message: "name is required"})
	}
	if err := s.m.DeleteVolume(ctx, tenant.From(ctx), req.GetName()); err != nil {
		return nil, s.fail("DeleteVolume", err)
	}
	return &plumbv1.DeleteVolumeResponse{}, nil
}
