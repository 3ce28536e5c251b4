package agentsvc

import (
	"context"
	"fmt"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/preview"
	"github.com/plumbhq/plumb/internal/threadbox"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/pbconv"
)

// Workspace reads a thread's sandbox for a person (*threadbox.Service):
// another tenant's thread is agent.ErrThreadNotFound, a thread without a
// sandbox preview.ErrNoSandbox.
type Workspace interface {
	List(ctx context.Context, threadID, dir string) (string, backend.LsResult, error)
	Read(ctx context.Context, threadID, path string, offset, limit int64) (threadbox.Content, error)
}

// ListThreadFiles implements plumbv1.AgentServiceServer.
func (s *Service) ListThreadFiles(ctx context.Context, req *plumbv1.ListThreadFilesRequest) (*plumbv1.ListThreadFilesResponse, error) {
	if err := requireThreadID(req.GetThreadId()); err != nil {
		return nil, Status(err)
	}
	if s.cfg.Workspace == nil {
		return nil, Status(fmt.Errorf("thread %s: %w (agentd has no sandboxd)", req.GetThreadId(), preview.ErrNoSandbox))
	}
	dir, ls, err := s.cfg.Workspace.List(ctx, req.GetThreadId(), req.GetPath())
	if err != nil {
		return nil, s.status("list thread files", err)
	}
	out := &plumbv1.ListThreadFilesResponse{Path: dir, Entries: make([]*plumbv1.FileInfo, len(ls.Entries))}
	for i, e := range ls.Entries {
		out.Entries[i] = pbconv.FileInfoToPB(e)
	}
	return out, nil
}

// ReadThreadFile implements plumbv1.AgentServiceServer.
func (s *Service) ReadThreadFile(ctx context.Context, req *plumbv1.ReadThreadFileRequest) (*plumbv1.ReadThreadFileResponse, error) {
	if err := requireThreadID(req.GetThreadId()); err != nil {
		return nil, Status(err)
	}
	switch {
	case req.GetPath() == "":
		return nil, Status(InvalidField("path", "path is required"))
	case req.GetOffset() < 0:
		return nil, Status(InvalidField("offset", "offset %d is negative", req.GetOffset()))
	case req.GetLimit() < 0 || req.GetLimit() > threadbox.MaxRead:
		return nil, Status(InvalidField("limit", "limit %d is out of range: want 0 (1 MiB) to %d", req.GetLimit(), threadbox.MaxRead))
	}
	if s.cfg.Workspace == nil {
		return nil, Status(fmt.Errorf("thread %s: %w (agentd has no sandboxd)", req.GetThreadId(), preview.ErrNoSandbox))
	}
	c, err := s.cfg.Workspace.Read(ctx, req.GetThreadId(), req.GetPath(), req.GetOffset(), req.GetLimit())
	if err != nil {
		return nil, s.status("read thread file", err)
	}
	return &plumbv1.ReadThreadFileResponse{Content: c.Bytes, Size: c.Size, More: c.More}, nil
}
