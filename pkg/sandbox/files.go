package sandbox

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
	"go.uber.org/zap"
)

// Files runs file operations and commands in one sandbox through its agent
// channel. It implements backend.Backend and backend.Executor; the gRPC
// adapter serves it as SandboxService's work RPCs.
type Files struct {
	m  *Manager
	sb *sandbox
}

var (
	_ backend.Backend  = (*Files)(nil)
	_ backend.Executor = (*Files)(nil)
)

// Files returns the file and command interface of sandbox id.
func (m *Manager) Files(id string) (*Files, error) {
	sb, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	return &Files{m: m, sb: sb}, nil
}

// Home is the sandbox's working directory as a file path: the working dir
// itself, or "/" when file operations are rooted at it (files_root).
func (f *Files) Home() string { return f.m.snapshot(f.sb).Settings.Home() }

// invoke runs one agent request and decodes its result into out.
func (f *Files) invoke(ctx context.Context, op agentproto.Op, args, out any, onEvent func(agentproto.Response) error) error {
	_, err := f.exchange(ctx, op, args, nil, out, onEvent)
	return err
}

// exchange is invoke with a binary payload sent with the request and the
// final response's binary payload returned.
func (f *Files) exchange(ctx context.Context, op agentproto.Op, args any, payload []byte, out any, onEvent func(agentproto.Response) error) ([]byte, error) {
	ch, err := f.channel(ctx, string(op))
	if err != nil {
		return nil, err
	}
	return f.exchangeOn(ctx, ch, op, args, payload, out, onEvent)
}

// exchangeOn is exchange on a given channel: the requests of a transfer
// that borrows the agent's descriptors all go to the agent that lent them.
func (f *Files) exchangeOn(ctx context.Context, ch *channel, op agentproto.Op, args any, payload []byte, out any, onEvent func(agentproto.Response) error) ([]byte, error) {
	end := f.m.begin(f.sb)
	final, err := ch.exchange(ctx, op, args, payload, onEvent)
	end()
	var overdue *overdueError
	if errors.As(err, &overdue) {
		// An agent that stopped answering may have a dead box around it
		// (a crashed gVisor sandbox can look running until inspected):
		// say so now, rather than let every later call wait out its own
		// deadline.
		if failed := f.failed(ctx); failed != nil {
			return nil, failed
		}
		if op != agentproto.OpExecute {
			err = backend.Errorf(backend.CodeUnavailable, "", "%v", overdue)
		}
	}
	if err != nil {
		switch backend.CodeOf(err) {
		case backend.CodeUnavailable:
			// The stream broke: find out whether the container is gone.
			if failed := f.failed(ctx); failed != nil {
				return nil, failed
			}
		case backend.CodeResourceExhausted:
			// The box at its own limit (pids): the caller is told, and
			// one line, without a stack, tells the operator which box.
			f.m.lg.Info("sandbox at a resource limit", zap.String("sandbox-id", f.m.snapshot(f.sb).ID), zap.String("op", string(op)), zap.Error(err))
		}
		return nil, err
	}
	if out == nil || len(final.Result) == 0 {
		return final.Data, nil
	}
	if err := agentproto.UnmarshalResult(final.Result, out); err != nil {
		ch.reset(violationf("a malformed %s result: %v", op, err))
		return nil, backend.Errorf(backend.CodeUnavailable, "", "sandbox agent sent a malformed %s result; the channel was reset, retry the operation", op)
	}
	if err := recheck(op, args, out); err != nil {
		ch.reset(err)
		return nil, backend.Errorf(backend.CodeUnavailable, "", "sandbox agent sent an impossible %s result (%v); the channel was reset, retry the operation", op, err)
	}
	return final.Data, nil
}

// recheck verifies what the agent reports against the caps the agent is
// bound by (docs/file-tools.md §3): a result outside them is a violation.
func recheck(op agentproto.Op, args, out any) error {
	bad := func(format string, a ...any) error {
		return violationf("%s result: %s", op, fmt.Sprintf(format, a...))
	}
	switch r := out.(type) {
	case *backend.LsResult:
		if len(r.Entries) > backend.LsMaxEntries {
			return bad("%d entries exceed the %d-entry cap", len(r.Entries), backend.LsMaxEntries)
		}
	case *backend.GlobResult:
		if len(r.Matches) > backend.GlobMaxMatches {
			return bad("%d matches exceed the %d-match cap", len(r.Matches), backend.GlobMaxMatches)
		}
	case *backend.GrepResult:
		if len(r.Matches) > backend.GrepMaxMax {
			return bad("%d matches exceed the %d-match cap", len(r.Matches), backend.GrepMaxMax)
		}
		for _, m := range r.Matches {
			if utf8.RuneCountInString(m.Text) > backend.GrepTextMaxChars+1 {
				return bad("a match text of more than %d characters", backend.GrepTextMaxChars)
			}
		}
	case *backend.ReadResult:
		if limit := max(backend.ReadByteBudget+backend.RowWidth*4, base64.StdEncoding.EncodedLen(backend.MediaCap)); len(r.Content) > limit {
			return bad("%d content bytes exceed the %d-byte cap", len(r.Content), limit)
		}
	case *backend.ExecuteResult:
		ea, _ := args.(agentproto.ExecuteArgs)
		limit := outputLimit(ea.ExecuteRequest)
		switch {
		case len(r.Output) > limit+agentproto.OutputMarkerBytes:
			return bad("%d output bytes exceed max_output_bytes %d", len(r.Output), limit)
		case r.OutputBytes < 0:
			return bad("negative output_bytes %d", r.OutputBytes)
		case !r.Truncated && r.OutputBytes > int64(limit):
			return bad("output_bytes %d exceed max_output_bytes %d without truncation", r.OutputBytes, limit)
		case r.TimedOut && (r.ExitCode == nil || *r.ExitCode != 124):
			return bad("timed out without exit code 124")
		}
	}
	return nil
}

// channel returns the sandbox's agent channel (Manager.channel), or the
// error of an operation op that cannot reach the agent. The dial has
// already checked the box's container when it failed, so a herd of
// callers sharing one failed dial does not inspect it once each.
func (f *Files) channel(ctx context.Context, op string) (*channel, error) {
	if err := f.m.wake(ctx, f.sb); err != nil {
		if ctx.Err() != nil {
			return nil, backend.FromOS(op, "", ctx.Err())
		}
		switch CodeOf(err) {
		case CodeDataLoss, CodeQuota: // the box stays hibernated: say why, with its code
			return nil, err
		}
		return nil, backend.Errorf(backend.CodeUnavailable, "", "cannot wake sandbox %s: %v", f.m.snapshot(f.sb).ID, err)
	}
	ch, err := f.m.channel(ctx, f.sb)
	switch {
	case err == nil:
		return ch, nil
	case ctx.Err() != nil:
		return nil, backend.FromOS(op, "", ctx.Err())
	case CodeOf(err) == CodeFailed:
		return nil, backend.Errorf(backend.CodeUnavailable, "", "%v", err)
	}
	return nil, backend.Errorf(backend.CodeUnavailable, "", "cannot reach the agent of sandbox %s: %v", f.m.snapshot(f.sb).ID, err)
}

// failed checks the container and, when the sandbox has failed, returns
// the error that says so.
func (f *Files) failed(ctx context.Context) *backend.Error {
	f.m.checkAlive(context.WithoutCancel(ctx), f.sb)
	if info := f.m.snapshot(f.sb); info.State == StateFailed {
		return backend.Errorf(backend.CodeUnavailable, "", "sandbox %s failed: %s; delete it and create a new one", info.ID, info.FailureReason)
	}
	return nil
}

// Ls lists a directory.
func (f *Files) Ls(ctx context.Context, path string) (r backend.LsResult, err error) {
	err = f.invoke(ctx, agentproto.OpLs, agentproto.PathArgs{Path: path}, &r, nil)
	return r, err
}

// Read reads a window of a file.
func (f *Files) Read(ctx context.Context, req backend.ReadRequest) (r backend.ReadResult, err error) {
	err = f.invoke(ctx, agentproto.OpRead, req, &r, nil)
	return r, err
}

// Write writes a whole file.
func (f *Files) Write(ctx context.Context, path string, content []byte) (r backend.WriteResult, err error) {
	if len(content) > backend.WriteCap {
		return r, backend.Errorf(backend.CodeTooLarge, path, "write %s: %d bytes exceed the %d-byte limit", path, len(content), backend.WriteCap).
			WithDetail("limit", itoa(backend.WriteCap))
	}
	_, err = f.exchange(ctx, agentproto.OpWrite, agentproto.WriteArgs{Path: path}, content, &r, nil)
	return r, err
}

// Edit replaces text in a file.
func (f *Files) Edit(ctx context.Context, req backend.EditRequest) (r backend.EditResult, err error) {
	err = f.invoke(ctx, agentproto.OpEdit, req, &r, nil)
	return r, err
}

// Delete removes a path.
func (f *Files) Delete(ctx context.Context, path string) (r backend.DeleteResult, err error) {
	err = f.invoke(ctx, agentproto.OpDelete, agentproto.PathArgs{Path: path}, &r, nil)
	return r, err
}

// Grep searches file contents.
func (f *Files) Grep(ctx context.Context, req backend.GrepRequest) (r backend.GrepResult, err error) {
	err = f.invoke(ctx, agentproto.OpGrep, req, &r, nil)
	return r, err
}

// Glob finds files.
func (f *Files) Glob(ctx context.Context, req backend.GlobRequest) (r backend.GlobResult, err error) {
	err = f.invoke(ctx, agentproto.OpGlob, req, &r, nil)
	return r, err
}

// Execute runs a command and returns its bounded output.
func (f *Files) Execute(ctx context.Context, req backend.ExecuteRequest) (r backend.ExecuteResult, err error) {
	err = f.invoke(ctx, agentproto.OpExecute, agentproto.ExecuteArgs{ExecuteRequest: req}, &r, nil)
	return overdueExecute(req, r, nil, err)
}

// outputLimit is the max_output_bytes the agent applies to req.
func outputLimit(req backend.ExecuteRequest) int {
	if req.MaxOutputBytes <= 0 {
		return backend.ExecuteInlineOutput
	}
	return req.MaxOutputBytes
}

// overdueExecute turns an execute that sandboxd stopped waiting for (the
// agent did not answer within the timeout plus executeGrace) into the
// result a timeout gives: exit code 124, timed_out, and the output that
// streamed before it (none without streaming), with a line saying what
// happened. The violation was counted and the request cancelled.
func overdueExecute(req backend.ExecuteRequest, r backend.ExecuteResult, streamed []byte, err error) (backend.ExecuteResult, error) {
	var overdue *overdueError
	if !errors.As(err, &overdue) {
		return r, err
	}
	limit := outputLimit(req)
	code := 124
	note := fmt.Sprintf("[sandboxd: the sandbox did not report the command's end within its timeout plus %s; it was cancelled]\n", executeGrace)
	out := strings.ToValidUTF8(string(streamed[:min(len(streamed), max(limit-len(note), 0))]), "\uFFFD")
	return backend.ExecuteResult{
		Output:      out + note,
		ExitCode:    &code,
		TimedOut:    true,
		Truncated:   len(streamed) > len(out),
		OutputBytes: int64(len(streamed)),
		DurationMS:  overdue.wait.Milliseconds(),
	}, nil
}

// ExecuteStream runs a command, passing output to onOutput as it is
// produced, and returns the same result as Execute. Where the agent can
// lend its output pipe (lend.go), the output's bytes after the first
// chunks come through it rather than the channel (docs/security.md,
// "Streamed output through a lent pipe"; channel.await).
func (f *Files) ExecuteStream(ctx context.Context, req backend.ExecuteRequest, onOutput func([]byte) error) (r backend.ExecuteResult, err error) {
	ch, err := f.channel(ctx, string(agentproto.OpExecute))
	if err != nil {
		return r, err
	}
	args := agentproto.ExecuteArgs{ExecuteRequest: req, Stream: true, Lend: f.m.lender(f.sb, ch) != nil}
	var streamed []byte // the head of the output, for an overdue result
	_, err = f.exchangeOn(ctx, ch, agentproto.OpExecute, args, nil, &r, func(ev agentproto.Response) error {
		if ev.Event == agentproto.EventOutput {
			if room := outputLimit(req) - len(streamed); room > 0 {
				streamed = append(streamed, ev.Data[:min(len(ev.Data), room)]...)
			}
			return onOutput(ev.Data)
		}
		return nil
	})
	return overdueExecute(req, r, streamed, err)
}

// Upload writes each item in chunks; per-item failures are in the results.
func (f *Files) Upload(ctx context.Context, items []backend.UploadItem) ([]backend.UploadResult, error) {
	out := make([]backend.UploadResult, len(items))
	for i, it := range items {
		out[i].Path = it.Path
		n, err := f.UploadFrom(ctx, it.Path, chunks(it.Content), nil)
		if err != nil {
			be := asItemError(err)
			if be == nil {
				return nil, err
			}
			out[i].Err = be
			continue
		}
		out[i].BytesWritten = n
	}
	return out, nil
}

// UploadFrom writes one file from a sequence of chunks (next returns nil,
// nil at the end) and returns the bytes written. The agent creates a temp
// file next to the target that upload_close renames into place after
// checking the size. Where the agent lends its descriptor of that file
// (lend.go), the worker writes the bytes into it itself; otherwise they go
// to the agent as upload_chunk requests of at most agentproto.ChunkBytes at
// their offsets, agentproto.Window of them in flight at once. Either way
// memory is bounded (one chunk, or the window, plus what next holds)
// whatever the file's size. On any failure the upload is aborted and the
// target is untouched. done, when not nil, is called with a slice next
// returned once its bytes are written and no longer used (a slice may be
// left to the garbage collector instead, on a failure); the caller may
// then reuse its memory.
func (f *Files) UploadFrom(ctx context.Context, path string, next func() ([]byte, error), done func([]byte)) (int64, error) {
	if done == nil {
		done = func([]byte) {}
	}
	if len(path) > backend.MaxPathBytes {
		return 0, backend.Errorf(backend.CodeInvalidPath, "", "upload: path longer than %d bytes", backend.MaxPathBytes)
	}
	// A file that fits one chunk goes in one upload_file request rather
	// than open, chunk and close: three times fewer round trips for the
	// many small files of a typical upload.
	first, err := next()
	if err != nil {
		return 0, err
	}
	var second []byte
	if len(first) <= agentproto.ChunkBytes {
		if first != nil {
			if second, err = next(); err != nil {
				return 0, err
			}
		}
		if second == nil {
			n, err := f.uploadFile(ctx, path, first)
			done(first)
			return n, err
		}
	}
	next = prepend(next, first, second)
	ch, err := f.channel(ctx, "upload")
	if err != nil {
		return 0, err
	}
	l := f.m.lender(f.sb, ch)
	var h agentproto.UploadHandle
	if _, err := f.exchangeOn(ctx, ch, agentproto.OpUploadOpen, agentproto.OpenArgs{Path: path, Lend: l != nil}, nil, &h, nil); err != nil {
		return 0, err
	}
	var off int64
	if lent, berr := l.borrow(h.Lent); berr == nil {
		f.m.lent.Add(1)
		end := f.m.begin(f.sb) // busy while no request marks it so
		off, err = writeLent(ctx, lent, path, next, done)
		end()
	} else {
		f.m.channelled.Add(1)
		off, err = f.uploadChunks(ctx, ch, h.Handle, path, next, done)
	}
	if err != nil {
		_, _ = f.exchangeOn(context.WithoutCancel(ctx), ch, agentproto.OpUploadClose, agentproto.UploadCloseArgs{Handle: h.Handle}, nil, nil, nil)
		return 0, err
	}
	var res backend.WriteResult
	if _, err := f.exchangeOn(ctx, ch, agentproto.OpUploadClose, agentproto.UploadCloseArgs{Handle: h.Handle, Commit: true, Size: off}, nil, &res, nil); err != nil {
		return 0, err
	}
	if res.BytesWritten != off {
		return 0, backend.Errorf(backend.CodeInternal, path, "upload %s: the agent reports %d bytes written, %d were sent", path, res.BytesWritten, off)
	}
	return off, nil
}

// checkItemCap refuses an upload that would grow past the item cap.
func checkItemCap(path string, end int64) error {
	if end > backend.ItemCap {
		return backend.Errorf(backend.CodeTooLarge, path, "upload %s: larger than the %d-byte item limit", path, backend.ItemCap).
			WithDetail("limit", itoa(backend.ItemCap))
	}
	return nil
}

// uploadChunks sends an open upload's bytes as upload_chunk requests of at
// most agentproto.ChunkBytes at their offsets, agentproto.Window of them
// in flight at once, and returns how many were sent. Each slice from next
// goes to done once all its requests are written.
func (f *Files) uploadChunks(ctx context.Context, ch *channel, handle, path string, next func() ([]byte, error), done func([]byte)) (int64, error) {
	w := newWindow(ctx)
	var off int64
	err := func() error {
		for {
			data, err := next()
			if err != nil {
				return err
			}
			if data == nil {
				return nil
			}
			whole := data
			var left atomic.Int32 // the pieces of whole not yet written
			left.Store(int32((len(data) + agentproto.ChunkBytes - 1) / agentproto.ChunkBytes))
			for len(data) > 0 {
				c := data[:min(len(data), agentproto.ChunkBytes)]
				data = data[len(c):]
				if err := checkItemCap(path, off+int64(len(c))); err != nil {
					return err
				}
				args := agentproto.UploadChunkArgs{Handle: handle, Offset: off}
				if err := w.start(func(ctx context.Context) error {
					_, err := f.exchangeOn(ctx, ch, agentproto.OpUploadChunk, args, c, nil, nil)
					if left.Add(-1) == 0 {
						done(whole)
					}
					return err
				}, nil); err != nil {
					return err
				}
				off += int64(len(c))
			}
		}
	}()
	if werr := w.drain(); err == nil {
		err = werr
	}
	return off, err
}

// writeLent writes an upload's bytes into the temp file the agent lent
// (lend.go), each chunk while the next is received, then closes it, and
// returns how many bytes it was given. Each chunk goes to done once
// written (or dropped after a failure).
func writeLent(ctx context.Context, file *os.File, path string, next func() ([]byte, error), done func([]byte)) (int64, error) {
	defer file.Close()
	type chunk struct {
		b   []byte
		off int64
	}
	chunks := make(chan chunk, 1)
	var failed atomic.Bool
	werr := make(chan error, 1)
	go func() {
		var err error
		for c := range chunks {
			if err == nil {
				if _, err = file.WriteAt(c.b, c.off); err != nil {
					err = backend.FromOS("upload", path, err)
					failed.Store(true)
				}
			}
			// After a failure the rest is drained, so the sender never
			// blocks.
			done(c.b)
		}
		werr <- err
	}()
	var off int64
	err := func() error {
		for !failed.Load() {
			if err := ctx.Err(); err != nil {
				return backend.FromOS("upload", path, err)
			}
			data, err := next()
			if err != nil || data == nil {
				return err
			}
			if err := checkItemCap(path, off+int64(len(data))); err != nil {
				return err
			}
			chunks <- chunk{data, off}
			off += int64(len(data))
		}
		return nil
	}()
	close(chunks)
	if e := <-werr; e != nil {
		err = e
	}
	return off, err
}

// uploadFile writes a file of at most one chunk with one request.
func (f *Files) uploadFile(ctx context.Context, path string, data []byte) (int64, error) {
	var res backend.WriteResult
	if _, err := f.exchange(ctx, agentproto.OpUploadFile, agentproto.PathArgs{Path: path}, data, &res, nil); err != nil {
		return 0, err
	}
	if res.BytesWritten != int64(len(data)) {
		return 0, backend.Errorf(backend.CodeInternal, path, "upload %s: the agent reports %d bytes written, %d were sent", path, res.BytesWritten, len(data))
	}
	return int64(len(data)), nil
}

// prepend returns a next that yields the non-nil chunks of head first,
// then what next yields.
func prepend(next func() ([]byte, error), head ...[]byte) func() ([]byte, error) {
	return func() ([]byte, error) {
		for len(head) > 0 {
			c := head[0]
			head = head[1:]
			if c != nil {
				return c, nil
			}
		}
		return next()
	}
}

// window runs up to agentproto.Window requests of one transfer at once and
// completes them in the order they were started. The first failure
// cancels the others.
type window struct {
	ctx     context.Context
	cancel  context.CancelFunc
	pending []*pendingOp
	err     error
}

// pendingOp is one request of a window: done is closed when run returned.
type pendingOp struct {
	done   chan struct{}
	err    error
	onDone func() error // runs in order, in the caller's goroutine
}

func newWindow(ctx context.Context) *window {
	ctx, cancel := context.WithCancel(ctx)
	return &window{ctx: ctx, cancel: cancel}
}

// start waits until the window has room (completing the oldest request
// first), then starts run. onDone, if set, runs when the request is
// completed in order. It returns the window's first error.
func (w *window) start(run func(context.Context) error, onDone func() error) error {
	for w.err == nil && len(w.pending) >= agentproto.Window {
		w.completeOldest()
	}
	if w.err != nil {
		return w.err
	}
	p := &pendingOp{done: make(chan struct{}), onDone: onDone}
	w.pending = append(w.pending, p)
	go func() {
		defer close(p.done)
		p.err = run(w.ctx)
	}()
	return nil
}

// completeOldest waits for the oldest request and records its outcome.
func (w *window) completeOldest() {
	p := w.pending[0]
	w.pending[0] = nil
	w.pending = w.pending[1:]
	<-p.done
	err := p.err
	if err == nil && w.err == nil && p.onDone != nil {
		err = p.onDone()
	}
	if err != nil && w.err == nil {
		w.err = err
		w.cancel()
	}
}

// drain completes every request and returns the first error; the window
// is then finished.
func (w *window) drain() error {
	for len(w.pending) > 0 {
		w.completeOldest()
	}
	w.cancel()
	return w.err
}

// Download reads each path; per-item failures are in the results.
func (f *Files) Download(ctx context.Context, paths []string) ([]backend.DownloadResult, error) {
	out := make([]backend.DownloadResult, len(paths))
	for i, p := range paths {
		out[i].Path = p
		var buf []byte
		size, err := f.DownloadTo(ctx, p, func(b []byte) error {
			buf = append(buf, b...)
			return nil
		})
		if err != nil {
			be := asItemError(err)
			if be == nil {
				return nil, err
			}
			out[i].Err = be
			continue
		}
		if buf == nil {
			buf = []byte{}
		}
		out[i].Content, out[i].Size = buf, size
	}
	return out, nil
}

// DownloadTo streams one file to sink in chunks and returns its size. It
// opens the file in the agent (download_open reports its size); where the
// agent lends its descriptor (lend.go) the worker reads the bytes itself,
// otherwise it keeps agentproto.Window reads of agentproto.ChunkBytes in
// flight and passes their bytes to sink in order, so memory is bounded by
// the window. A file that changes size while it is downloaded is an error
// (invalid_argument, retry the download); sink has then seen part of it.
func (f *Files) DownloadTo(ctx context.Context, path string, sink func([]byte) error) (int64, error) {
	if len(path) > backend.MaxPathBytes {
		return 0, backend.Errorf(backend.CodeInvalidPath, "", "download: path longer than %d bytes", backend.MaxPathBytes)
	}
	ch, err := f.channel(ctx, "download")
	if err != nil {
		return 0, err
	}
	l := f.m.lender(f.sb, ch)
	var h agentproto.DownloadHandle
	if _, err := f.exchangeOn(ctx, ch, agentproto.OpDownloadOpen, agentproto.OpenArgs{Path: path, Lend: l != nil}, nil, &h, nil); err != nil {
		return 0, err
	}
	defer func() {
		_, _ = f.exchangeOn(context.WithoutCancel(ctx), ch, agentproto.OpDownloadClose, agentproto.DownloadCloseArgs{Handle: h.Handle}, nil, nil, nil)
	}()
	if h.Size < 0 || h.Size > backend.ItemCap {
		return 0, backend.Errorf(backend.CodeTooLarge, path, "download %s: larger than the %d-byte item limit", path, backend.ItemCap).
			WithDetail("limit", itoa(backend.ItemCap))
	}
	if lent, berr := l.borrow(h.Lent); berr == nil {
		f.m.lent.Add(1)
		end := f.m.begin(f.sb) // busy while no request marks it so
		defer end()
		if err := readLent(ctx, lent, path, h.Size, sink); err != nil {
			return 0, err
		}
		return h.Size, nil
	}
	f.m.channelled.Add(1)
	w := newWindow(ctx)
	for off := int64(0); off < h.Size && err == nil; {
		n := int(min(h.Size-off, agentproto.ChunkBytes))
		args := agentproto.DownloadReadArgs{Handle: h.Handle, Offset: off, Length: n}
		var data []byte
		err = w.start(func(ctx context.Context) error {
			var err error
			data, err = f.exchangeOn(ctx, ch, agentproto.OpDownloadRead, args, nil, nil, nil)
			return err
		}, func() error {
			if len(data) != n {
				f.m.violation(f.sb, violationf("download_read result: %d bytes for a read of %d", len(data), n))
				return backend.Errorf(backend.CodeUnavailable, path, "download %s: the agent sent %d bytes for a read of %d", path, len(data), n)
			}
			d := data
			data = nil
			return sink(d)
		})
		off += int64(n)
	}
	if werr := w.drain(); err == nil {
		err = werr
	}
	if err != nil {
		return 0, err
	}
	return h.Size, nil
}

// readLent passes the size bytes of the file the agent lent for a download
// (lend.go) to sink in chunks of agentproto.ChunkBytes, each its own (a
// gRPC stream may still hold a message it has sent), then closes it. A
// file that no longer has its size at open fails the download as the
// agent's reads do.
func readLent(ctx context.Context, file *os.File, path string, size int64, sink func([]byte) error) error {
	defer file.Close()
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return backend.FromOS("download", path, err)
		}
		b := make([]byte, min(size-off, agentproto.ChunkBytes))
		n, err := file.ReadAt(b, off)
		if errors.Is(err, io.EOF) {
			return backend.DownloadChanged(path, size, fileSize(file))
		}
		if err != nil {
			return backend.FromOS("download", path, err)
		}
		if err := sink(b); err != nil {
			return err
		}
		off += int64(n)
	}
	if now := fileSize(file); now != size {
		return backend.DownloadChanged(path, size, now)
	}
	return nil
}

// fileSize is file's size now, or -1 when it cannot be read.
func fileSize(file *os.File) int64 {
	fi, err := file.Stat()
	if err != nil {
		return -1
	}
	return fi.Size()
}

// asItemError returns the *backend.Error that fails one batch item, or nil
// when err is a transport failure that fails the whole batch.
func asItemError(err error) *backend.Error {
	switch backend.CodeOf(err) {
	case backend.CodeUnavailable, backend.CodeCancelled, backend.CodeTimeout, backend.CodeInternal:
		return nil
	}
	var be *backend.Error
	if errors.As(err, &be) {
		return be
	}
	return nil
}

func chunks(b []byte) func() ([]byte, error) {
	done := false
	return func() ([]byte, error) {
		if done {
			return nil, nil
		}
		done = true
		if b == nil {
			return []byte{}, nil
		}
		return b, nil
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
