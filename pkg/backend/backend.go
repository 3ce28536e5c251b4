package backend

import "context"

// Backend is the file-operation contract of docs/file-tools.md §4, implemented
// by every backend (State, Filesystem, Store, Composite, Sandbox) and
// checked by the shared conformance suite.
//
// Backends receive raw paths and MUST normalize every one of them with
// vpath.Normalize before use, even when a caller has already done so: each
// layer is then safe on its own. Operation failures are returned as
// *Error (use errors.As or CodeOf); per-item failures of Upload and
// Download are reported in the item results, and the returned error is
// reserved for a failed transport. Results never contain model-facing
// prose: the tool layer renders them.
type Backend interface {
	// Ls lists the direct children of a directory (docs/file-tools.md §4.1).
	Ls(ctx context.Context, path string) (LsResult, error)
	// Read returns a window of a text file's lines, or a media file as
	// base64 (docs/file-tools.md §4.2).
	Read(ctx context.Context, req ReadRequest) (ReadResult, error)
	// Write creates or atomically replaces a file, creating parents (docs/file-tools.md §4.3).
	Write(ctx context.Context, path string, content []byte) (WriteResult, error)
	// Edit replaces exact text in a file (docs/file-tools.md §4.4).
	Edit(ctx context.Context, req EditRequest) (EditResult, error)
	// Delete removes a file, a symlink, or a directory recursively (docs/file-tools.md §4.5).
	Delete(ctx context.Context, path string) (DeleteResult, error)
	// Grep searches file lines (docs/file-tools.md §4.6).
	Grep(ctx context.Context, req GrepRequest) (GrepResult, error)
	// Glob lists regular files matching a pattern (docs/file-tools.md §4.7).
	Glob(ctx context.Context, req GlobRequest) (GlobResult, error)
	// Upload writes each item; one result per item, in input order (docs/file-tools.md §4.9).
	Upload(ctx context.Context, items []UploadItem) ([]UploadResult, error)
	// Download reads each path; one result per path, in input order (docs/file-tools.md §4.9).
	Download(ctx context.Context, paths []string) ([]DownloadResult, error)
}

// Executor runs shell commands (docs/file-tools.md §4.8). Only the Sandbox backend (and a
// Composite whose default is a Sandbox) implements it.
type Executor interface {
	// Execute runs req.Command and returns its merged output and status.
	Execute(ctx context.Context, req ExecuteRequest) (ExecuteResult, error)
}

// Homer is implemented by backends whose home dir is not "/". The home dir
// replaces an omitted directory argument (ls, glob and grep path) in the
// tool layer; use Home to read it.
type Homer interface {
	// Home returns the backend's home dir as a normalized virtual path.
	Home() string
}

// Home returns b's home dir: b.Home() when b implements Homer, else "/".
func Home(b any) string {
	if h, ok := b.(Homer); ok {
		return h.Home()
	}
	return "/"
}
