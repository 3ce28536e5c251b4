// Package sandboxclient is the Sandbox backend: a gRPC client of
// plumb.v1.SandboxService that runs file operations and commands in one
// sandbox on a sandboxd worker. It implements backend.Backend and
// backend.Executor with the same semantics as every other backend (the
// conformance suite proves it against a real container).
//
// It holds no file semantics of its own; the in-container agent runs the
// shared file engine. Paths are still normalized here first, so a bad path
// never costs a round trip.
package sandboxclient

import (
	"context"
	"errors"
	"io"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
	"github.com/plumbhq/plumb/pkg/pbconv"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"google.golang.org/grpc"
)

// Backend runs operations in one sandbox.
type Backend struct {
	c    plumbv1.SandboxServiceClient
	id   string
	home string
}

var (
	_ backend.Backend  = (*Backend)(nil)
	_ backend.Executor = (*Backend)(nil)
	_ backend.Homer    = (*Backend)(nil)
)

// New returns the backend of sandbox id reached through conn; home is the
// sandbox's working dir as a virtual path ("/workspace" when empty; see
// HomeOf).
func New(conn grpc.ClientConnInterface, id, home string) *Backend {
	if home == "" {
		home = "/workspace"
	}
	return &Backend{c: plumbv1.NewSandboxServiceClient(conn), id: id, home: home}
}

// HomeOf is the virtual home of a sandbox: its working dir, or "/" when
// its file operations are rooted at the working dir.
func HomeOf(sb *plumbv1.Sandbox) string {
	if sb.GetFilesRoot() != "" && sb.GetFilesRoot() == sb.GetWorkingDir() {
		return "/"
	}
	return sb.GetWorkingDir()
}

// ID is the sandbox id.
func (b *Backend) ID() string { return b.id }

// Home is the sandbox's working dir.
func (b *Backend) Home() string { return b.home }

// ErrGone matches the error of an operation on a sandbox that no longer
// exists on its worker (it expired or was deleted) or whose container
// died. The operation did not run; a new sandbox is needed.
var ErrGone = errors.New("the sandbox is gone")

// goneError wraps the *backend.Error of a gone sandbox (code
// unavailable) so that it also matches ErrGone.
type goneError struct{ err *backend.Error }

func (e goneError) Error() string { return e.err.Error() }

func (e goneError) Unwrap() error { return e.err }

func (goneError) Is(target error) bool { return target == ErrGone }

// fail converts a gRPC error of an operation on path p ("" for none) into
// a *backend.Error, which also matches ErrGone when the worker has no
// running sandbox of that id. A status carries long paths cut
// (by the worker's status mapping), so the error's Path is restored from p
// when it is p cut.
func fail(p string, err error) error {
	if err == nil {
		return nil
	}
	fe := pbconv.FileError(err)
	if p != "" && fe.Path != p && fe.Path == backend.Clip(p) {
		fe.Path = p
	}
	switch pbconv.Reason(err) {
	case string(sandbox.CodeNotFound), string(sandbox.CodeFailed):
		return goneError{err: fe}
	}
	return fe
}

func norm(p string) (string, error) {
	n, err := vpath.Normalize(p)
	if err != nil {
		return "", err
	}
	return n, nil
}

// Ls lists a directory.
func (b *Backend) Ls(ctx context.Context, path string) (backend.LsResult, error) {
	p, err := norm(path)
	if err != nil {
		return backend.LsResult{}, err
	}
	r, err := b.c.Ls(ctx, &plumbv1.LsRequest{SandboxId: b.id, Path: p})
	if err != nil {
		return backend.LsResult{}, fail(p, err)
	}
	return pbconv.LsFromPB(r), nil
}

// Read reads a window of a file.
func (b *Backend) Read(ctx context.Context, req backend.ReadRequest) (backend.ReadResult, error) {
	p, err := norm(req.Path)
	if err != nil {
		return backend.ReadResult{}, err
	}
	limit := int64(req.Limit)
	r, err := b.c.Read(ctx, &plumbv1.ReadRequest{SandboxId: b.id, Path: p, Offset: int64(req.Offset), Limit: &limit})
	if err != nil {
		return backend.ReadResult{}, fail(p, err)
	}
	return pbconv.ReadFromPB(r), nil
}

// Write writes a file.
func (b *Backend) Write(ctx context.Context, path string, content []byte) (backend.WriteResult, error) {
	p, err := norm(path)
	if err != nil {
		return backend.WriteResult{}, err
	}
	r, err := b.c.Write(ctx, &plumbv1.WriteRequest{SandboxId: b.id, Path: p, Content: content})
	if err != nil {
		return backend.WriteResult{}, fail(p, err)
	}
	return backend.WriteResult{Path: r.GetPath(), BytesWritten: r.GetBytesWritten(), Created: r.GetCreated()}, nil
}

// Edit edits a file.
func (b *Backend) Edit(ctx context.Context, req backend.EditRequest) (backend.EditResult, error) {
	p, err := norm(req.Path)
	if err != nil {
		return backend.EditResult{}, err
	}
	r, err := b.c.Edit(ctx, &plumbv1.EditRequest{SandboxId: b.id, Path: p, OldString: req.Old, NewString: req.New, ReplaceAll: req.ReplaceAll})
	if err != nil {
		return backend.EditResult{}, fail(p, err)
	}
	return backend.EditResult{Path: r.GetPath(), Occurrences: int(r.GetOccurrences()), LineEndingAdapted: r.GetLineEndingAdapted()}, nil
}

// Delete removes a path.
func (b *Backend) Delete(ctx context.Context, path string) (backend.DeleteResult, error) {
	p, err := norm(path)
	if err != nil {
		return backend.DeleteResult{}, err
	}
	r, err := b.c.Delete(ctx, &plumbv1.DeleteRequest{SandboxId: b.id, Path: p})
	if err != nil {
		return backend.DeleteResult{}, fail(p, err)
	}
	return backend.DeleteResult{Path: r.GetPath(), Removed: int(r.GetRemoved())}, nil
}

// Grep searches files.
func (b *Backend) Grep(ctx context.Context, req backend.GrepRequest) (backend.GrepResult, error) {
	p, err := norm(req.Path)
	if err != nil {
		return backend.GrepResult{}, err
	}
	r, err := b.c.Grep(ctx, &plumbv1.GrepRequest{SandboxId: b.id, Pattern: req.Pattern, Path: p, Glob: req.Glob, Regex: req.Regex, MaxCount: int32(req.MaxCount)})
	if err != nil {
		return backend.GrepResult{}, fail(p, err)
	}
	return pbconv.GrepFromPB(r), nil
}

// Glob finds files.
func (b *Backend) Glob(ctx context.Context, req backend.GlobRequest) (backend.GlobResult, error) {
	p, err := norm(req.Path)
	if err != nil {
		return backend.GlobResult{}, err
	}
	r, err := b.c.Glob(ctx, &plumbv1.GlobRequest{SandboxId: b.id, Pattern: req.Pattern, Path: p})
	if err != nil {
		return backend.GlobResult{}, fail(p, err)
	}
	return pbconv.GlobFromPB(r), nil
}

// Execute runs a command.
func (b *Backend) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	r, err := b.c.Execute(ctx, &plumbv1.ExecuteRequest{SandboxId: b.id, Command: pbconv.CommandToPB(req)})
	if err != nil {
		return backend.ExecuteResult{}, fail("", err)
	}
	return pbconv.ExecuteResultFromPB(r.GetResult()), nil
}

// ExecuteStream runs a command, passing output chunks to onOutput as they
// arrive.
func (b *Backend) ExecuteStream(ctx context.Context, req backend.ExecuteRequest, onOutput func([]byte) error) (backend.ExecuteResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := b.c.ExecuteStream(ctx, &plumbv1.ExecuteStreamRequest{SandboxId: b.id, Command: pbconv.CommandToPB(req)})
	if err != nil {
		return backend.ExecuteResult{}, fail("", err)
	}
	for {
		m, err := s.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return backend.ExecuteResult{}, backend.Errorf(backend.CodeUnavailable, "", "execute stream ended without a result")
			}
			return backend.ExecuteResult{}, fail("", err)
		}
		if out := m.GetOutput(); out != nil {
			if err := onOutput(out.GetData()); err != nil {
				return backend.ExecuteResult{}, err
			}
		}
		if res := m.GetResult(); res != nil {
			return pbconv.ExecuteResultFromPB(res), nil
		}
	}
}

// Upload writes files, streaming each in chunks.
func (b *Backend) Upload(ctx context.Context, items []backend.UploadItem) ([]backend.UploadResult, error) {
	out := make([]backend.UploadResult, len(items))
	// Bad paths fail locally; the rest go in one stream.
	var send []int
	for i, it := range items {
		out[i].Path = it.Path
		if _, err := norm(it.Path); err != nil {
			var be *backend.Error
			errors.As(err, &be)
			out[i].Err = be
			continue
		}
		send = append(send, i)
	}
	if len(send) == 0 {
		return out, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := b.c.UploadFiles(ctx)
	if err != nil {
		return nil, fail("", err)
	}
	first := true
	for _, i := range send {
		data := items[i].Content
		for off := 0; ; {
			end := min(len(data), off+chunkBytes)
			m := &plumbv1.UploadFilesRequest{Data: data[off:end], Eof: end == len(data)}
			if off == 0 {
				m.Path = items[i].Path
			}
			if first {
				m.SandboxId, first = b.id, false
			}
			if err := s.Send(m); err != nil {
				if errors.Is(err, io.EOF) {
					_, err = s.CloseAndRecv()
				}
				return nil, fail("", err)
			}
			off = end
			if off == len(data) {
				break
			}
		}
	}
	resp, err := s.CloseAndRecv()
	if err != nil {
		return nil, fail("", err)
	}
	if len(resp.GetResults()) != len(send) {
		return nil, backend.Errorf(backend.CodeInternal, "", "upload: %d results for %d items", len(resp.GetResults()), len(send))
	}
	for k, r := range resp.GetResults() {
		i := send[k]
		out[i].BytesWritten = r.GetBytesWritten()
		out[i].Err = pbconv.FileErrorFromPB(r.GetError())
	}
	return out, nil
}

// chunkBytes is the upload chunk size (docs/file-tools.md §3: 1 MiB).
const chunkBytes = 1 << 20

// Download reads files; each arrives in chunks.
func (b *Backend) Download(ctx context.Context, paths []string) ([]backend.DownloadResult, error) {
	out := make([]backend.DownloadResult, len(paths))
	var send []string
	var idx []int
	for i, p := range paths {
		out[i].Path = p
		if _, err := norm(p); err != nil {
			var be *backend.Error
			errors.As(err, &be)
			out[i].Err = be
			continue
		}
		send = append(send, p)
		idx = append(idx, i)
	}
	if len(send) == 0 {
		return out, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := b.c.DownloadFiles(ctx, &plumbv1.DownloadFilesRequest{SandboxId: b.id, Paths: send})
	if err != nil {
		return nil, fail("", err)
	}
	bufs := make([][]byte, len(send))
	done := 0
	for done < len(send) {
		m, err := s.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, backend.Errorf(backend.CodeUnavailable, "", "download stream ended after %d of %d items", done, len(send))
			}
			return nil, fail("", err)
		}
		k := int(m.GetIndex())
		if k < 0 || k >= len(send) {
			return nil, backend.Errorf(backend.CodeInternal, "", "download: item index %d out of range", k)
		}
		i := idx[k]
		switch {
		case m.GetError() != nil:
			out[i].Err = pbconv.FileErrorFromPB(m.GetError())
			done++
		case m.GetEof():
			bufs[k] = append(bufs[k], m.GetData()...)
			if bufs[k] == nil {
				bufs[k] = []byte{}
			}
			out[i].Content, out[i].Size = bufs[k], int64(len(bufs[k]))
			done++
		default:
			bufs[k] = append(bufs[k], m.GetData()...)
		}
	}
	return out, nil
}
