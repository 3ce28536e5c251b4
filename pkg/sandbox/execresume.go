package sandbox

import (
	"context"
	"crypto/rand"
	"io"
	"sync"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
)

// Defaults of ExecutionsConfig.
const (
	DefaultResumeGrace  = 30 * time.Second
	DefaultResumeBuffer = 1 << 20
)

// ProcessChunk is the largest output event of a resumable process (a read
// of its stdout or stderr).
const ProcessChunk = 64 << 10

// ExecutionsConfig bounds resumable executions.
type ExecutionsConfig struct {
	// Grace is how long a resumable command keeps running (or its result
	// is kept, once it ended) with nobody attached. 0 means
	// DefaultResumeGrace.
	Grace time.Duration
	// Buffer is how many bytes of the newest output an execution keeps for
	// a reader that re-attaches. 0 means DefaultResumeBuffer.
	Buffer int
}

// ExecEvent is one message of a resumable execution: an output chunk, or
// (last) the result of a command or the exit of a process. Sequence counts
// from 1 per execution.
type ExecEvent struct {
	Sequence uint64
	Output   []byte
	// Stderr marks a process's Output as its standard error (a command's
	// output is merged, and never has it).
	Stderr bool
	// Result is set on a command's last event.
	Result *backend.ExecuteResult
	// Exit is set on a process's last event.
	Exit *backend.ProcessExit
	// Lost is set on the first event a reader gets after a gap: how many
	// events after the sequence it asked for were dropped from the buffer
	// (their output is gone).
	Lost uint64
}

// Executions runs resumable commands and processes: a command started with
// Start, or an interactive process started with StartProcess, runs
// detached from its caller's context, its output kept in a bounded buffer,
// so that a caller whose connection dropped can attach again (Attach,
// AttachProcess) with the last sequence it saw. One registry holds both
// kinds; an id of one kind is not found by the other's attach. An
// execution nobody is attached to is killed (as a cancelled ExecuteStream
// or Process stream is) after the grace; an ended one is forgotten after
// the grace. One reader is attached at a time: a new attach takes over
// from the previous one, whose attach returns ErrTakenOver (a reconnecting
// client is often faster than the server's noticing that its old
// connection died); a process's input goes to the attached reader's
// ProcessInput only.
type Executions struct {
	grace  time.Duration
	buffer int

	mu     sync.Mutex
	m      map[string]*execution
	closed bool
	wg     sync.WaitGroup
}

// ErrTakenOver is what an attach returns when another attach took the
// execution over.
var ErrTakenOver = errorf(CodeUnavailable, "execution: a newer stream attached to it and took it over")

// errClosed is what StartProcess returns once the registry is closed.
var errClosed = errorf(CodeShuttingDown, "the worker is shutting down: no new resumable executions")

// NewExecutions returns an empty registry.
func NewExecutions(cfg ExecutionsConfig) *Executions {
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultResumeGrace
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultResumeBuffer
	}
	return &Executions{grace: cfg.Grace, buffer: cfg.Buffer, m: map[string]*execution{}}
}

type execution struct {
	id, tenant, sandboxID string
	proc                  backend.Process // nil for a command

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	events  []ExecEvent   // the buffer, in sequence order
	bytes   int           // output bytes in events
	next    uint64        // the next sequence
	done    bool
	err     error
	reader  uint64             // the attached reader's token, 0 if none
	readers uint64             // tokens handed out
	kick    context.CancelFunc // cancels the attached reader
	timer   *time.Timer        // the grace, while nobody is attached
	cancel  func()             // kills the command or process
}

// Start runs req in f detached from ctx (only ctx's values are kept) and
// returns the execution's id. Attach to read it; until then, the grace
// runs.
func (x *Executions) Start(ctx context.Context, tenant, sandboxID string, f *Files, req backend.ExecuteRequest) string {
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e, ok := x.add("x-", tenant, sandboxID, nil, cancel)
	if !ok {
		cancel()
		return e.id // never run: attaching finds nothing
	}
	go func() {
		defer x.wg.Done()
		defer cancel()
		r, err := f.ExecuteStream(run, req, func(b []byte) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			x.pushLocked(e, ExecEvent{Output: append([]byte(nil), b...)})
			return nil
		})
		var last *ExecEvent
		if err == nil {
			last = &ExecEvent{Result: &r}
		}
		x.end(e, last, err)
	}()
	return e.id
}

// StartProcess starts req in f (as Files.StartProcess does; an error is
// its) and runs it detached from ctx, its stdout and stderr read into the
// execution's buffer as they come (a resumable process is not held back
// by a slow reader: the buffer drops its oldest output instead). It
// returns the execution's id; AttachProcess to read it and write to it.
func (x *Executions) StartProcess(ctx context.Context, tenant, sandboxID string, f *Files, req backend.ProcessRequest) (string, error) {
	x.mu.Lock()
	closed := x.closed
	x.mu.Unlock()
	if closed {
		return "", errClosed
	}
	p, err := f.StartProcess(ctx, req)
	if err != nil {
		return "", err
	}
	e, ok := x.add("p-", tenant, sandboxID, p, func() { _ = p.Close() })
	if !ok {
		_ = p.Close()
		return "", errClosed
	}
	go func() {
		defer x.wg.Done()
		defer p.Close()
		var pumps sync.WaitGroup
		pump := func(r io.Reader, stderr bool) {
			defer pumps.Done()
			buf := make([]byte, ProcessChunk)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					e.mu.Lock()
					x.pushLocked(e, ExecEvent{Output: append([]byte(nil), buf[:n]...), Stderr: stderr})
					e.mu.Unlock()
				}
				if err != nil {
					return
				}
			}
		}
		pumps.Add(2)
		go pump(p.Stdout(), false)
		go pump(p.Stderr(), true)
		pumps.Wait()
		exit, err := p.Wait(context.WithoutCancel(ctx))
		var last *ExecEvent
		if err == nil {
			last = &ExecEvent{Exit: &exit}
		}
		x.end(e, last, err)
	}()
	return e.id, nil
}

// add registers a new execution whose id starts with prefix, its grace
// running, and counts its goroutine in x.wg (the caller starts it). A
// closed registry takes none (false): the caller kills what it started.
func (x *Executions) add(prefix, tenant, sandboxID string, p backend.Process, cancel func()) (*execution, bool) {
	e := &execution{id: prefix + rand.Text(), tenant: tenant, sandboxID: sandboxID, proc: p, changed: make(chan struct{}), next: 1, cancel: cancel}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return e, false
	}
	x.m[e.id] = e
	// Under x.mu: Close sets closed under it before it waits, so no Add
	// races with its Wait.
	x.wg.Add(1)
	e.mu.Lock()
	x.detachLocked(e)
	e.mu.Unlock()
	return e, true
}

// end records how execution e ended: its last event, or err.
func (x *Executions) end(e *execution, last *ExecEvent, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.err = err
	} else {
		x.pushLocked(e, *last)
	}
	e.done = true
	e.notifyLocked()
	if e.reader == 0 {
		x.detachLocked(e) // restart the grace: the result is kept for as long
	}
}

// pushLocked appends ev with the next sequence and drops the oldest output
// beyond the buffer (the result is never dropped).
func (x *Executions) pushLocked(e *execution, ev ExecEvent) {
	ev.Sequence = e.next
	e.next++
	e.events = append(e.events, ev)
	e.bytes += len(ev.Output)
	for e.bytes > x.buffer && len(e.events) > 1 {
		e.bytes -= len(e.events[0].Output)
		e.events[0] = ExecEvent{}
		e.events = e.events[1:]
	}
	e.notifyLocked()
}

func (e *execution) notifyLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// detachLocked starts the grace: when it ends with nobody attached, the
// command is killed and the execution forgotten.
func (x *Executions) detachLocked(e *execution) {
	if e.timer != nil {
		e.timer.Stop()
	}
	e.timer = time.AfterFunc(x.grace, func() {
		e.mu.Lock()
		idle := e.reader == 0
		e.mu.Unlock()
		if !idle {
			return
		}
		e.cancel()
		x.mu.Lock()
		delete(x.m, e.id)
		x.mu.Unlock()
	})
}

// Attach streams command execution id's events after sequence after to
// send, then the live rest, and returns once the result was sent (nil),
// the command failed (its error), ctx ended, send failed, or another
// Attach took over (ErrTakenOver). An unknown id, or one of another
// tenant or sandbox, or a process's, is CodeNotFound.
func (x *Executions) Attach(ctx context.Context, tenant, sandboxID, id string, after uint64, send func(ExecEvent) error) error {
	return x.attach(ctx, false, tenant, sandboxID, id, after, nil, send)
}

// AttachProcess is Attach for a process started with StartProcess: ready
// is called, before any event is sent, with the reader's way to the
// process's stdin and signals, which works for as long as this reader is
// the attached one. It returns once the exit was sent (nil), or as Attach
// does. A command's id is CodeNotFound.
func (x *Executions) AttachProcess(ctx context.Context, tenant, sandboxID, id string, after uint64, ready func(ProcessInput), send func(ExecEvent) error) error {
	return x.attach(ctx, true, tenant, sandboxID, id, after, ready, send)
}

// ProcessInput is an attached reader's way to a resumable process's stdin
// and signals. Once the reader is no longer attached (another took over,
// or its attach returned) every call is ErrTakenOver and nothing reaches
// the process.
type ProcessInput struct {
	e     *execution
	token uint64
}

func (in ProcessInput) check() error {
	in.e.mu.Lock()
	defer in.e.mu.Unlock()
	if in.e.reader != in.token {
		return ErrTakenOver
	}
	return nil
}

// Write writes b to the process's stdin.
func (in ProcessInput) Write(b []byte) error {
	if err := in.check(); err != nil {
		return err
	}
	_, err := in.e.proc.Stdin().Write(b)
	return err
}

// CloseStdin closes the process's stdin (EOF).
func (in ProcessInput) CloseStdin() error {
	if err := in.check(); err != nil {
		return err
	}
	return in.e.proc.Stdin().Close()
}

// Signal sends signal to the process and its descendants.
func (in ProcessInput) Signal(ctx context.Context, signal string) error {
	if err := in.check(); err != nil {
		return err
	}
	return in.e.proc.Signal(ctx, signal)
}

func (x *Executions) attach(ctx context.Context, proc bool, tenant, sandboxID, id string, after uint64, ready func(ProcessInput), send func(ExecEvent) error) error {
	x.mu.Lock()
	e := x.m[id]
	x.mu.Unlock()
	if e == nil || e.tenant != tenant || e.sandboxID != sandboxID || (e.proc != nil) != proc {
		return errorf(CodeNotFound, "execution %q not found (it ended more than the resume grace ago, or never was)", id)
	}
	ctx, kick := context.WithCancelCause(ctx)
	defer kick(nil)
	e.mu.Lock()
	if e.kick != nil {
		e.kick() // the previous reader ends with ErrTakenOver
	}
	e.readers++
	token := e.readers
	e.reader, e.kick = token, func() { kick(ErrTakenOver) }
	if e.timer != nil {
		e.timer.Stop()
	}
	last := e.next - 1
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		if e.reader == token {
			e.reader, e.kick = 0, nil
			x.detachLocked(e)
		}
		e.mu.Unlock()
	}()
	if after > last {
		return invalidField("after_sequence", "after_sequence %d: the execution has sent only %d messages so far", after, last)
	}
	if ready != nil {
		ready(ProcessInput{e: e, token: token})
	}
	lost := uint64(0)
	for {
		e.mu.Lock()
		var batch []ExecEvent
		for _, ev := range e.events {
			if ev.Sequence > after {
				batch = append(batch, ev)
			}
		}
		if len(batch) > 0 && batch[0].Sequence > after+1 {
			lost = batch[0].Sequence - after - 1 // dropped before this reader got them
		}
		done, err, changed := e.done, e.err, e.changed
		e.mu.Unlock()
		for _, ev := range batch {
			if lost > 0 {
				ev.Lost, lost = lost, 0
			}
			if err := send(ev); err != nil {
				return err
			}
			after = ev.Sequence
			if ev.Result != nil || ev.Exit != nil {
				return nil
			}
		}
		if len(batch) == 0 && done {
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// Close kills every command and process and waits for their goroutines
// to end; later ones are killed at once (StartProcess refuses them, a
// command started later is never found). Attached readers get the executions' ends (their errors).
func (x *Executions) Close() {
	x.mu.Lock()
	x.closed = true
	es := make([]*execution, 0, len(x.m))
	for _, e := range x.m {
		es = append(es, e)
	}
	x.m = map[string]*execution{}
	x.mu.Unlock()
	var kills sync.WaitGroup
	for _, e := range es {
		e.mu.Lock()
		if e.timer != nil {
			e.timer.Stop()
		}
		e.mu.Unlock()
		// A process's kill waits for the box to confirm it: all at once.
		kills.Go(e.cancel)
	}
	kills.Wait()
	x.wg.Wait()
}
