package agentsvc

import (
	"context"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/preview"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/store"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Previews is the preview service the preview RPCs adapt
// (*preview.Service). Its methods act for the context's tenant: another
// tenant's thread is agent.ErrThreadNotFound, its preview
// store.ErrPreviewNotFound.
type Previews interface {
	Create(ctx context.Context, threadID string, port int, ttl time.Duration) (store.Preview, string, error)
	List(ctx context.Context, threadID string) ([]store.Preview, error)
	Revoke(ctx context.Context, id string) error
}

// CreatePreview implements plumbv1.AgentServiceServer.
func (s *Service) CreatePreview(ctx context.Context, req *plumbv1.CreatePreviewRequest) (*plumbv1.CreatePreviewResponse, error) {
	if err := requireThreadID(req.GetThreadId()); err != nil {
		return nil, Status(err)
	}
	if p := req.GetPort(); p < 1 || p > backend.MaxPort {
		return nil, Status(InvalidField("port", "port %d is out of range: want 1 to %d", p, backend.MaxPort))
	}
	var ttl time.Duration
	if req.GetTtl() != nil {
		ttl = req.GetTtl().AsDuration()
		if ttl <= 0 || ttl > preview.MaxTTL {
			return nil, Status(InvalidField("ttl", "ttl %s is out of range: want more than 0 and at most %s", ttl, preview.MaxTTL))
		}
	}
	if s.cfg.Previews == nil {
		return nil, Status(preview.ErrOff)
	}
	p, url, err := s.cfg.Previews.Create(ctx, req.GetThreadId(), int(req.GetPort()), ttl)
	if err != nil {
		return nil, s.status("create preview", err)
	}
	return &plumbv1.CreatePreviewResponse{Preview: previewToPB(p), Url: url}, nil
}

// ListPreviews implements plumbv1.AgentServiceServer.
func (s *Service) ListPreviews(ctx context.Context, req *plumbv1.ListPreviewsRequest) (*plumbv1.ListPreviewsResponse, error) {
	if err := requireThreadID(req.GetThreadId()); err != nil {
		return nil, Status(err)
	}
	if s.cfg.Previews == nil {
		return nil, Status(preview.ErrOff)
	}
	list, err := s.cfg.Previews.List(ctx, req.GetThreadId())
	if err != nil {
		return nil, s.status("list previews", err)
	}
	out := &plumbv1.ListPreviewsResponse{}
	for _, p := range list {
		out.Previews = append(out.Previews, previewToPB(p))
	}
	return out, nil
}

// RevokePreview implements plumbv1.AgentServiceServer.
func (s *Service) RevokePreview(ctx context.Context, req *plumbv1.RevokePreviewRequest) (*plumbv1.RevokePreviewResponse, error) {
	if req.GetPreviewId() == "" {
		return nil, Status(InvalidField("preview_id", "preview_id is required"))
	}
	if s.cfg.Previews == nil {
		return nil, Status(preview.ErrOff)
	}
	if err := s.cfg.Previews.Revoke(ctx, req.GetPreviewId()); err != nil {
		return nil, s.status("revoke preview", err)
	}
	return &plumbv1.RevokePreviewResponse{}, nil
}

func previewToPB(p store.Preview) *plumbv1.Preview {
	return &plumbv1.Preview{
		Id: p.ID, ThreadId: p.ThreadID, Port: int32(p.Port), //nolint:gosec // 1-65535
		CreateTime: timestamppb.New(p.Created), ExpireTime: timestamppb.New(p.Expires), Revoked: p.Revoked,
	}
}
