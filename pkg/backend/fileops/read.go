package fileops

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/textops"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
)

// errChanged reports that a file was swapped between its stat and its
// use; the operation refuses to touch the newcomer.
var errChanged = errors.New("the file changed during the operation, retry")

// Read implements docs/file-tools.md §4.2 in its evaluation order: missing, directory and
// non-regular files are decided from a stat (nothing is opened); then the
// empty file; media by extension and signature, capped by size from fstat
// after reading only the signature; the binary sniff of the first 8 KiB;
// and last the streaming line window of textops.SliceLines, so memory is
// O(window) for any file size and line length.
func (e *Engine) Read(ctx context.Context, req backend.ReadRequest) (backend.ReadResult, error) {
	p, err := vpath.Normalize(req.Path)
	if err != nil {
		return backend.ReadResult{}, err
	}
	ctx, cancel := e.opContext(ctx)
	defer cancel()
	res := backend.ReadResult{Path: p, Encoding: backend.EncodingUTF8}
	f, fi, ok := e.openReadDirect(p)
	if !ok {
		name, sfi, err := e.statFile("read", p)
		if err != nil {
			return backend.ReadResult{}, err
		}
		if sfi.Size() == 0 {
			return emptyFile(res), nil
		}
		if f, fi, err = openRegular(e.root, name, sfi); err != nil {
			return backend.ReadResult{}, e.fail("read", p, err)
		}
	}
	defer f.Close()
	size := fi.Size()
	res.Size = size
	if size == 0 {
		return emptyFile(res), nil
	}

	// The sniff window is read at once (one read for a small file); the
	// media decision looks at its signature, so an oversized media file
	// is refused from its size without reading past the window.
	head := make([]byte, min(size, backend.SniffWindow))
	n, err := readFull(f, head)
	if err != nil {
		return backend.ReadResult{}, e.fail("read", p, err)
	}
	if mime := textops.MediaType(p, head[:min(n, textops.MediaHeadBytes)]); mime != "" {
		if size > e.cfg.mediaCap {
			return backend.ReadResult{}, e.fail("read", p, textops.TooLargeError("media read", size, e.cfg.mediaCap))
		}
		body, err := io.ReadAll(io.LimitReader(ctxReader{ctx, f}, e.cfg.mediaCap+1-int64(n)))
		if err != nil {
			return backend.ReadResult{}, e.fail("read", p, err)
		}
		all := append(head[:n:n], body...)
		if int64(len(all)) > e.cfg.mediaCap {
			return backend.ReadResult{}, e.fail("read", p, textops.TooLargeError("media read", int64(len(all)), e.cfg.mediaCap))
		}
		res.Encoding = backend.EncodingBase64
		res.MimeType = mime
		res.Content = base64.StdEncoding.EncodeToString(all)
		return res, nil
	}
	head = head[:n]
	if textops.IsBinary(head, int64(n) >= size) {
		return backend.ReadResult{}, e.fail("read", p, textops.NotTextError(size, textops.SniffMIME(head)))
	}
	if e.cfg.maxFileSize > 0 && size > e.cfg.maxFileSize {
		return backend.ReadResult{}, e.fail("read", p, textops.TooLargeError("read", size, e.cfg.maxFileSize))
	}
	// A file the window holds whole is not read again for its end.
	var text io.Reader = bytes.NewReader(head)
	if int64(n) < size {
		text = io.MultiReader(text, f)
	}
	r := ctxReader{ctx, text}
	w, err := textops.SliceLines(r, req.Offset, req.Limit, size <= backend.TotalLinesCountMax)
	if err != nil {
		return backend.ReadResult{}, e.fail("read", p, err)
	}
	w.Path, w.Size = p, size
	return w, nil
}

func emptyFile(res backend.ReadResult) backend.ReadResult {
	res.EmptyFile = true
	res.LineEnding = backend.LineEndingNone
	return res
}

// statFile resolves p (following symlinks) and stats it for an operation
// that needs a regular file: missing is file_not_found, a directory
// is_directory, anything else not_regular_file. Nothing is opened.
func (e *Engine) statFile(op, p string) (string, fs.FileInfo, error) {
	name, err := e.resolve(p, true)
	if err != nil {
		return "", nil, e.fail(op, p, err)
	}
	fi, err := e.root.Stat(name)
	if err != nil {
		return "", nil, e.fail(op, p, err)
	}
	if err := checkRegular(op, p, fi); err != nil {
		return "", nil, err
	}
	return name, fi, nil
}

// checkRegular rejects directories (is_directory) and non-regular files
// (not_regular_file).
func checkRegular(op, p string, fi fs.FileInfo) *backend.Error {
	switch {
	case fi.IsDir():
		return backend.Errorf(backend.CodeIsDirectory, p, "%s %s: is a directory; list it with ls", op, p)
	case !fi.Mode().IsRegular():
		return backend.Errorf(backend.CodeNotRegularFile, p,
			"%s %s: not a regular file (%s); FIFOs, sockets and devices are never opened", op, p, kindName(fi.Mode()))
	}
	return nil
}

func kindName(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	}
	return "a special file"
}

// openRegular opens the regular file name of dir for reading, and checks
// from fstat that it is still the file want describes. It opens
// non-blocking, so a FIFO swapped in after the stat cannot hang it, and
// without a controlling terminal.
func openRegular(dir *os.Root, name string, want fs.FileInfo) (*os.File, fs.FileInfo, error) {
	f, err := dir.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && (!fi.Mode().IsRegular() || !os.SameFile(fi, want)) {
		err = errChanged
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// readFull reads len(b) bytes, or fewer at EOF (the file shrank since its
// stat).
func readFull(r io.Reader, b []byte) (int, error) {
	n, err := io.ReadFull(r, b)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

// Read fails with ctx's error once ctx is done, else reads from r.
func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
