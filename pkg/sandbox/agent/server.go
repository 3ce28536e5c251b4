package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// DefaultWorkspace is the working directory of execute when a request
// names none.
const DefaultWorkspace = "/workspace"

// Config configures Serve. The zero value is usable: every field has a
// default.
type Config struct {
	// Files is the file engine that ls, read, write, edit, delete, grep,
	// glob, upload and download are dispatched to. Nil answers every file
	// operation with unsupported (execute and hello still work).
	Files backend.Backend
	// Root is the engine root directory in the container, default "/".
	// Execute resolves its cwd and offload_path (virtual paths) under it.
	Root string
	// Workspace is the directory execute runs in when the request has no
	// cwd, as a path in the container; default DefaultWorkspace.
	Workspace string
	// MaxExecuteTimeout is the largest execute timeout and the one that
	// timeout_s 0 selects; default backend.ExecuteMaxTimeout.
	MaxExecuteTimeout time.Duration
	// FileOpTimeout is the deadline of each file operation; default
	// backend.FileOpTimeout.
	FileOpTimeout time.Duration
	// Env is the base environment of commands ("KEY=value" entries);
	// request env keys override it. Nil means the agent's own environment,
	// which inside a container is the image's and the sandbox's, never the
	// host's. A non-nil empty slice means an empty base environment.
	Env []string
	// Version is the agent binary's build version, reported in the hello
	// as agent_version; default "dev" (a local build).
	Version string
	// Logger receives diagnostics; nil discards them. Contents of files,
	// commands and output are never logged.
	Logger *zap.Logger
	// User is the sandbox user. When it is set and the agent runs as root
	// (in a sandbox: container root with only SETUID, SETGID and KILL), the
	// agent marks itself non-dumpable, does every file operation with
	// fsuid/fsgid = User and runs every command as User with no
	// supplementary groups. When the agent is not root, or User is nil,
	// files and commands simply use the agent's own identity.
	User *User
	// Reaper, when set, is the path of a sandbox-agent binary that execute
	// runs each shell under (`Reaper reap ... -- sh -c CMD`), so that
	// every descendant of a command dies on timeout or cancel, even one
	// that left the process group. Empty runs the shell directly and kills
	// only its process group.
	Reaper string
}

func (c Config) withDefaults() Config {
	if c.Root == "" {
		c.Root = "/"
	}
	if c.Workspace == "" {
		c.Workspace = DefaultWorkspace
	}
	if c.MaxExecuteTimeout <= 0 {
		c.MaxExecuteTimeout = backend.ExecuteMaxTimeout
	}
	if c.FileOpTimeout <= 0 {
		c.FileOpTimeout = backend.FileOpTimeout
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// server is the state of one Serve call.
type server struct {
	cfg  Config
	lg   *zap.Logger
	w    *agentproto.Writer
	root *os.Root // cfg.Root, for execute's cwd and offload file
	// as is the user commands start as; nil runs them as the agent.
	as *User

	// stop cancels every request and ends Serve (write failures use it).
	stop context.CancelCauseFunc
	// shutdown is closed when Serve stops taking work; pending SIGKILL
	// escalations then fire at once.
	shutdown chan struct{}

	mu       sync.Mutex
	closed   bool                          // no new work may start
	wg       sync.WaitGroup                // work in progress, also inline frames
	inflight map[uint64]context.CancelFunc // cancels of running requests
	uploads  map[string]*upload            // open uploads by handle
	buffered int                           // bytes held by open uploads
	nextUp   uint64
}

// MaxUploadBuffer bounds the bytes all open uploads hold in memory at once,
// so concurrent uploads cannot exhaust the sandbox's memory.
const MaxUploadBuffer = 2 * backend.ItemCap

// upload is an open upload: the bytes received so far, kept in memory until
// the commit hands them to the engine, which writes atomically.
type upload struct {
	path string // normalized
	data []byte
}

// Serve answers the agentproto request frames read from in with response
// frames written to out, until in reaches EOF (nil), ctx ends (ctx's
// error), reading fails, or writing a response fails. Before it returns it
// cancels every request in flight and waits for them, so commands started
// by execute are killed and their goroutines are gone; open uploads are
// dropped.
//
// out is written until Serve returns: if nobody reads it, writes block, so
// close the reading end (making writes fail) rather than abandoning it.
// When ctx ends while a read of in is blocked, Serve unblocks it with
// SetReadDeadline if in supports that (an *os.File pipe); otherwise Serve
// returns and the reading goroutine ends at in's next read, without doing
// anything more.
func Serve(ctx context.Context, in io.Reader, out io.Writer, cfg Config) error {
	cfg = cfg.withDefaults()
	var as *User
	if cfg.User != nil && os.Geteuid() == 0 {
		if err := setDumpable(false); err != nil {
			return fmt.Errorf("sandbox agent: mark non-dumpable: %w", err)
		}
		if err := dropFileIdentity(*cfg.User); err != nil {
			return fmt.Errorf("sandbox agent: %w", err)
		}
		as = cfg.User
	}
	root, err := os.OpenRoot(cfg.Root)
	if err != nil {
		return fmt.Errorf("sandbox agent: open root %s: %w", cfg.Root, err)
	}
	defer root.Close()

	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	s := &server{
		cfg:      cfg,
		lg:       cfg.Logger.Named("sandbox-agent"),
		w:        agentproto.NewWriter(out),
		root:     root,
		as:       as,
		stop:     stop,
		shutdown: make(chan struct{}),
		inflight: map[uint64]context.CancelFunc{},
		uploads:  map[string]*upload{},
	}

	loopDone := make(chan error, 1)
	go func() { loopDone <- s.readLoop(ctx, agentproto.NewReader(in, agentproto.MaxFrameBytes)) }()
	select {
	case err = <-loopDone:
	case <-ctx.Done():
		err = context.Cause(ctx)
		if d, ok := in.(interface{ SetReadDeadline(time.Time) error }); ok && d.SetReadDeadline(time.Now()) == nil {
			<-loopDone
		}
	}

	s.mu.Lock()
	s.closed = true
	s.uploads = nil
	s.mu.Unlock()
	close(s.shutdown)
	stop(err)
	s.wg.Wait()
	return err
}

// readLoop reads and dispatches frames until the input ends or the server
// closes.
func (s *server) readLoop(ctx context.Context, r *agentproto.Reader) error {
	for {
		frame, err := r.Next()
		switch {
		case err == nil:
		case errors.Is(err, agentproto.ErrFrameTooLarge):
			// The rest of the oversized line is read as the next frame; it
			// is not JSON and gets skipped.
			s.lg.Warn("skipping an oversized request frame", zap.Int("limit", agentproto.MaxFrameBytes))
			continue
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return nil
		default:
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("sandbox agent: read request: %w", err)
		}
		if !s.begin() {
			return context.Cause(ctx)
		}
		s.dispatch(ctx, frame)
		s.wg.Done()
	}
}

// begin registers a unit of work; it fails once Serve is shutting down.
func (s *server) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// dispatch handles one frame. Cheap operations whose order matters
// (upload bookkeeping, cancel, hello) run inline, in frame order; the
// others run in their own goroutine.
func (s *server) dispatch(ctx context.Context, frame []byte) {
	req, err := agentproto.DecodeRequest(frame)
	if err != nil {
		if id := peekID(frame); id != 0 {
			s.send(agentproto.Failure(id, backend.Errorf(backend.CodeInvalidArgument, "", "%v", err)))
		} else {
			s.lg.Warn("skipping a malformed request frame without an id", zap.Error(err))
		}
		return
	}
	switch req.Op {
	case agentproto.OpHello:
		s.send(agentproto.Result(req.ID, s.hello()))
		return
	case agentproto.OpCancel:
		s.send(s.cancel(req))
		return
	case agentproto.OpUploadOpen:
		s.send(s.uploadOpen(req))
		return
	case agentproto.OpUploadChunk:
		s.send(s.uploadChunk(req))
		return
	}

	s.mu.Lock()
	if _, dup := s.inflight[req.ID]; dup {
		s.mu.Unlock()
		s.send(agentproto.Failure(req.ID, backend.Errorf(backend.CodeInvalidArgument, "", "request id %d is already in flight", req.ID)))
		return
	}
	rctx, cancel := context.WithCancel(ctx)
	s.inflight[req.ID] = cancel
	s.wg.Add(1) // the caller holds a count, so this cannot race with Wait
	s.mu.Unlock()

	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.inflight, req.ID)
			s.mu.Unlock()
			cancel()
		}()
		s.send(s.handle(rctx, req))
	}()
}

// handle runs one request that has its own goroutine and returns its final
// response; stream events are sent on the way.
func (s *server) handle(ctx context.Context, req agentproto.Request) agentproto.Response {
	lg := s.lg.With(zap.Uint64("request-id", req.ID), zap.String("op", string(req.Op)))
	lg.Debug("request")
	switch req.Op {
	case agentproto.OpExecute:
		var a agentproto.ExecuteArgs
		if e := decodeArgs(req, &a); e != nil {
			return agentproto.Failure(req.ID, e)
		}
		var emit func([]byte) error
		if a.Stream {
			emit = func(b []byte) error {
				return s.w.Write(agentproto.Response{ID: req.ID, Event: agentproto.EventOutput, Data: b})
			}
		}
		res, err := s.execute(ctx, a.ExecuteRequest, emit)
		if err != nil {
			lg.Debug("execute failed", zap.String("code", string(backend.CodeOf(err))))
			return agentproto.Failure(req.ID, backend.FromOS("execute", "", err))
		}
		return agentproto.Result(req.ID, res)
	case agentproto.OpUploadClose:
		return s.uploadClose(ctx, req)
	case agentproto.OpDownload:
		return s.download(ctx, req)
	case agentproto.OpLs:
		return fileOp(ctx, s, req, func(a agentproto.PathArgs) string { return a.Path },
			func(ctx context.Context, a agentproto.PathArgs) (backend.LsResult, error) {
				return s.cfg.Files.Ls(ctx, a.Path)
			})
	case agentproto.OpRead:
		return fileOp(ctx, s, req, func(a backend.ReadRequest) string { return a.Path }, s.filesRead)
	case agentproto.OpWrite:
		return fileOp(ctx, s, req, func(a agentproto.WriteArgs) string { return a.Path },
			func(ctx context.Context, a agentproto.WriteArgs) (backend.WriteResult, error) {
				return s.cfg.Files.Write(ctx, a.Path, a.Content)
			})
	case agentproto.OpEdit:
		return fileOp(ctx, s, req, func(a backend.EditRequest) string { return a.Path }, s.filesEdit)
	case agentproto.OpDelete:
		return fileOp(ctx, s, req, func(a agentproto.PathArgs) string { return a.Path },
			func(ctx context.Context, a agentproto.PathArgs) (backend.DeleteResult, error) {
				return s.cfg.Files.Delete(ctx, a.Path)
			})
	case agentproto.OpGrep:
		return fileOp(ctx, s, req, func(a backend.GrepRequest) string { return a.Path }, s.filesGrep)
	case agentproto.OpGlob:
		return fileOp(ctx, s, req, func(a backend.GlobRequest) string { return a.Path }, s.filesGlob)
	}
	return agentproto.Failure(req.ID, backend.Errorf(backend.CodeUnsupported, "", "unknown operation %s", backend.Quote(string(req.Op))))
}

func (s *server) filesRead(ctx context.Context, a backend.ReadRequest) (backend.ReadResult, error) {
	return s.cfg.Files.Read(ctx, a)
}

func (s *server) filesEdit(ctx context.Context, a backend.EditRequest) (backend.EditResult, error) {
	return s.cfg.Files.Edit(ctx, a)
}

func (s *server) filesGrep(ctx context.Context, a backend.GrepRequest) (backend.GrepResult, error) {
	return s.cfg.Files.Grep(ctx, a)
}

func (s *server) filesGlob(ctx context.Context, a backend.GlobRequest) (backend.GlobResult, error) {
	return s.cfg.Files.Glob(ctx, a)
}

// fileOp decodes A, calls fn under the file-operation deadline and turns
// the outcome into the final response.
func fileOp[A, R any](ctx context.Context, s *server, req agentproto.Request, pathOf func(A) string, fn func(context.Context, A) (R, error)) agentproto.Response {
	if s.cfg.Files == nil {
		return agentproto.Failure(req.ID, unsupportedFiles(req.Op))
	}
	var a A
	if e := decodeArgs(req, &a); e != nil {
		return agentproto.Failure(req.ID, e)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.FileOpTimeout)
	defer cancel()
	r, err := fn(ctx, a)
	if err != nil {
		return agentproto.Failure(req.ID, backend.FromOS(string(req.Op), pathOf(a), err))
	}
	return agentproto.Result(req.ID, r)
}

func unsupportedFiles(op agentproto.Op) *backend.Error {
	return backend.Errorf(backend.CodeUnsupported, "", "%s is not available: this sandbox agent has no file engine", op)
}

// decodeArgs parses a request's arguments strictly (unknown fields are
// refused); absent arguments decode as {}.
func decodeArgs(req agentproto.Request, v any) *backend.Error {
	raw := []byte(req.Args)
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON object")
	}
	if err != nil {
		return backend.Errorf(backend.CodeInvalidArgument, "", "malformed %s arguments: %v", req.Op, err)
	}
	return nil
}

// peekID reads the id of a frame that failed strict decoding, so that its
// sender still gets an answer; 0 when there is none.
func peekID(frame []byte) uint64 {
	var v struct {
		ID uint64 `json:"id"`
	}
	// Only the first JSON value counts: trailing data is a reason to
	// refuse the frame, not to ignore its sender.
	if json.NewDecoder(bytes.NewReader(frame)).Decode(&v) != nil {
		return 0
	}
	return v.ID
}

// send writes a response. A final response too large for a frame is
// replaced by a too_large error; any other write failure means the channel
// is gone and stops the server.
func (s *server) send(resp agentproto.Response) {
	err := s.w.Write(resp)
	if errors.Is(err, agentproto.ErrFrameTooLarge) && resp.Done {
		err = s.w.Write(agentproto.Failure(resp.ID, backend.Errorf(backend.CodeTooLarge, "",
			"the result is larger than the %d-byte agent frame limit; narrow the request (a smaller path, pattern, max_count or limit)", agentproto.MaxFrameBytes)))
	}
	if err != nil {
		s.lg.Warn("write response", zap.Uint64("request-id", resp.ID), zap.Error(err))
		s.stop(fmt.Errorf("sandbox agent: write response: %w", err))
	}
}

func (s *server) hello() agentproto.Hello {
	uid, gid := os.Getuid(), os.Getgid()
	if s.as != nil {
		uid, gid = int(s.as.UID), int(s.as.GID)
	}
	return agentproto.Hello{
		Version:      agentproto.Version,
		AgentVersion: s.cfg.Version,
		UID:          uid,
		GID:          gid,
		Root:         s.cfg.Root,
		Workspace:    s.cfg.Workspace,
	}
}

// cancel cancels the target request if it is still running. Its answer is
// an empty result either way: the target may have finished already.
func (s *server) cancel(req agentproto.Request) agentproto.Response {
	var a agentproto.CancelArgs
	if e := decodeArgs(req, &a); e != nil {
		return agentproto.Failure(req.ID, e)
	}
	s.mu.Lock()
	c := s.inflight[a.Target]
	s.mu.Unlock()
	if c != nil {
		c()
	}
	return agentproto.Result(req.ID, struct{}{})
}

func (s *server) uploadOpen(req agentproto.Request) agentproto.Response {
	if s.cfg.Files == nil {
		return agentproto.Failure(req.ID, unsupportedFiles(req.Op))
	}
	var a agentproto.PathArgs
	if e := decodeArgs(req, &a); e != nil {
		return agentproto.Failure(req.ID, e)
	}
	p, err := vpath.Normalize(a.Path)
	if err != nil {
		return agentproto.Failure(req.ID, backend.FromOS("upload", a.Path, err))
	}
	s.mu.Lock()
	s.nextUp++
	h := fmt.Sprintf("u%d", s.nextUp)
	s.uploads[h] = &upload{path: p}
	s.mu.Unlock()
	return agentproto.Result(req.ID, agentproto.UploadHandle{Handle: h})
}

func (s *server) uploadChunk(req agentproto.Request) agentproto.Response {
	var a agentproto.UploadChunkArgs
	if e := decodeArgs(req, &a); e != nil {
		return agentproto.Failure(req.ID, e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.uploads[a.Handle]
	if u == nil {
		return agentproto.Failure(req.ID, unknownHandle(a.Handle))
	}
	if len(u.data)+len(a.Data) > backend.ItemCap {
		s.dropUpload(a.Handle)
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeTooLarge, u.path,
			"upload %s: larger than the %d-byte item limit", u.path, backend.ItemCap).WithDetail("limit", fmt.Sprint(backend.ItemCap)))
	}
	if s.buffered+len(a.Data) > MaxUploadBuffer {
		s.dropUpload(a.Handle)
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeTooLarge, u.path,
			"upload %s: uploads in flight already hold %d bytes (limit %d); upload fewer files at once", u.path, s.buffered, MaxUploadBuffer).
			WithDetail("limit", fmt.Sprint(MaxUploadBuffer)))
	}
	u.data = append(u.data, a.Data...)
	s.buffered += len(a.Data)
	return agentproto.Result(req.ID, struct{}{})
}

// dropUpload forgets an open upload and releases its buffer; s.mu is held.
func (s *server) dropUpload(h string) {
	if u := s.uploads[h]; u != nil {
		s.buffered -= len(u.data)
		delete(s.uploads, h)
	}
}

func unknownHandle(h string) *backend.Error {
	return backend.Errorf(backend.CodeInvalidArgument, "", "unknown upload handle %s (never opened, already closed, or dropped after an error)", backend.Quote(h))
}

// uploadClose ends an upload. Without commit the data is dropped (an
// unknown handle is then fine: aborting is idempotent); with commit it goes
// to the engine as a one-item Upload.
func (s *server) uploadClose(ctx context.Context, req agentproto.Request) agentproto.Response {
	var a agentproto.UploadCloseArgs
	if e := decodeArgs(req, &a); e != nil {
		return agentproto.Failure(req.ID, e)
	}
	s.mu.Lock()
	u := s.uploads[a.Handle]
	s.dropUpload(a.Handle)
	s.mu.Unlock()
	if !a.Commit {
		return agentproto.Result(req.ID, struct{}{})
	}
	if u == nil {
		return agentproto.Failure(req.ID, unknownHandle(a.Handle))
	}
	if s.cfg.Files == nil {
		return agentproto.Failure(req.ID, unsupportedFiles(req.Op))
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.FileOpTimeout)
	defer cancel()
	content := u.data
	if content == nil {
		content = []byte{}
	}
	res, err := s.cfg.Files.Upload(ctx, []backend.UploadItem{{Path: u.path, Content: content}})
	switch {
	case err != nil:
		return agentproto.Failure(req.ID, backend.FromOS("upload", u.path, err))
	case len(res) != 1:
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeInternal, u.path, "upload %s: the engine returned %d results for one item", u.path, len(res)))
	case res[0].Err != nil:
		return agentproto.Failure(req.ID, res[0].Err)
	}
	// Upload does not say whether the file was new, so Created stays false.
	return agentproto.Result(req.ID, backend.WriteResult{Path: u.path, BytesWritten: res[0].BytesWritten})
}

// download reads one file through the engine and sends it as chunk events
// of at most agentproto.ChunkBytes, then its size.
func (s *server) download(ctx context.Context, req agentproto.Request) agentproto.Response {
	if s.cfg.Files == nil {
		return agentproto.Failure(req.ID, unsupportedFiles(req.Op))
	}
	var a agentproto.PathArgs
	if e := decodeArgs(req, &a); e != nil {
		return agentproto.Failure(req.ID, e)
	}
	fctx, cancel := context.WithTimeout(ctx, s.cfg.FileOpTimeout)
	defer cancel()
	res, err := s.cfg.Files.Download(fctx, []string{a.Path})
	switch {
	case err != nil:
		return agentproto.Failure(req.ID, backend.FromOS("download", a.Path, err))
	case len(res) != 1:
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeInternal, a.Path, "download %s: the engine returned %d results for one path", a.Path, len(res)))
	case res[0].Err != nil:
		return agentproto.Failure(req.ID, res[0].Err)
	}
	data := res[0].Content
	size := int64(len(data))
	for len(data) > 0 {
		if ctx.Err() != nil {
			return agentproto.Failure(req.ID, backend.FromOS("download", a.Path, ctx.Err()))
		}
		c := data[:min(len(data), agentproto.ChunkBytes)]
		data = data[len(c):]
		if err := s.w.Write(agentproto.Response{ID: req.ID, Event: agentproto.EventChunk, Data: c}); err != nil {
			s.stop(fmt.Errorf("sandbox agent: write response: %w", err))
			return agentproto.Failure(req.ID, backend.Errorf(backend.CodeUnavailable, a.Path, "download %s: the channel failed", a.Path))
		}
	}
	return agentproto.Result(req.ID, agentproto.DownloadResult{Size: size})
}
