package sandbox

import (
	"context"
	"crypto/rand"
	"sync"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
)

// Defaults of ExecutionsConfig.
const (
	DefaultResumeGrace  = 30 * time.Second
	DefaultResumeBuffer = 1 << 20
)

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
// (last) the result. Sequence counts from 1 per execution.
type ExecEvent struct {
	Sequence uint64
	Output   []byte
	// Result is set on the last event.
	Result *backend.ExecuteResult
	// Lost is set on the first event a reader gets after a gap: how many
	// events after the sequence it asked for were dropped from the buffer
	// (their output is gone).
	Lost uint64
}

// Executions runs resumable commands: a command started with Start runs
// detached from its caller's context, its output kept in a bounded buffer,
// so that a caller whose connection dropped can Attach again with the last
// sequence it saw. A command nobody is attached to is cancelled (killed,
// as a cancelled ExecuteStream is) after the grace; an ended one is
// forgotten after the grace. One reader is attached at a time: a new
// Attach takes over from the previous one, whose Attach returns
// ErrTakenOver (a reconnecting client is often faster than the server's
// noticing that its old connection died).
type Executions struct {
	grace  time.Duration
	buffer int

	mu sync.Mutex
	m  map[string]*execution
	wg sync.WaitGroup
}

// ErrTakenOver is what Attach returns when another Attach took the
// execution over.
var ErrTakenOver = errorf(CodeUnavailable, "execution: another reader attached")

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
	cancel  context.CancelFunc // kills the command
}

// Start runs req in f detached from ctx (only ctx's values are kept) and
// returns the execution's id. Attach to read it; until then, the grace
// runs.
func (x *Executions) Start(ctx context.Context, tenant, sandboxID string, f *Files, req backend.ExecuteRequest) string {
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e := &execution{id: "x-" + rand.Text(), tenant: tenant, sandboxID: sandboxID, changed: make(chan struct{}), next: 1, cancel: cancel}
	x.mu.Lock()
	x.m[e.id] = e
	x.mu.Unlock()
	e.mu.Lock()
	x.detachLocked(e)
	e.mu.Unlock()
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		defer cancel()
		r, err := f.ExecuteStream(run, req, func(b []byte) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			x.pushLocked(e, ExecEvent{Output: append([]byte(nil), b...)})
			return nil
		})
		e.mu.Lock()
		defer e.mu.Unlock()
		if err != nil {
			e.err = err
		} else {
			x.pushLocked(e, ExecEvent{Result: &r})
		}
		e.done = true
		e.notifyLocked()
		if e.reader == 0 {
			x.detachLocked(e) // restart the grace: the result is kept for as long
		}
	}()
	return e.id
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

// Attach streams execution id's events after sequence after to send, then
// the live rest, and returns once the result was sent (nil), the command
// failed (its error), ctx ended, send failed, or another Attach took over
// (ErrTakenOver). An unknown id, or one of another tenant or sandbox, is
// CodeNotFound.
func (x *Executions) Attach(ctx context.Context, tenant, sandboxID, id string, after uint64, send func(ExecEvent) error) error {
	x.mu.Lock()
	e := x.m[id]
	x.mu.Unlock()
	if e == nil || e.tenant != tenant || e.sandboxID != sandboxID {
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
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		if e.reader == token {
			e.reader, e.kick = 0, nil
			x.detachLocked(e)
		}
		e.mu.Unlock()
	}()
	e.mu.Lock()
	last := e.next - 1
	e.mu.Unlock()
	if after > last {
		return invalidField("after_sequence", "after_sequence %d: the execution has sent only %d messages so far", after, last)
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
			if ev.Result != nil {
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

// Close kills every command and waits for them to end.
func (x *Executions) Close() {
	x.mu.Lock()
	for _, e := range x.m {
		e.cancel()
		e.mu.Lock()
		if e.timer != nil {
			e.timer.Stop()
		}
		e.mu.Unlock()
	}
	x.m = map[string]*execution{}
	x.mu.Unlock()
	x.wg.Wait()
}
