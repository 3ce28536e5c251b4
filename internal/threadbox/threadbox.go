package threadbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/plumbhq/plumb/internal/preview"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// MaxRead is the most bytes one Read returns.
const MaxRead = 1 << 20

// Shell is the command of a terminal: an interactive shell without a
// pseudo-terminal (the box agent allocates none), its prompt on stderr.
const Shell = "PS1='$ ' exec /bin/sh -i 2>&1"

// Threads reads a thread's record (the thread store).
type Threads interface {
	Thread(ctx context.Context, id string) (agent.Thread, error)
}

// Box is what the service needs of a sandbox (*sandboxclient.Backend).
type Box interface {
	Ls(ctx context.Context, path string) (backend.LsResult, error)
	Download(ctx context.Context, paths []string) ([]backend.DownloadResult, error)
	StartProcess(ctx context.Context, req backend.ProcessRequest) (backend.Process, error)
}

// Boxes opens sandbox id for the tenant in ctx (the fleet's pool).
type Boxes func(ctx context.Context, sandboxID string) (Box, error)

// Service reaches threads' boxes.
type Service struct {
	threads Threads
	boxes   Boxes
	home    string
}

// New returns a service; home is the boxes' workspace (the template's
// working dir), listed when a request names no path.
func New(threads Threads, boxes Boxes, home string) (*Service, error) {
	if threads == nil || boxes == nil {
		return nil, errors.New("threadbox: a thread store and a sandbox pool are required")
	}
	if home == "" {
		home = "/workspace"
	}
	return &Service{threads: threads, boxes: boxes, home: home}, nil
}

// Home is the workspace directory.
func (s *Service) Home() string { return s.home }

// box returns the box of the caller's thread id.
func (s *Service) box(ctx context.Context, id string) (Box, error) {
	t, err := s.threads.Thread(ctx, id)
	if err != nil {
		return nil, err
	}
	if tenant.Norm(t.Tenant) != tenant.From(ctx) {
		return nil, fmt.Errorf("thread %s: %w", id, agent.ErrThreadNotFound)
	}
	if t.SandboxID == "" {
		return nil, fmt.Errorf("thread %s: %w; run it with a sandbox backend first", id, preview.ErrNoSandbox)
	}
	return s.boxes(tenant.With(ctx, tenant.Norm(t.Tenant)), t.SandboxID)
}

// path normalizes p ("" = the workspace).
func (s *Service) path(p string) (string, error) {
	if p == "" {
		return s.home, nil
	}
	return vpath.Normalize(p)
}

// List lists directory dir of thread id's box ("" = the workspace). It
// returns the directory listed.
func (s *Service) List(ctx context.Context, id, dir string) (string, backend.LsResult, error) {
	p, err := s.path(dir)
	if err != nil {
		return "", backend.LsResult{}, err
	}
	b, err := s.box(ctx, id)
	if err != nil {
		return "", backend.LsResult{}, err
	}
	r, err := b.Ls(ctx, p)
	return p, r, err
}

// Content is part of a file.
type Content struct {
	// Bytes from the offset asked for.
	Bytes []byte
	// Size of the whole file.
	Size int64
	// More bytes follow.
	More bool
}

// Read returns up to limit bytes (0 or more than MaxRead = MaxRead) of
// file path in thread id's box from offset.
func (s *Service) Read(ctx context.Context, id, path string, offset, limit int64) (Content, error) {
	if offset < 0 {
		return Content{}, backend.Errorf(backend.CodeInvalidArgument, path, "offset %d is negative", offset)
	}
	if limit <= 0 || limit > MaxRead {
		limit = MaxRead
	}
	p, err := vpath.Normalize(path)
	if err != nil {
		return Content{}, err
	}
	b, err := s.box(ctx, id)
	if err != nil {
		return Content{}, err
	}
	rs, err := b.Download(ctx, []string{p})
	if err != nil {
		return Content{}, err
	}
	if len(rs) != 1 {
		return Content{}, backend.Errorf(backend.CodeUnavailable, p, "the worker answered %d results for one file", len(rs))
	}
	if rs[0].Err != nil {
		return Content{}, rs[0].Err
	}
	all := rs[0].Content
	size := int64(len(all))
	start := min(offset, size)
	end := min(start+limit, size)
	return Content{Bytes: all[start:end], Size: size, More: end < size}, nil
}

// Terminal starts the interactive shell of a terminal in thread id's box,
// as the sandbox user, in the workspace. ctx bounds the start only; the
// shell lives until Close.
func (s *Service) Terminal(ctx context.Context, id string) (backend.Process, error) {
	b, err := s.box(ctx, id)
	if err != nil {
		return nil, err
	}
	return b.StartProcess(ctx, backend.ProcessRequest{Command: Shell, Env: map[string]string{"TERM": "dumb"}})
}
