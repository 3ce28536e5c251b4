package python

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/model"
)

// ToolName is the tool's name.
const ToolName = "python"

// privateKey is where the tool keeps, in each agent context's State, the
// id of the interpreter that context has seen (to tell it when a later
// call lands in a fresh one).
const privateKey = "python"

// Defaults of Config.
const (
	DefaultTimeout         = 30 * time.Second
	DefaultMaxTimeout      = 10 * time.Minute
	DefaultIdleTimeout     = 30 * time.Minute
	DefaultMaxInterpreters = 64
	DefaultMaxOutputChars  = 64 << 10
	DefaultStartTimeout    = 2 * time.Minute
	DefaultPython          = "python3"
)

// probeRetry is how long a failed probe (the sandbox could not be reached)
// is remembered: meanwhile python is not offered, and model calls do not
// wait for the probe again.
const probeRetry = time.Minute

// Config configures a Manager; zero fields take the defaults.
type Config struct {
	// Timeout is a call's timeout when the model gives none.
	Timeout time.Duration
	// MaxTimeout caps the timeout_s the model may ask for.
	MaxTimeout time.Duration
	// IdleTimeout closes an interpreter nobody called for this long.
	IdleTimeout time.Duration
	// MaxInterpreters caps the interpreters running at once (one per
	// thread); at the cap the least recently used idle one is closed.
	MaxInterpreters int
	// MaxOutputChars bounds stdout, stderr and the value of one call,
	// each; the middle of a longer text is left out, with a note.
	MaxOutputChars int
	// StartTimeout bounds starting an interpreter (and the python3 probe),
	// sandbox creation included.
	StartTimeout time.Duration
	// Python is the interpreter command in the sandbox (default python3).
	Python string
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Timeout, DefaultTimeout)
	def(&c.MaxTimeout, DefaultMaxTimeout)
	def(&c.IdleTimeout, DefaultIdleTimeout)
	def(&c.StartTimeout, DefaultStartTimeout)
	if c.MaxTimeout < c.Timeout {
		c.MaxTimeout = c.Timeout
	}
	if c.MaxInterpreters <= 0 {
		c.MaxInterpreters = DefaultMaxInterpreters
	}
	if c.MaxOutputChars <= 0 {
		c.MaxOutputChars = DefaultMaxOutputChars
	}
	if c.Python == "" {
		c.Python = DefaultPython
	}
	return c
}

// Resolver finds what the tool needs in a thread's backend: a process
// starter for the interpreter and an executor for the python3 probe. nil
// for either means the backend cannot run Python.
type Resolver func(b backend.Backend) (backend.ProcessStarter, backend.Executor)

// Option adjusts a Manager.
type Option func(*Manager)

// WithLogger sets the logger (nil: none).
func WithLogger(lg *zap.Logger) Option {
	return func(m *Manager) {
		if lg != nil {
			m.lg = lg
		}
	}
}

// WithResolver replaces DefaultResolver (tests run interpreters on the
// host with it).
func WithResolver(r Resolver) Option { return func(m *Manager) { m.resolve = r } }

// WithClock sets the clock the idle timeout is measured with.
func WithClock(now func() time.Time) Option { return func(m *Manager) { m.now = now } }

// DefaultResolver takes the backend itself, or the default backend of a
// routing backend (backend/composite), when it starts processes and
// executes commands.
func DefaultResolver(b backend.Backend) (backend.ProcessStarter, backend.Executor) {
	ps := backend.ProcessStarterOf(b)
	if ps == nil {
		return nil, nil
	}
	ex, ok := b.(backend.Executor)
	if !ok {
		ex, _ = ps.(backend.Executor)
	}
	return ps, ex
}

// Manager owns the interpreters: one per thread, started on the first
// call, closed after IdleTimeout, at the MaxInterpreters cap, on a
// timeout or by Close. It also remembers, per thread, whether the
// sandbox has python3.
type Manager struct {
	cfg     Config
	lg      *zap.Logger
	resolve Resolver
	now     func() time.Time

	mu       sync.Mutex
	sessions map[string]*session
	probes   map[string]*probe
	live     int // interpreters running or starting
	closed   bool

	stop   chan struct{}
	reaped chan struct{}
}

// session is one thread's interpreter slot. sem serializes calls (and
// closing); gone and lost are guarded by sem, used by Manager.mu. it is
// written with both held, so either protects a read.
type session struct {
	thread string
	sem    chan struct{}
	it     *interp
	gone   bool   // removed from the map: look the thread up again
	lost   string // why the last interpreter was closed, for the next call
	used   time.Time
}

func (s *session) lock(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *session) tryLock() bool {
	select {
	case s.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s *session) unlock() { <-s.sem }

// probe is the python3 probe of one thread.
type probe struct {
	sem  chan struct{}
	done bool // known: ok is the answer
	ok   bool
	at   time.Time // of the answer, or of the failure when !done
}

// New returns a Manager; Close stops it.
func New(cfg Config, opts ...Option) *Manager {
	m := &Manager{
		cfg: cfg.withDefaults(), lg: zap.NewNop(), resolve: DefaultResolver, now: time.Now,
		sessions: map[string]*session{}, probes: map[string]*probe{},
		stop: make(chan struct{}), reaped: make(chan struct{}),
	}
	for _, o := range opts {
		o(m)
	}
	m.lg = m.lg.Named("python")
	go m.reaper()
	return m
}

// Config returns the effective configuration.
func (m *Manager) Config() Config { return m.cfg }

func (m *Manager) reaper() {
	defer close(m.reaped)
	every := min(max(m.cfg.IdleTimeout/4, time.Second), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.reap()
		}
	}
}

// reap closes interpreters idle for IdleTimeout and forgets old sessions
// and probes.
func (m *Manager) reap() {
	now := m.now()
	var idle []*session
	m.mu.Lock()
	for th, s := range m.sessions {
		if now.Sub(s.used) < m.cfg.IdleTimeout || !s.tryLock() {
			continue
		}
		if s.it != nil {
			idle = append(idle, s)
			continue
		}
		s.gone = true
		delete(m.sessions, th)
		s.unlock()
	}
	for th, p := range m.probes {
		if now.Sub(p.at) >= m.cfg.IdleTimeout {
			delete(m.probes, th)
		}
	}
	m.mu.Unlock()
	for _, s := range idle {
		m.closeInterp(s, fmt.Sprintf("it was idle for more than %s", m.cfg.IdleTimeout))
		m.mu.Lock()
		s.used = now // the session (and its reason) stays one more idle period
		m.mu.Unlock()
		s.unlock()
	}
}

// closeInterp closes s's interpreter; s is locked.
func (m *Manager) closeInterp(s *session, why string) {
	if s.it == nil {
		return
	}
	s.it.close()
	s.lost = why
	m.mu.Lock()
	s.it = nil
	m.live--
	m.mu.Unlock()
	m.lg.Debug("closed Python interpreter", zap.String("thread-id", s.thread), zap.String("reason", why))
}

// Close closes every interpreter and stops the reaper. Calls in flight
// end as if their interpreter had died.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	close(m.stop)
	var its []*interp
	for _, s := range m.sessions {
		// Without the session lock: a call may hold it for minutes.
		// interp.close is safe to call concurrently with that call.
		if s.it != nil {
			its = append(its, s.it)
		}
	}
	m.mu.Unlock()
	for _, it := range its {
		it.close()
	}
	<-m.reaped
}

// session returns the locked session of thread.
func (m *Manager) session(ctx context.Context, thread string) (*session, error) {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, errors.New("agentd is shutting down")
		}
		s := m.sessions[thread]
		if s == nil {
			s = &session{thread: thread, sem: make(chan struct{}, 1)}
			m.sessions[thread] = s
		}
		s.used = m.now()
		m.mu.Unlock()
		if err := s.lock(ctx); err != nil {
			return nil, err
		}
		if !s.gone {
			return s, nil
		}
		s.unlock()
	}
}

// reserve takes an interpreter slot for s, closing the least recently
// used idle interpreter of another thread at the cap.
func (m *Manager) reserve(s *session) error {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return errors.New("agentd is shutting down")
		}
		if m.live < m.cfg.MaxInterpreters {
			m.live++
			m.mu.Unlock()
			return nil
		}
		var victims []*session
		for _, o := range m.sessions {
			if o != s && o.it != nil {
				victims = append(victims, o)
			}
		}
		sort.Slice(victims, func(i, j int) bool { return victims[i].used.Before(victims[j].used) })
		var victim *session
		for _, o := range victims {
			if o.tryLock() {
				victim = o
				break
			}
		}
		m.mu.Unlock()
		if victim == nil {
			return fmt.Errorf("all %d Python interpreters of this agentd are busy running code; try again later", m.cfg.MaxInterpreters)
		}
		m.closeInterp(victim, fmt.Sprintf("agentd runs at most %d interpreters and this one was the least recently used", m.cfg.MaxInterpreters))
		victim.unlock()
	}
}

// Tool returns the python tool.
func (m *Manager) Tool() agent.Tool {
	maxS := int(m.cfg.MaxTimeout / time.Second)
	return agent.Tool{
		Name:        ToolName,
		Description: fmt.Sprintf(description, int(m.cfg.Timeout/time.Second), maxS, m.cfg.MaxOutputChars),
		Schema: []byte(fmt.Sprintf(`{"type":"object","additionalProperties":false,"required":["code"],"properties":{
"code":{"type":"string","minLength":1,"description":"Python source to run. Variables, functions and imports persist between calls; the value of a final expression is shown."},
"timeout_s":{"type":"integer","minimum":1,"maximum":%d,"description":"Timeout in seconds (default %d). On timeout the interpreter is restarted and its state is lost."}}}`,
			maxS, int(m.cfg.Timeout/time.Second))),
		// The executor's tool timeout must not cut a call short: the tool
		// bounds itself (start, queue behind the thread's other call, run).
		Timeout: m.cfg.StartTimeout + 2*m.cfg.MaxTimeout + time.Minute,
		Func:    m.call,
	}
}

const description = `Run Python 3 code in a persistent interpreter inside this thread's sandbox (working directory: the workspace).
Variables, functions and imports persist between calls, like cells of a notebook. The result shows what the code printed (stdout, stderr) and the repr of the last line's value when it is an expression.
- Use it for calculations, data processing and quick experiments; use execute for shell commands and write_file for files meant to stay.
- A call times out after timeout_s seconds (default %d, at most %d); then, or when the interpreter crashes, it is restarted and all its state is lost.
- stdin is empty: input() fails. Each output is limited to %d characters; the middle of longer output is left out.
- Calls in one thread run one at a time.`

// args are the tool's arguments.
type args struct {
	Code     string `json:"code"`
	TimeoutS *int   `json:"timeout_s"`
}

// mark is the private State of an agent context.
type mark struct {
	Interpreter string `json:"interpreter,omitempty"`
}

func (m *Manager) call(ctx context.Context, req *agent.ToolRequest) (agent.ToolResult, error) {
	var a args
	if err := req.DecodeArgs(&a); err != nil {
		return agent.ToolResult{}, err
	}
	timeout := m.cfg.Timeout
	if a.TimeoutS != nil {
		timeout = min(time.Duration(*a.TimeoutS)*time.Second, m.cfg.MaxTimeout)
	}
	var b backend.Backend
	if req.Run != nil {
		b = req.Run.Backend
	}
	ps, ex := m.resolve(b)
	if ps == nil || ex == nil {
		return agent.ToolResult{}, errors.New("python is not available: this thread has no sandbox to run it in")
	}
	thread := threadOf(req.Run)
	if known, ok := m.probed(thread); known && !ok {
		return agent.ToolResult{}, errors.New("python is not available: this thread's sandbox image has no python3; use execute instead")
	}
	s, err := m.session(ctx, thread)
	if err != nil {
		return agent.ToolResult{}, err
	}
	defer s.unlock()
	defer m.touch(s) // the idle clock starts when the call ends

	var notes []string
	seen := seenInterp(req.State)
	if s.it != nil && !s.it.alive() {
		m.closeInterp(s, "it exited between calls")
	}
	if s.it != nil {
		if why := s.it.tamperedWith(); why != "" {
			m.closeInterp(s, "its answer channel was tampered with between calls ("+why+")")
		}
	}
	if s.it == nil {
		if err := m.reserve(s); err != nil {
			return agent.ToolResult{}, err
		}
		sctx, cancel := context.WithTimeout(ctx, m.cfg.StartTimeout)
		it, err := startInterp(sctx, ps, m.cfg.Python, m.cfg.MaxOutputChars, m.lg.With(zap.String("thread-id", thread)))
		startTimedOut := ctx.Err() == nil && sctx.Err() != nil
		cancel()
		if err != nil {
			m.mu.Lock()
			m.live--
			m.mu.Unlock()
			if startTimedOut {
				err = fmt.Errorf("the Python interpreter did not start within %s", m.cfg.StartTimeout)
			}
			return agent.ToolResult{}, err
		}
		m.mu.Lock()
		closed := m.closed
		if !closed {
			s.it = it
		}
		m.mu.Unlock()
		if closed { // Close ran while it started: it would never be closed
			it.close()
			return agent.ToolResult{}, errors.New("agentd is shutting down")
		}
		m.lg.Debug("started Python interpreter", zap.String("thread-id", thread), zap.String("interpreter", it.id))
		if seen != "" && seen != it.id {
			why := s.lost
			if why == "" {
				why = "it was stopped (idle, restarted agentd or replaced sandbox)"
			}
			notes = append(notes, fmt.Sprintf("Note: this call ran in a new Python interpreter because the previous one was closed: %s. Variables, functions and imports from earlier calls are gone; define them again.", why))
		}
		s.lost = ""
	}

	out, err := s.it.call(ctx, a.Code, timeout)
	var died *errDied
	var tampered *errTampered
	switch {
	case err == nil:
		setSeen(req.State, s.it.id)
		return render(notes, out), nil
	case errors.Is(err, errTimeout):
		m.closeInterp(s, "")
		setSeen(req.State, "")
		return agent.ToolResult{IsError: true, Content: joinNotes(notes, fmt.Sprintf(
			"Error: the code timed out after %s; the interpreter was restarted and its state (variables, imports) was lost.", fmtSeconds(timeout)))}, nil
	case errors.As(err, &died):
		m.closeInterp(s, "")
		setSeen(req.State, "")
		text := fmt.Sprintf("Error: %s while running this code; the interpreter was restarted and its state (variables, imports) was lost.", died.Error())
		return agent.ToolResult{IsError: true, Content: joinNotes(notes, text+renderStreams(died.rawOut, died.rawErr, nil))}, nil
	case errors.As(err, &tampered):
		m.closeInterp(s, "")
		setSeen(req.State, "")
		return agent.ToolResult{IsError: true, Content: joinNotes(notes, fmt.Sprintf(
			"Error: %s while running this code, so its result cannot be trusted; the interpreter was restarted and its state (variables, imports) was lost.", tampered.Error()))}, nil
	default:
		// The call's context ended (cancelled run): the code may still
		// run, so the interpreter cannot be trusted with the next call.
		m.closeInterp(s, "the call that used it was cancelled")
		return agent.ToolResult{}, err
	}
}

func (m *Manager) touch(s *session) {
	m.mu.Lock()
	s.used = m.now()
	m.mu.Unlock()
}

func threadOf(rc *agent.RunContext) string {
	if rc == nil || rc.ThreadID == "" {
		return "-"
	}
	return rc.ThreadID
}

func seenInterp(st *agent.State) string {
	if st == nil {
		return ""
	}
	var mk mark
	if ok, err := st.Private(privateKey, &mk); !ok || err != nil {
		return ""
	}
	return mk.Interpreter
}

func setSeen(st *agent.State, id string) {
	if st == nil {
		return
	}
	var v any
	if id != "" {
		v = mark{Interpreter: id}
	}
	_ = st.SetPrivate(privateKey, v) // encoding a struct of a string cannot fail
}

func fmtSeconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%d s", int(d/time.Second))
	}
	return d.String()
}

// render turns an outcome into the tool result.
func render(notes []string, o outcome) agent.ToolResult {
	text := strings.TrimPrefix(renderStreams(o.Stdout+o.rawOut, o.Stderr+o.rawErr, o.Value), "\n\n")
	if text == "" {
		text = "(no output)"
	}
	return agent.ToolResult{Content: joinNotes(notes, text), IsError: o.Error}
}

// renderStreams shows each non-empty part under its label, each part
// preceded by a blank line.
func renderStreams(stdout, stderr string, value *string) string {
	var b strings.Builder
	part := func(label, text string) {
		if text == "" {
			return
		}
		b.WriteString("\n\n" + label + ":\n" + strings.TrimSuffix(text, "\n"))
	}
	part("stdout", stdout)
	part("stderr", stderr)
	if value != nil {
		part("value", *value)
	}
	return b.String()
}

func joinNotes(notes []string, text string) string {
	return strings.Join(append(slices.Clone(notes), text), "\n\n")
}

// probed returns the cached probe answer of thread, if any.
func (m *Manager) probed(thread string) (known, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.probes[thread]
	if p == nil || !p.done {
		return false, false
	}
	return true, p.ok
}

// available reports whether python can run for rc's thread: its backend
// starts processes and has python3. The probe runs once per thread (until
// the thread is idle for IdleTimeout); a probe that could not reach the
// sandbox counts as "no" for probeRetry.
func (m *Manager) available(ctx context.Context, rc *agent.RunContext) bool {
	if rc == nil {
		return false
	}
	ps, ex := m.resolve(rc.Backend)
	if ps == nil || ex == nil {
		return false
	}
	thread := threadOf(rc)
	m.mu.Lock()
	p := m.probes[thread]
	if p == nil {
		p = &probe{sem: make(chan struct{}, 1)}
		m.probes[thread] = p
	}
	m.mu.Unlock()
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	defer func() { <-p.sem }()
	m.mu.Lock()
	done, ok, at := p.done, p.ok, p.at
	m.mu.Unlock()
	now := m.now()
	switch {
	case done:
		m.mu.Lock()
		p.at = now // keep a used answer
		m.mu.Unlock()
		return ok
	case !at.IsZero() && now.Sub(at) < probeRetry:
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, m.cfg.StartTimeout)
	defer cancel()
	timeout := 30
	res, err := ex.Execute(pctx, backend.ExecuteRequest{
		Command:        fmt.Sprintf(`command -v %s >/dev/null 2>&1 && %s -c 'import sys; sys.exit(0 if sys.version_info >= (3, 6) else 3)'`, m.cfg.Python, m.cfg.Python),
		TimeoutSeconds: &timeout, MaxOutputBytes: 1024,
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	p.at = m.now()
	if err != nil || res.TimedOut || res.ExitCode == nil {
		if ctx.Err() == nil {
			m.lg.Warn("python3 probe failed; python is not offered for now", zap.String("thread-id", thread), zap.Error(err))
		}
		return false
	}
	p.done, p.ok = true, *res.ExitCode == 0
	if !p.ok {
		m.lg.Info("the sandbox has no python3; python is not offered", zap.String("thread-id", thread))
	}
	return p.ok
}

// Middleware returns the middleware that offers python to the model only
// when the thread's sandbox has python3 (the tool itself comes from the
// tool registry, so that allow-lists and interrupt_on can name it).
func (m *Manager) Middleware() agent.Middleware { return hider{m: m} }

// hider removes python from a model call's tools when it cannot run.
type hider struct {
	agent.BaseMiddleware
	m *Manager
}

// Name implements agent.Middleware.
func (hider) Name() string { return "python" }

// WrapModel implements agent.Middleware.
func (h hider) WrapModel(next agent.ModelHandler) agent.ModelHandler {
	return func(ctx context.Context, req *agent.ModelRequest) (model.Response, error) {
		i := slices.IndexFunc(req.Tools, func(d model.ToolDef) bool { return d.Name == ToolName })
		if i >= 0 && !h.m.available(ctx, req.Run) {
			req.Tools = slices.Delete(slices.Clone(req.Tools), i, i+1)
		}
		return next(ctx, req)
	}
}
