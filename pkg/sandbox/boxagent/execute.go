package boxagent

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/vpath"
	"github.com/plumbhq/plumb/pkg/sandbox/agentlog"
)

// Shell is the interpreter of execute: POSIX sh, since images need not
// have bash.
const Shell = "/bin/sh"

// MaxInlineOutput is the largest accepted max_output_bytes. JSON may
// escape a byte as six ("\u003c"), and the result must fit one agent
// frame.
const MaxInlineOutput = 2 << 20

// readBufBytes is the size of one read from the output pipe; a read returns
// whatever the pipe holds up to this, which coalesces small writes.
const readBufBytes = 64 << 10

// plan is a validated execute request.
type plan struct {
	command    string
	dir        string // directory in the container
	env        []string
	timeout    time.Duration
	maxOutput  int
	offload    string // normalized virtual path; "" for none
	offloadRel string // offload relative to the root
}

// execute runs req per docs/file-tools.md §4.8. emit, when non-nil, receives the
// raw output as it is produced (before execute returns). The error is
// always a *backend.Error; a failing or timed-out command is a result.
func (s *server) execute(ctx context.Context, req backend.ExecuteRequest, emit func([]byte) error) (backend.ExecuteResult, error) {
	started := time.Now()
	p, err := s.plan(req)
	if err != nil {
		return backend.ExecuteResult{}, err
	}
	var off *os.File
	if p.offload != "" {
		off, err = s.openOffload(p)
		if err != nil {
			return backend.ExecuteResult{}, err
		}
	}

	pr, pw, err := os.Pipe()
	if err != nil {
		closeOffload(s.root, off, p, false)
		return backend.ExecuteResult{}, backend.Errorf(backend.CodeInternal, "", "execute: create the output pipe: %v", err)
	}
	var tag uint32
	if s.as != nil {
		tag = s.newTag()
	}
	cmd := s.command(p, pw, tag)
	pgid, wait, serr := s.start(cmd, "execute")
	pw.Close() // the children hold it now
	if serr != nil {
		pr.Close()
		closeOffload(s.root, off, p, false)
		return backend.ExecuteResult{}, serr
	}
	lg := s.lg.With(agentlog.Int("pgid", pgid))

	out := newOutput(p.maxOutput, off)
	var co *coalescer
	if emit != nil {
		co = newCoalescer(emit)
		go co.run()
	}
	bufBytes := readBufBytes
	if emit != nil {
		// Streaming: a larger pipe lets the command write ahead while the
		// agent sends, and a read then takes a whole chunk's worth.
		if _, now := setPipeSize(pr, bulkPipeBytes); now > bufBytes {
			bufBytes = min(now, chunkBytes)
		}
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, bufBytes)
		for {
			n, err := pr.Read(buf)
			if n > 0 {
				out.write(buf[:n])
				if co != nil {
					co.push(buf[:n])
				}
			}
			if err != nil {
				return
			}
		}
	}()

	waited := make(chan exitStatus, 1)
	go func() { waited <- wait() }()
	timer := time.NewTimer(p.timeout)
	defer timer.Stop()
	var timedOut, cancelled bool
	var st exitStatus
	select {
	case st = <-waited:
	case <-timer.C:
		timedOut = true
		s.end(pgid, tag, false, lg)
		st = <-waited
	case <-ctx.Done():
		cancelled = true
		s.end(pgid, tag, false, lg)
		st = <-waited
	}

	// The shell is gone; background children may still hold the pipe open,
	// so draining stops at the deadline.
	_ = pr.SetReadDeadline(time.Now().Add(backend.DrainGrace))
	select {
	case <-readDone:
	case <-ctx.Done():
		_ = pr.SetReadDeadline(time.Now())
		<-readDone
	}
	pr.Close()
	if co != nil {
		co.close()
		<-co.done
	}

	res := backend.ExecuteResult{
		TimedOut:    timedOut,
		OutputBytes: out.total,
	}
	res.Output, res.Truncated = out.render()
	if off != nil {
		res.CaptureTruncated = out.captureTruncated
		if closeOffload(s.root, off, p, res.Truncated && !cancelled) {
			res.OffloadedPath = p.offload
		}
	}
	if cancelled {
		return backend.ExecuteResult{}, backend.Errorf(backend.CodeCancelled, "", "execute was cancelled; its process group was killed")
	}
	res.ExitCode = st.code()
	if timedOut {
		code := 124
		res.ExitCode = &code
	}
	res.DurationMS = time.Since(started).Milliseconds()
	return res, nil
}

// command is the process of one execute: the shell in its own process
// group, as the sandbox user carrying tag when the agent has a user (tag
// is then non-zero). Stdin is /dev/null; stdout and stderr share out, so
// the interleaving is the true order.
type command struct {
	script, dir           string
	env                   []string
	stdin, stdout, stderr *os.File // nil stdin: /dev/null, opened for the start
	cred                  *syscall.Credential
}

func (s *server) command(p plan, out *os.File, tag uint32) *command {
	c := &command{script: p.command, dir: p.dir, env: p.env, stdin: s.devNull, stdout: out, stderr: out}
	if s.as != nil {
		c.cred = s.as.credential(tag)
	}
	return c
}

// spawn starts c with one fork and exec, and returns its pid. It is not
// os/exec: os.StartProcess asks the kernel for a pidfd of every child and
// probes, before the first, whether pidfds work (a throwaway child among
// other calls, about 2 ms while a gVisor box starts); the Reaper opens a
// pidfd of its own, and without one the wait is a plain wait4.
func (c *command) spawn() (int, error) {
	stdin := c.stdin
	if stdin == nil {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		stdin = f
	}
	pid, err := syscall.ForkExec(Shell, []string{"sh", "-c", c.script}, &syscall.ProcAttr{
		Dir:   c.dir,
		Env:   c.env,
		Files: []uintptr{stdin.Fd(), c.stdout.Fd(), c.stderr.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Credential: c.cred},
	})
	runtime.KeepAlive(stdin)
	runtime.KeepAlive(c)
	return pid, err
}

// exitStatus is a command's wait status; ok is false when the wait failed
// and the status is unknown.
type exitStatus struct {
	ws syscall.WaitStatus
	ok bool
}

// start starts c as the sandbox user (raising a thread to root first
// where the agent runs with the user's effective ids) and returns its pid
// and how to wait for it; the error names op. With a Reaper (the agent is
// PID 1), the command is registered with it as it starts and wait takes
// its status from it: the reaper owns every wait.
func (s *server) start(c *command, op string) (pid int, wait func() exitStatus, _ *backend.Error) {
	s.startPreparing()
	<-s.commandsReady
	spawn := func() (err error) {
		return s.oom.start(func() error {
			pid, err = c.spawn()
			return err
		})
	}
	if s.raise {
		plain := spawn
		spawn = func() error { return spawnAsRoot(*s.as, plain) }
	}
	var err error
	if r := s.cfg.Reaper; r != nil {
		var reaped func() syscall.WaitStatus
		reaped, pid, err = r.start(func() (int, error) {
			err := spawn()
			return pid, err
		})
		if err == nil {
			wait = func() exitStatus { return exitStatus{ws: reaped(), ok: true} }
		}
	} else if err = spawn(); err == nil {
		wait = func() exitStatus {
			var ws syscall.WaitStatus
			for {
				_, err := syscall.Wait4(pid, &ws, 0, nil)
				if err != syscall.EINTR {
					return exitStatus{ws: ws, ok: err == nil}
				}
			}
		}
	}
	switch {
	case err == nil:
		return pid, wait, nil
	case errors.Is(err, fs.ErrNotExist):
		return 0, nil, backend.Errorf(backend.CodeUnsupported, "", "%s: this sandbox image has no %s", op, Shell)
	case errors.Is(err, syscall.EAGAIN):
		// The box's pids limit (its cgroup) refused the fork: box code
		// holds every process it may have. Not a fault of the worker.
		return 0, nil, backend.Errorf(backend.CodeResourceExhausted, "", "%s: cannot start %s: the sandbox's process limit is reached (fork: resource temporarily unavailable); end some of its processes, or create the sandbox with a higher pids limit", op, Shell)
	default:
		return 0, nil, backend.Errorf(backend.CodeInternal, "", "%s: start %s: %v", op, Shell, err)
	}
}

// end ends a command: SIGTERM to its process group and to every process
// carrying its tag now, and SIGKILL to all of them after
// backend.KillGrace, or at once when Serve shuts down. The tag reaches
// descendants that left the group (setsid, double forks); without a tag
// (no sandbox user) only the group is reached. service says the command
// is a service process (see signalling). The escalation outlives the
// request if need be, but never Serve.
func (s *server) end(pgid int, tag uint32, service bool, lg *agentlog.Logger) {
	s.signalling(service, func() {
		if err := signalCommand(pgid, tag, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			lg.Warn("SIGTERM process group", agentlog.Err(err))
		}
	})
	s.wg.Add(1) // the calling request holds a count
	go func() {
		defer s.wg.Done()
		t := time.NewTimer(backend.KillGrace)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.shutdown:
		}
		s.signalling(service, func() {
			if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				lg.Warn("SIGKILL process group", agentlog.Err(err))
			}
			if tag != 0 && !killTagged(tag) {
				lg.Warn("processes of a command survived SIGKILL", agentlog.Uint64("tag", uint64(tag)))
			}
		})
	}()
}

// signalling runs send, which signals processes, with the rights it needs:
// as it is, except for a service (a uid of its own) where the agent runs
// with the sandbox user's effective ids (gVisor), whose signals only reach
// that user's processes; send then runs on a thread raised back to root,
// where CAP_KILL applies.
func (s *server) signalling(service bool, send func()) {
	if !service || !s.raise {
		send()
		return
	}
	if err := spawnAsRoot(*s.as, func() error { send(); return nil }); err != nil {
		s.lg.Warn("cannot raise a thread to signal a service process; signalling as the sandbox user", agentlog.Err(err))
		send()
	}
}

// code is the shell's status, or 128+n when signal n killed it; nil when
// the wait failed and the status is unknown.
func (st exitStatus) code() *int {
	var code int
	switch {
	case !st.ok:
		return nil
	case st.ws.Signaled():
		code = 128 + int(st.ws.Signal())
	case st.ws.Exited():
		code = st.ws.ExitStatus()
	default:
		return nil
	}
	return &code
}

// plan validates req in the order of docs/file-tools.md §4.8.
func (s *server) plan(req backend.ExecuteRequest) (plan, error) {
	var p plan
	switch {
	case len(req.Command) > backend.ExecuteMaxCommandBytes:
		return p, backend.Errorf(backend.CodeTooLarge, "",
			"execute: the command is %d bytes, over the %d-byte limit; write a script with write_file, then run it",
			len(req.Command), backend.ExecuteMaxCommandBytes).WithDetail("size", strconv.Itoa(len(req.Command))).WithDetail("limit", strconv.Itoa(backend.ExecuteMaxCommandBytes))
	case strings.TrimSpace(req.Command) == "":
		return p, backend.Errorf(backend.CodeInvalidArgument, "", "execute: the command is empty; pass a shell command to run")
	case strings.IndexByte(req.Command, 0) >= 0:
		return p, backend.Errorf(backend.CodeInvalidArgument, "", "execute: the command contains a NUL byte, which no shell command can hold")
	}
	p.command = req.Command

	maxS := int(s.cfg.MaxExecuteTimeout / time.Second)
	switch t := req.TimeoutSeconds; {
	case t == nil:
		p.timeout = min(backend.ExecuteDefaultTimeout, s.cfg.MaxExecuteTimeout)
	case *t == 0:
		p.timeout = s.cfg.MaxExecuteTimeout
	case *t < 0 || *t > maxS:
		return p, backend.Errorf(backend.CodeInvalidArgument, "",
			"execute: timeout %d s is out of range; use 1 to %d seconds, 0 for the maximum (%d s), or omit it for the default (%d s)",
			*t, maxS, maxS, int(min(backend.ExecuteDefaultTimeout, s.cfg.MaxExecuteTimeout)/time.Second))
	default:
		p.timeout = time.Duration(*t) * time.Second
	}

	switch m := req.MaxOutputBytes; {
	case m == 0:
		p.maxOutput = backend.ExecuteInlineOutput
	case m < 0 || m > MaxInlineOutput:
		return p, backend.Errorf(backend.CodeInvalidArgument, "", "execute: max_output_bytes %d is out of range; use 1 to %d, or 0 for the default (%d)",
			m, MaxInlineOutput, backend.ExecuteInlineOutput)
	default:
		p.maxOutput = m
	}

	env, err := mergeEnv(s.cfg.Env, req.Env)
	if err != nil {
		return p, err
	}

	if req.Cwd == "" {
		p.dir = s.cfg.Workspace
		if err := checkDir(os.Stat(p.dir)); err != nil {
			return p, backend.FromOS("execute in the workspace", p.dir, err)
		}
	} else {
		cwd, err := vpath.Normalize(req.Cwd)
		if err != nil {
			return p, err
		}
		if err := checkDir(s.root.Stat(relTo(cwd))); err != nil {
			return p, backend.FromOS("execute cwd", cwd, err)
		}
		p.dir = filepath.Join(s.cfg.Root, relTo(cwd))
	}
	// PWD describes the directory the shell starts in, not the agent's
	// (unless the request sets it).
	if _, ok := req.Env["PWD"]; !ok {
		env = append(withoutKey(env, "PWD"), "PWD="+p.dir)
	}
	p.env = env

	if req.OffloadPath != "" {
		off, err := vpath.Normalize(req.OffloadPath)
		if err != nil {
			return p, err
		}
		if off == "/" {
			return p, backend.Errorf(backend.CodeInvalidPath, off, "execute: offload_path / is a directory; name a file")
		}
		p.offload, p.offloadRel = off, relTo(off)
	}
	return p, nil
}

// checkDir turns a successful stat of a non-directory into ENOTDIR.
func checkDir(fi os.FileInfo, err error) error {
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return syscall.ENOTDIR
	}
	return nil
}

// relTo turns a normalized virtual path into a path relative to the root.
func relTo(p string) string {
	if p == "/" {
		return "."
	}
	return p[1:]
}

// mergeEnv validates the request env and returns base with the request's
// keys replaced or added (request keys sorted, for a stable order).
func mergeEnv(base []string, req map[string]string) ([]string, error) {
	keys := make([]string, 0, len(req))
	for k, v := range req {
		if !validEnvKey(k) {
			return nil, backend.Errorf(backend.CodeInvalidArgument, "", "execute: env key %s is invalid; keys must match ^[A-Za-z_][A-Za-z0-9_]*$", backend.Quote(k))
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, backend.Errorf(backend.CodeInvalidArgument, "", "execute: the value of env key %s contains a NUL byte", k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := make([]string, 0, len(base)+len(keys)+1)
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, over := req[k]; !over {
			env = append(env, kv)
		}
	}
	for _, k := range keys {
		env = append(env, k+"="+req[k])
	}
	return env, nil
}

// withoutKey drops key from env, in place.
func withoutKey(env []string, key string) []string {
	out := env[:0]
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != key {
			out = append(out, kv)
		}
	}
	return out
}

func validEnvKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// openOffload creates (or truncates) the offload file under the root,
// with its parent directories, as the agent's user.
func (s *server) openOffload(p plan) (*os.File, error) {
	if dir := filepath.Dir(p.offloadRel); dir != "." {
		if err := s.root.MkdirAll(dir, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) {
				err = syscall.ENOTDIR // a parent component is a file
			}
			return nil, backend.FromOS("execute offload", p.offload, err)
		}
	}
	f, err := s.root.OpenFile(p.offloadRel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, backend.FromOS("execute offload", p.offload, err)
	}
	return f, nil
}

// closeOffload closes the offload file and removes it unless keep; it
// reports whether the file was kept.
func closeOffload(root *os.Root, f *os.File, p plan, keep bool) bool {
	if f == nil {
		return false
	}
	if err := f.Close(); err != nil {
		keep = false
	}
	if !keep {
		_ = root.Remove(p.offloadRel)
	}
	return keep
}

// coalescer forwards output to a sink from its own goroutine, merging what
// accumulates while the sink is busy into chunks of at most
// agentproto.ChunkBytes. push blocks while a full chunk is pending, which
// slows the command down instead of buffering without bound. Two buffers
// take turns: the sink sends one while push fills the other, so no byte
// is copied but into the pending buffer.
type coalescer struct {
	sink func([]byte) error
	done chan struct{}

	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	spare  []byte // the buffer the sink returned, reused by run
	closed bool   // no more input
	broken bool   // the sink failed: drop input
}

func newCoalescer(sink func([]byte) error) *coalescer {
	c := &coalescer{sink: sink, done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *coalescer) push(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.buf) >= chunkBytes && !c.broken {
		c.cond.Wait()
	}
	if !c.broken {
		c.buf = append(c.buf, p...)
		c.cond.Broadcast()
	}
}

func (c *coalescer) close() {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
}

func (c *coalescer) run() {
	defer close(c.done)
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for len(c.buf) == 0 && !c.closed {
			c.cond.Wait()
		}
		if len(c.buf) == 0 {
			return
		}
		// Take the pending bytes; push continues into the spare buffer
		// (with what exceeds one chunk, the only bytes copied here).
		chunk := c.buf
		c.buf = c.spare[:0]
		if len(chunk) > chunkBytes {
			c.buf = append(c.buf, chunk[chunkBytes:]...)
			chunk = chunk[:chunkBytes]
		}
		c.spare = nil
		c.cond.Broadcast()
		c.mu.Unlock()
		err := c.sink(chunk)
		c.mu.Lock()
		if err != nil {
			c.broken = true
			c.buf = nil
			c.cond.Broadcast()
			continue
		}
		c.spare = chunk[:0] // the sink is done with it
	}
}

// warmShellMax bounds the shell file warmShell reads ahead.
const warmShellMax = 8 << 20

// warmShell reads the shell's file (Shell) into the kernel's cache ahead
// of the first command, through a mapping populated at once and dropped.
// It runs under gVisor only (see preparation), where each box has a page
// cache of its own: there the first execute would fault the shell in
// piece by piece, about 4 ms of its 16 (docs/benchmarks.md, B3-runsc),
// while the preparation runs as the worker answers the create and the
// caller sends its first request. Only a regular file no larger than
// warmShellMax is read (the open neither blocks on a FIFO nor takes a
// terminal; a file of another kind is closed unread), and the agent only
// maps it: it never runs, parses or writes it.
func warmShell() {
	fd, err := syscall.Open(Shell, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Size <= 0 || st.Size > warmShellMax {
		return
	}
	if b, err := syscall.Mmap(fd, 0, int(st.Size), syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_POPULATE); err == nil {
		_ = syscall.Munmap(b)
	}
}
