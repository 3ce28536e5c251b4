package boxagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/fileops"
	"github.com/plumbhq/plumb/pkg/sandbox/agentlog"
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
	// operation with unsupported (execute and hello still work). Uploads
	// and downloads stream through it chunk by chunk, so it must also be a
	// Streamer (the fileops engine is); otherwise they are unsupported.
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
	// commands and output are never logged. It is an agentlog logger, not
	// zap as elsewhere in plumb nor log/slog: both cost every box RSS for
	// code the agent does not need (see the package doc).
	Logger *agentlog.Logger
	// User is the sandbox user. When it is set and the agent runs as root
	// (in a sandbox: container root with only SETUID, SETGID and KILL), the
	// agent marks itself non-dumpable, does every file operation with
	// fsuid/fsgid = User and runs every command as User with no
	// supplementary group but the command's tag (see tagBase), by which
	// all its descendants are found and ended on timeout or cancel. When the agent is not root, or User is nil,
	// files and commands simply use the agent's own identity.
	User *User
	// Reaper, when set, owns every wait of the agent's children: the agent
	// is its box's PID 1 (or a subreaper) and reaps orphans with it.
	// Commands are then started through it and never waited for
	// otherwise (see Reaper). Nil: commands are waited for directly,
	// and something else (sandbox-agent init) reaps orphans.
	Reaper *Reaper
	// BeforeCommands, if set, runs once the first response is out (or a
	// command is about to start), after the agent has taken its identity
	// (threads it makes are made with that identity, and the change of
	// identity, a system call on every thread, each signalled, reached
	// fewer of them); no command starts before it has returned. Requests
	// that start none (hello, file operations) do not wait for it.
	BeforeCommands func()
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
		c.Logger = agentlog.Discard()
	}
	return c
}

// server is the state of one Serve call.
type server struct {
	cfg  Config
	lg   *agentlog.Logger
	w    *agentproto.Writer
	root *os.Root // cfg.Root, for execute's cwd and offload file
	// devNull is the stdin of execute's commands, opened once; nil: each
	// start opens /dev/null (command.spawn).
	devNull *os.File
	// oom raises the OOM score of each command it starts above the
	// agent's own (nil: commands keep the agent's).
	oom *oomRaise
	// as is the user commands start as; nil runs them as the agent.
	as *User
	// commandsReady is closed once the commands' preparation has
	// returned (see preparation); prepareNow, closed by startPreparing,
	// starts it.
	commandsReady chan struct{}
	prepareNow    chan struct{}
	prepareOnce   sync.Once
	// raise: the agent's effective ids are as's, and a command is
	// started from a thread raised back to root (spawnAsRoot).
	raise bool
	// environExposed: the kernel lets the sandbox user read the
	// environment of a process of another uid (gVisor's procfs), so a
	// service's environment would not be out of commands' reach and a
	// service with one is refused (see environReadable).
	environExposed bool

	// stop cancels every request and ends Serve (write failures use it).
	stop context.CancelCauseFunc
	// shutdown is closed when Serve stops taking work; pending SIGKILL
	// escalations then fire at once.
	shutdown chan struct{}

	mu        sync.Mutex
	closed    bool                          // no new work may start
	wg        sync.WaitGroup                // work in progress, also inline frames
	work      chan func()                   // hands a request to an idle worker
	workers   sync.WaitGroup                // worker goroutines, idle ones included
	idle      atomic.Int32                  // workers waiting on work
	inflight  map[uint64]context.CancelFunc // cancels of running requests
	uploads   map[string]*fileops.TempFile  // open uploads by handle
	downloads map[string]*fileops.DownloadFile
	procs     map[uint64]*proc       // running interactive processes and port forwards by request id
	lent      map[uint64]*lentOutput // output pipes of streaming executes by request id
	conns     int                    // how many of procs are port forwards
	nextID    uint64                 // last handle number
	lastTag   uint32                 // last command tag issued (see tagBase)

	// The channel's pipes (when in and out are pipes) are grown to
	// bulkPipeBytes while bulk bytes flow: a transfer is open or a
	// streaming execute runs. They go back to their size when none is,
	// so idle sandboxes hold no large pipe (the kernel counts pipe
	// capacity against its owner's pipe-user-pages-soft, shared by every
	// container's root).
	in, out  any
	streams  int    // streaming executes running
	grown    bool   // the pipes are at bulkPipeBytes
	pipeSize [2]int // their sizes before (0: not a pipe)
}

// Streamer is the streaming part of a file engine, which uploads and
// downloads go through: an upload is a temp file written at offsets and
// renamed into place atomically on commit; a download is an open file read
// at offsets. Nothing is buffered whole. *fileops.Engine implements it.
type Streamer interface {
	CreateTemp(ctx context.Context, path string) (*fileops.TempFile, error)
	OpenDownload(ctx context.Context, path string) (*fileops.DownloadFile, error)
}

// MaxOpenTransfers bounds the uploads and the downloads (each) open at
// once on one channel; each holds a file descriptor.
const MaxOpenTransfers = 64

// Serve answers the agentproto request frames read from in with response
// frames written to out, until in reaches EOF (nil), ctx ends (ctx's
// error), reading fails, or writing a response fails. Before it returns it
// cancels every request in flight and waits for them, so commands started
// by execute are killed and their goroutines are gone; open uploads are
// aborted (their temp files removed) and open downloads closed.
//
// out is written until Serve returns: if nobody reads it, writes block, so
// close the reading end (making writes fail) rather than abandoning it.
// When ctx ends while a read of in is blocked, Serve unblocks it with
// SetReadDeadline if in supports that (an *os.File pipe); otherwise Serve
// returns and the reading goroutine ends at in's next read, without doing
// anything more.
func Serve(ctx context.Context, in io.Reader, out io.Writer, cfg Config) error {
	cfg = cfg.withDefaults()
	// Opened while the agent still has its own identity (the file is
	// root's once the agent is non-dumpable).
	oom := openOomRaise()
	defer oom.close()
	var as *User
	raise := false
	if cfg.User != nil && os.Geteuid() == 0 {
		if err := setDumpable(false); err != nil {
			return fmt.Errorf("sandbox agent: mark non-dumpable: %w", err)
		}
		switch err := dropFileIdentity(*cfg.User); {
		case errors.Is(err, syscall.ENOSYS):
			// gVisor has no setfsuid (ENOSYS, still): the agent keeps root
			// as its real and saved uid and takes the sandbox user as its
			// effective one, raising a thread back to root only to start
			// a command (docs/security.md, gVisor).
			if err := dropEffectiveIdentity(*cfg.User); err != nil {
				return fmt.Errorf("sandbox agent: %w", err)
			}
			as, raise = cfg.User, true
			cfg.Logger.Info("no setfsuid in this kernel: the agent runs with the sandbox user as its effective ids", agentlog.Uint64("uid", uint64(cfg.User.UID)))
		case err != nil:
			return fmt.Errorf("sandbox agent: %w", err)
		default:
			as = cfg.User
		}
	}
	if as != nil {
		// Commands, services and file operations share the workspace
		// through the sandbox group: what any of them creates is
		// group-writable (children inherit the umask).
		syscall.Umask(0o002)
		if err := shareWorkspace(cfg.Workspace); err != nil {
			cfg.Logger.Warn("the workspace stays closed to service processes", agentlog.String("workspace", cfg.Workspace), agentlog.Err(err))
		}
	}
	root, err := os.OpenRoot(cfg.Root)
	if err != nil {
		return fmt.Errorf("sandbox agent: open root %s: %w", cfg.Root, err)
	}
	defer root.Close()
	// One /dev/null is every command's stdin, so an execute does not open
	// it again; without one, each start opens it. A plain open: os.Open
	// would register it with the runtime's poller, three calls more while
	// the box starts, and a start's Fd would take it back out.
	var devNull *os.File
	if fd, err := syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err == nil {
		devNull = os.NewFile(uintptr(fd), os.DevNull)
		defer devNull.Close()
	}

	// A pipe end is read and written with raw calls (rawPipe).
	if p, ok := newRawPipe(in); ok {
		in = p
	}
	if p, ok := newRawPipe(out); ok {
		out = p
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	s := &server{
		cfg:            cfg,
		lg:             cfg.Logger.With(agentlog.String("logger", "sandbox-agent")),
		w:              agentproto.NewWriter(out),
		root:           root,
		devNull:        devNull,
		oom:            oom,
		as:             as,
		raise:          raise,
		environExposed: as != nil && environReadable(),
		stop:           stop,
		shutdown:       make(chan struct{}),
		work:           make(chan func()),
		inflight:       map[uint64]context.CancelFunc{},
		lent:           map[uint64]*lentOutput{},
		uploads:        map[string]*fileops.TempFile{},
		downloads:      map[string]*fileops.DownloadFile{},
		procs:          map[uint64]*proc{},
		lastTag:        firstTag(),
		commandsReady:  make(chan struct{}),
		prepareNow:     make(chan struct{}),
		in:             in,
		out:            out,
	}

	if prepare := s.preparation(); prepare != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer close(s.commandsReady)
			<-s.prepareNow
			select {
			case <-s.shutdown: // nothing is left to start
			default:
				prepare()
			}
		}()
	} else {
		close(s.commandsReady)
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
	s.mu.Unlock()
	close(s.shutdown)
	s.startPreparing()
	stop(err)
	s.wg.Wait()
	s.workers.Wait()
	// Open transfers die with the channel: their temp files are removed.
	for _, u := range s.uploads {
		_ = u.Abort()
	}
	for _, d := range s.downloads {
		_ = d.Close()
	}
	s.uploads, s.downloads = nil, nil
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
			s.lg.Warn("skipping an oversized request frame", agentlog.Int("limit", agentproto.MaxFrameBytes))
			continue
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return nil
		default:
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("sandbox agent: read request: %w", err)
		}
		// A binary payload follows its frame and is read before the next.
		req, derr := agentproto.DecodeRequest(frame)
		if derr == nil && req.Bin > 0 {
			if limit := agentproto.PayloadLimit(req.Op); req.Bin > limit {
				return fmt.Errorf("sandbox agent: a %s request payload of %d bytes exceeds %d", req.Op, req.Bin, limit)
			}
			req.Payload = getChunk(req.Bin)
			if err = r.ReadPayloadInto(req.Payload); err != nil {
				return fmt.Errorf("sandbox agent: read a request payload: %w", err)
			}
		}
		if !s.begin() {
			return context.Cause(ctx)
		}
		s.dispatch(ctx, frame, req, derr)
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

// tunePipes grows the channel's pipes while bulk work is under way and
// shrinks them back once none is; callers call it after opening or
// closing a transfer or a streaming execute. Shrinking a pipe that still
// holds more than its old size fails; it is retried at the next call.
func (s *server) tunePipes() {
	s.mu.Lock()
	defer s.mu.Unlock()
	busy := len(s.uploads)+len(s.downloads)+s.streams > 0 && !s.closed
	switch {
	case busy && !s.grown:
		s.pipeSize[0], _ = setPipeSize(s.in, bulkPipeBytes)
		s.pipeSize[1], _ = setPipeSize(s.out, bulkPipeBytes)
		s.grown = true
	case !busy && s.grown:
		s.grown = false
		for i, f := range []any{s.in, s.out} {
			if want := s.pipeSize[i]; want > 0 {
				if _, now := setPipeSize(f, want); now != want {
					s.grown = true // still holds data: retried next time
				}
			}
		}
	}
}

// dispatch handles one frame. Cheap operations whose order matters
// (upload_open, cancel, hello) run inline, in frame order; the others,
// upload chunks and download reads included, run in their own goroutine,
// so the chunks of a transfer window are written or read in parallel with
// decoding the next frames.
func (s *server) dispatch(ctx context.Context, frame []byte, req agentproto.Request, err error) {
	if err != nil {
		if id := agentproto.PeekID(frame); id != 0 {
			s.send(agentproto.Failure(id, backend.Errorf(backend.CodeInvalidArgument, "", "%v", err)))
		} else {
			s.lg.Warn("skipping a malformed request frame without an id", agentlog.Err(err))
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
	case agentproto.OpLentTaken:
		s.send(s.lentTaken(req))
		return
	case agentproto.OpUploadOpen:
		s.send(s.uploadOpen(ctx, req))
		return
	case agentproto.OpProcAck:
		s.send(s.procAck(req))
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

	run := func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.inflight, req.ID)
			s.mu.Unlock()
			cancel()
		}()
		resp := s.handle(rctx, req)
		s.send(resp)
		// Nothing holds a payload once its request is answered: handlers
		// use it synchronously, and send has written the response's.
		putChunk(req.Payload)
		if req.Op == agentproto.OpDownloadRead {
			putChunk(resp.Data)
		}
	}
	select {
	case s.work <- run: // an idle worker takes it
	default:
		s.workers.Add(1)
		go s.worker(run)
	}
	// The request runs before the reader's next read: with one P (a box
	// of one CPU) the reader would otherwise first try the channel again,
	// find nothing (EAGAIN) and only then park, one system call on every
	// request's path, about 50 µs under gVisor (docs/benchmarks.md,
	// B1-runsc). After the yield that read happens once the answer is out.
	runtime.Gosched()
}

// maxIdleWorkers is how many request goroutines stay, once their request
// is done, for the next one (worker).
const maxIdleWorkers = 2

// worker runs run, a request, on its own goroutine, then stays for the
// next request dispatch hands it while no more than maxIdleWorkers wait
// so, until Serve stops. A new goroutine's stack starts small and grows,
// copied each time, as the request's calls deepen; a worker's has already
// grown: about 20 µs less per request under gVisor (docs/benchmarks.md,
// B1-runsc).
func (s *server) worker(run func()) {
	defer s.workers.Done()
	for {
		run()
		if s.idle.Add(1) > maxIdleWorkers {
			s.idle.Add(-1)
			return
		}
		select {
		case run = <-s.work:
		case <-s.shutdown:
			run = nil
		}
		s.idle.Add(-1)
		if run == nil {
			return
		}
	}
}

// handle runs one request that has its own goroutine and returns its final
// response; stream events are sent on the way.
func (s *server) handle(ctx context.Context, req agentproto.Request) agentproto.Response {
	// The request's logger is built only when debug logging is on: its
	// fields cost an allocation and an encoding per request otherwise.
	lg := s.lg
	if lg.Enabled(agentlog.LevelDebug) {
		lg = lg.With(agentlog.Uint64("request-id", req.ID), agentlog.String("op", string(req.Op)))
		lg.Debug("request")
	}
	switch req.Op {
	case agentproto.OpExecute:
		var a agentproto.ExecuteArgs
		if e := decodeArgs(req, &a); e != nil {
			return agentproto.Failure(req.ID, e)
		}
		var emit func([]byte) error
		if a.Stream {
			s.mu.Lock()
			s.streams++
			s.mu.Unlock()
			s.tunePipes()
			defer func() {
				s.mu.Lock()
				s.streams--
				s.mu.Unlock()
				s.tunePipes()
			}()
			emit = func(b []byte) error {
				return s.w.Write(agentproto.Response{ID: req.ID, Event: agentproto.EventOutput, Data: b})
			}
			if a.Lend {
				var done func()
				emit, done = s.lendOutput(req.ID, emit)
				defer done()
			}
		}
		res, err := s.execute(ctx, a.ExecuteRequest, emit)
		if err != nil {
			lg.Debug("execute failed", agentlog.String("code", string(backend.CodeOf(err))))
			return agentproto.Failure(req.ID, backend.FromOS("execute", "", err))
		}
		return agentproto.Result(req.ID, res)
	case agentproto.OpProcStart:
		return s.procStart(ctx, req)
	case agentproto.OpProcWrite:
		return s.procWrite(req)
	case agentproto.OpProcSignal:
		return s.procSignal(req)
	case agentproto.OpUploadFile:
		return s.uploadFile(ctx, req)
	case agentproto.OpUploadChunk:
		return s.uploadChunk(req)
	case agentproto.OpUploadClose:
		return s.uploadClose(ctx, req)
	case agentproto.OpDownloadOpen:
		return s.downloadOpen(ctx, req)
	case agentproto.OpDownloadRead:
		return s.downloadRead(req)
	case agentproto.OpDownloadClose:
		return s.downloadClose(req)
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
				return s.cfg.Files.Write(ctx, a.Path, req.Payload)
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
	err := agentproto.Unmarshal(raw, v)
	if err != nil {
		return backend.Errorf(backend.CodeInvalidArgument, "", "malformed %s arguments: %v", req.Op, err)
	}
	return nil
}

// send writes a response. A final response too large for a frame is
// replaced by a too_large error; any other write failure means the channel
// is gone and stops the server.
func (s *server) send(resp agentproto.Response) {
	err := s.w.Write(resp)
	s.startPreparing()
	if errors.Is(err, agentproto.ErrFrameTooLarge) && resp.Done {
		err = s.w.Write(agentproto.Failure(resp.ID, backend.Errorf(backend.CodeTooLarge, "",
			"the result is larger than the %d-byte agent frame limit; narrow the request (a smaller path, pattern, max_count or limit)", agentproto.MaxFrameBytes)))
	}
	if err != nil {
		s.lg.Warn("write response", agentlog.Uint64("request-id", resp.ID), agentlog.Err(err))
		s.stop(fmt.Errorf("sandbox agent: write response: %w", err))
	}
}

// preparation is what runs before the first command: Config.BeforeCommands
// and, under gVisor, warmShell. It starts once the first response is out
// or a command is about to start (startPreparing), not with Serve, so it
// does not delay the first answer: the hello a worker waits for while the
// box starts, when every system call costs a round trip under gVisor.
// Nil when there is nothing to prepare.
func (s *server) preparation() func() {
	before := s.cfg.BeforeCommands
	if !s.raise { // not gVisor: no shell to warm
		return before
	}
	return func() {
		if before != nil {
			before()
		}
		warmShell()
	}
}

// startPreparing starts the commands' preparation, once.
func (s *server) startPreparing() {
	s.prepareOnce.Do(func() { close(s.prepareNow) })
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

// streamer returns the file engine's streaming part, or the unsupported
// error of op.
func (s *server) streamer(op agentproto.Op) (Streamer, *backend.Error) {
	if s.cfg.Files == nil {
		return nil, unsupportedFiles(op)
	}
	st, ok := s.cfg.Files.(Streamer)
	if !ok {
		return nil, backend.Errorf(backend.CodeUnsupported, "", "%s is not available: this sandbox agent's file engine cannot stream", op)
	}
	return st, nil
}

// transferArgs returns the streamer and the arguments of a request that
// opens a transfer, or the error to answer it with.
func (s *server) transferArgs(req agentproto.Request) (Streamer, agentproto.OpenArgs, *backend.Error) {
	var a agentproto.OpenArgs
	st, e := s.streamer(req.Op)
	if e == nil {
		e = decodeArgs(req, &a)
	}
	return st, a, e
}

// newHandle returns a fresh handle with prefix; s.mu is held.
func (s *server) newHandle(prefix string) string {
	s.nextID++
	return fmt.Sprintf("%s%d", prefix, s.nextID)
}

// uploadOpen creates the upload's temp file next to its target.
func (s *server) uploadOpen(ctx context.Context, req agentproto.Request) agentproto.Response {
	st, a, e := s.transferArgs(req)
	if e != nil {
		return agentproto.Failure(req.ID, e)
	}
	s.mu.Lock()
	full := len(s.uploads) >= MaxOpenTransfers
	s.mu.Unlock()
	if full {
		return agentproto.Failure(req.ID, tooManyTransfers("uploads"))
	}
	fctx, cancel := context.WithTimeout(ctx, s.cfg.FileOpTimeout)
	defer cancel()
	tf, err := st.CreateTemp(fctx, a.Path)
	if err != nil {
		return agentproto.Failure(req.ID, backend.FromOS("upload", a.Path, err))
	}
	var lent *agentproto.Lent
	if a.Lend {
		if f, err := tf.Lend(); err == nil {
			lent = lend(f)
		}
	}
	s.mu.Lock()
	h := s.newHandle("u")
	s.uploads[h] = tf
	s.mu.Unlock()
	s.tunePipes()
	return agentproto.Result(req.ID, agentproto.UploadHandle{Handle: h, Lent: lent})
}

// uploadFile writes a whole file sent as the request's payload (at most
// one chunk) the way an upload does: into a temp file renamed into place.
func (s *server) uploadFile(ctx context.Context, req agentproto.Request) agentproto.Response {
	st, a, e := s.transferArgs(req)
	if e != nil {
		return agentproto.Failure(req.ID, e)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.FileOpTimeout)
	defer cancel()
	tf, err := st.CreateTemp(ctx, a.Path)
	if err != nil {
		return agentproto.Failure(req.ID, backend.FromOS("upload", a.Path, err))
	}
	if _, err := tf.WriteAt(req.Payload, 0); err != nil {
		_ = tf.Abort()
		return agentproto.Failure(req.ID, backend.FromOS("upload", a.Path, err))
	}
	res, err := tf.Commit(ctx, int64(len(req.Payload)))
	if err != nil {
		return agentproto.Failure(req.ID, backend.FromOS("upload", a.Path, err))
	}
	return agentproto.Result(req.ID, res)
}

// lend names f's descriptor and identity for the worker to borrow
// (docs/security.md, "Bulk bytes through the agent's open file"); nil when
// f cannot be described, and the bytes then go through the channel.
func lend(f *os.File) *agentproto.Lent {
	var st syscall.Stat_t
	sc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	fd := -1
	if err := sc.Control(func(d uintptr) {
		if syscall.Fstat(int(d), &st) == nil {
			fd = int(d)
		}
	}); err != nil || fd < 0 {
		return nil
	}
	return &agentproto.Lent{FD: fd, Dev: uint64(st.Dev), Ino: st.Ino}
}

func tooManyTransfers(what string) *backend.Error {
	return backend.Errorf(backend.CodeTooLarge, "", "%d %s are already open on this channel; finish some first", MaxOpenTransfers, what).
		WithDetail("limit", fmt.Sprint(MaxOpenTransfers))
}

// uploadChunk writes one chunk at its offset. A chunk past the item cap
// aborts the upload.
func (s *server) uploadChunk(req agentproto.Request) agentproto.Response {
	var a agentproto.UploadChunkArgs
	if e := decodeArgs(req, &a); e != nil {
		return agentproto.Failure(req.ID, e)
	}
	s.mu.Lock()
	u := s.uploads[a.Handle]
	s.mu.Unlock()
	if u == nil {
		return agentproto.Failure(req.ID, unknownHandle("upload", a.Handle))
	}
	if _, err := u.WriteAt(req.Payload, a.Offset); err != nil {
		if backend.CodeOf(err) == backend.CodeTooLarge {
			s.mu.Lock()
			delete(s.uploads, a.Handle)
			s.mu.Unlock()
			s.tunePipes()
			_ = u.Abort()
		}
		return agentproto.Failure(req.ID, backend.FromOS("upload", u.Path(), err))
	}
	return agentproto.Result(req.ID, struct{}{})
}

func unknownHandle(kind, h string) *backend.Error {
	return backend.Errorf(backend.CodeInvalidArgument, "", "unknown %s handle %s (never opened, already closed, or dropped after an error)", kind, backend.Quote(h))
}

// uploadClose ends an upload. Without commit the temp file is removed (an
// unknown handle is then fine: aborting is idempotent); with commit the
// size is checked and the temp file renamed over the target atomically.
func (s *server) uploadClose(ctx context.Context, req agentproto.Request) agentproto.Response {
	var a agentproto.UploadCloseArgs
	if e := decodeArgs(req, &a); e != nil {
		return agentproto.Failure(req.ID, e)
	}
	s.mu.Lock()
	u := s.uploads[a.Handle]
	delete(s.uploads, a.Handle)
	s.mu.Unlock()
	s.tunePipes()
	if !a.Commit {
		if u != nil {
			if err := u.Abort(); err != nil {
				return agentproto.Failure(req.ID, backend.FromOS("upload", u.Path(), err))
			}
		}
		return agentproto.Result(req.ID, struct{}{})
	}
	if u == nil {
		return agentproto.Failure(req.ID, unknownHandle("upload", a.Handle))
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.FileOpTimeout)
	defer cancel()
	res, err := u.Commit(ctx, a.Size)
	if err != nil {
		return agentproto.Failure(req.ID, backend.FromOS("upload", u.Path(), err))
	}
	return agentproto.Result(req.ID, res)
}

// downloadOpen opens a file for reads at offsets and reports its size.
func (s *server) downloadOpen(ctx context.Context, req agentproto.Request) agentproto.Response {
	st, a, e := s.transferArgs(req)
	if e != nil {
		return agentproto.Failure(req.ID, e)
	}
	s.mu.Lock()
	full := len(s.downloads) >= MaxOpenTransfers
	s.mu.Unlock()
	if full {
		return agentproto.Failure(req.ID, tooManyTransfers("downloads"))
	}
	fctx, cancel := context.WithTimeout(ctx, s.cfg.FileOpTimeout)
	defer cancel()
	d, err := st.OpenDownload(fctx, a.Path)
	if err != nil {
		return agentproto.Failure(req.ID, backend.FromOS("download", a.Path, err))
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		d.Close()
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeCancelled, a.Path, "download %s: the agent is shutting down", a.Path))
	}
	h := s.newHandle("d")
	s.downloads[h] = d
	s.mu.Unlock()
	s.tunePipes()
	var lent *agentproto.Lent
	if a.Lend {
		lent = lend(d.File())
	}
	return agentproto.Result(req.ID, agentproto.DownloadHandle{Handle: h, Size: d.Size(), Lent: lent})
}

// downloadRead returns exactly the bytes asked for, or an error (the range
// is outside the file, or the file changed size since the open).
func (s *server) downloadRead(req agentproto.Request) agentproto.Response {
	var a agentproto.DownloadReadArgs
	if e := decodeArgs(req, &a); e != nil {
		return agentproto.Failure(req.ID, e)
	}
	s.mu.Lock()
	d := s.downloads[a.Handle]
	s.mu.Unlock()
	if d == nil {
		return agentproto.Failure(req.ID, unknownHandle("download", a.Handle))
	}
	if a.Length < 0 || a.Length > agentproto.ChunkBytes {
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeInvalidArgument, d.Path(),
			"download %s: read length %d is outside 0..%d", d.Path(), a.Length, agentproto.ChunkBytes))
	}
	buf := getChunk(a.Length)
	if _, err := d.ReadAt(buf, a.Offset); err != nil {
		putChunk(buf)
		return agentproto.Failure(req.ID, backend.FromOS("download", d.Path(), err))
	}
	return agentproto.Response{ID: req.ID, Done: true, Result: agentproto.RawMessage("{}"), Data: buf}
}

// downloadClose closes a download; an unknown handle is fine (closing is
// idempotent).
func (s *server) downloadClose(req agentproto.Request) agentproto.Response {
	var a agentproto.DownloadCloseArgs
	if e := decodeArgs(req, &a); e != nil {
		return agentproto.Failure(req.ID, e)
	}
	s.mu.Lock()
	d := s.downloads[a.Handle]
	delete(s.downloads, a.Handle)
	s.mu.Unlock()
	s.tunePipes()
	if d != nil {
		_ = d.Close()
	}
	return agentproto.Result(req.ID, struct{}{})
}
