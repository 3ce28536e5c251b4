package fileops

import (
	"bytes"
	"context"
	"io"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/textops"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// Download returns the exact bytes of each path (docs/file-tools.md §4.9), no sniffing; one
// result per path, in input order, with the path as given. Directories are
// is_directory, non-regular files not_regular_file (never opened), files
// over the item cap too_large.
func (e *Engine) Download(ctx context.Context, paths []string) ([]backend.DownloadResult, error) {
	out := make([]backend.DownloadResult, len(paths))
	for i, raw := range paths {
		out[i] = backend.DownloadResult{Path: raw}
		content, err := e.download(ctx, raw)
		if err != nil {
			out[i].Err = asError("download", raw, err)
			continue
		}
		out[i].Content, out[i].Size = content, int64(len(content))
	}
	return out, nil
}

func (e *Engine) download(ctx context.Context, raw string) ([]byte, error) {
	p, err := vpath.Normalize(raw)
	if err != nil {
		return nil, err
	}
	ctx, cancel := e.opContext(ctx)
	defer cancel()
	f, fi, err := e.openDownload(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	b.Grow(int(fi.Size()) + bytes.MinRead)
	if _, err := b.ReadFrom(io.LimitReader(ctxReader{ctx, f}, e.cfg.itemCap+1)); err != nil {
		return nil, e.fail("download", p, err)
	}
	if n := int64(b.Len()); n > e.cfg.itemCap {
		return nil, e.fail("download", p, textops.TooLargeError("download", n, e.cfg.itemCap))
	}
	return b.Bytes(), nil
}
