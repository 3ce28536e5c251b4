//go:build !linux

package fileops

import (
	"context"
	"io"
	"io/fs"
	"os"

	"github.com/plumbhq/plumb/pkg/backend"
)

// direct is the Linux fast path of write and edit (see direct_linux.go);
// elsewhere every write takes the general os.Root path.
type direct struct{}

func openDirect(*Engine, *os.Root) *direct { return &direct{} }

func (d *direct) close() {}

func (e *Engine) writeDirect(context.Context, string, string, []byte) (created, handled bool, err error) {
	return false, false, nil
}

func (e *Engine) editDirect(context.Context, string, backend.EditRequest) (res backend.EditResult, handled bool, err error) {
	return res, false, nil
}

func (e *Engine) openReadDirect(string) (io.ReadCloser, fs.FileInfo, bool) { return nil, nil, false }

func (e *Engine) lsDirect(context.Context, string) ([]backend.FileInfo, bool, error) {
	return nil, false, nil
}

func (e *Engine) walkDirect(string) (walkDir, string, func(), bool) { return nil, "", nil, false }
