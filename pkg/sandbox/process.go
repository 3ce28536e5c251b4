package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

var _ backend.ProcessStarter = (*Files)(nil)

// StartProcess starts an interactive process in the sandbox (agentproto's
// proc ops). The process ends when it exits, when it is closed, or with
// the sandbox's agent channel (a deleted or failed sandbox ends all its
// processes). At most agentproto.MaxProcesses run at once per sandbox; each
// holds at most agentproto.ProcWindow of unread output on the worker.
func (f *Files) StartProcess(ctx context.Context, req backend.ProcessRequest) (backend.Process, error) {
	forward := req.Port != 0
	if forward {
		if err := backend.CheckPortForward(req); err != nil {
			return nil, err
		}
	}
	f.sb.mu.Lock()
	n, limit, what := &f.sb.procs, agentproto.MaxProcesses, "processes already run"
	if forward {
		n, limit, what = &f.sb.conns, agentproto.MaxConns, "connections are already forwarded"
	}
	full := *n >= limit
	if !full {
		*n++
	}
	f.sb.mu.Unlock()
	if full {
		code := backend.CodeTooLarge
		if forward {
			code = backend.CodeResourceExhausted
		}
		return nil, backend.Errorf(code, "", "%d %s in sandbox %s; close one first", limit, what, f.m.snapshot(f.sb).ID).
			WithDetail("limit", itoa(limit))
	}
	// Once: a start that fails after the process exists closes it,
	// which gives the slot back already.
	end := sync.OnceFunc(func() {
		f.sb.mu.Lock()
		*n--
		f.sb.mu.Unlock()
	})
	p, err := f.startProcess(ctx, req, end)
	if err != nil {
		end()
		return nil, err
	}
	return p, nil
}

func (f *Files) startProcess(ctx context.Context, req backend.ProcessRequest, end func()) (*process, error) {
	ch, err := f.channel(ctx, "process")
	if err != nil {
		return nil, err
	}
	f.m.touch(f.sb)
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r, err := ch.send(ctx, agentproto.OpProcStart, req, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	p := &process{
		f: f, ch: ch, id: r.id, ctx: pctx, cancel: cancel, end: end,
		started: make(chan struct{}), done: make(chan struct{}), acks: make(chan struct{}, 1),
	}
	p.stdout = backend.NewOutputBuffer(0, p.consumed)
	p.stderr = backend.NewOutputBuffer(0, p.consumed)
	p.stdin = &procStdin{p: p}
	p.wg.Add(2)
	go p.run(r)
	go p.ackLoop()
	select {
	case <-p.started:
		return p, nil
	case <-p.done:
		select {
		case <-p.started:
			return p, nil // it ran and has already ended
		default:
		}
		p.Close()
		if p.err == nil {
			return nil, backend.Errorf(backend.CodeUnavailable, "", "the sandbox agent ended process %d without starting it", p.id)
		}
		return nil, p.err
	case <-ctx.Done():
		p.Close()
		return nil, backend.FromOS("process", "", ctx.Err())
	}
}

// process is an interactive process on the worker side: the agent's
// output events are buffered per stream (bounded by the output window,
// which the agent must respect) and credit is returned as they are read.
type process struct {
	f      *Files
	ch     *channel
	id     uint64 // the proc_start request's id
	ctx    context.Context
	cancel context.CancelFunc
	end    func() // gives the process's slot back

	stdout, stderr *backend.OutputBuffer
	stdin          *procStdin
	started        chan struct{}
	done           chan struct{} // closed with exit and err set
	exit           backend.ProcessExit
	err            error
	wg             sync.WaitGroup

	mu          sync.Mutex
	outstanding int   // output cost received and not yet acknowledged
	toAck       int64 // output cost read and not yet acknowledged
	acks        chan struct{}
	closeOnce   sync.Once
}

// run takes the process's responses until its final one.
func (p *process) run(r request) {
	defer p.wg.Done()
	defer r.c.discard(p.ch.opts.budget)
	var startOnce sync.Once
	final, err := p.ch.await(p.ctx, r, func(ev agentproto.Response) error {
		switch ev.Event {
		case agentproto.EventStarted:
			startOnce.Do(func() { close(p.started) })
			return nil
		case agentproto.EventStdout, agentproto.EventStderr:
		default:
			return nil
		}
		cost := len(ev.Data) + agentproto.EventCost
		p.mu.Lock()
		p.outstanding += cost
		over := p.outstanding > agentproto.ProcWindow
		p.mu.Unlock()
		if over || len(ev.Data) == 0 {
			v := violationf("process %d sent output beyond its %d-byte window, or an empty event", p.id, agentproto.ProcWindow)
			p.ch.reset(v)
			return v
		}
		out := p.stdout
		if ev.Event == agentproto.EventStderr {
			out = p.stderr
		}
		if !out.Push(ev.Data) {
			// Nobody reads this stream any more: return its credit at once.
			p.consumed(len(ev.Data))
		}
		return nil
	})
	if err == nil {
		if uerr := agentproto.UnmarshalResult(final.Result, &p.exit); uerr != nil {
			p.ch.reset(violationf("a malformed proc_start result: %v", uerr))
			err = backend.Errorf(backend.CodeUnavailable, "", "sandbox agent sent a malformed process exit; the channel was reset")
		}
	}
	if err != nil && backend.CodeOf(err) == backend.CodeUnavailable {
		if failed := p.f.failed(p.ctx); failed != nil {
			err = failed
		}
	}
	if err != nil && p.ctx.Err() != nil {
		err = backend.Errorf(backend.CodeCancelled, "", "the process was closed")
	}
	p.err = err
	end := err
	if end != nil {
		end = fmt.Errorf("process output ended: %w", err)
	}
	p.stdout.CloseWithError(end)
	p.stderr.CloseWithError(end)
	close(p.done)
}

// consumed records n bytes of one event read (or dropped) and wakes the
// acknowledger once a quarter of the window is owed, so the agent never
// waits for credit while output it sent is unread.
func (p *process) consumed(n int) {
	cost := n + agentproto.EventCost
	p.mu.Lock()
	p.toAck += int64(cost)
	owe := p.toAck >= agentproto.ProcWindow/4
	p.mu.Unlock()
	if owe {
		select {
		case p.acks <- struct{}{}:
		default:
		}
	}
}

// ackLoop returns credit to the agent until the process ends.
func (p *process) ackLoop() {
	defer p.wg.Done()
	for {
		select {
		case <-p.acks:
		case <-p.done:
			return
		}
		p.mu.Lock()
		n := p.toAck
		p.toAck = 0
		// Counted before the ack is sent: output the ack allows may
		// arrive before the ack's own answer.
		p.outstanding -= int(n)
		p.mu.Unlock()
		if n == 0 {
			continue
		}
		if _, err := p.ch.call(p.ctx, agentproto.OpProcAck, agentproto.ProcAckArgs{Target: p.id, Bytes: n}, nil); err != nil {
			return // the channel or the process is gone; run sees it too
		}
	}
}

// Stdin implements backend.Process.
func (p *process) Stdin() io.WriteCloser { return p.stdin }

// Stdout implements backend.Process.
func (p *process) Stdout() io.Reader { return p.stdout }

// Stderr implements backend.Process.
func (p *process) Stderr() io.Reader { return p.stderr }

// Signal implements backend.Process.
func (p *process) Signal(ctx context.Context, signal string) error {
	if err := backend.CheckSignal(signal); err != nil {
		return err
	}
	return p.call(ctx, agentproto.OpProcSignal, agentproto.ProcSignalArgs{Target: p.id, Signal: signal}, nil)
}

// call runs one proc op on the process's own channel: a channel opened
// later knows nothing of the process.
func (p *process) call(ctx context.Context, op agentproto.Op, args any, payload []byte) error {
	_, err := p.ch.exchange(ctx, op, args, payload, nil)
	var overdue *overdueError
	if errors.As(err, &overdue) {
		err = backend.Errorf(backend.CodeUnavailable, "", "%v", overdue)
	}
	return err
}

// Wait implements backend.Process.
func (p *process) Wait(ctx context.Context) (backend.ProcessExit, error) {
	select {
	case <-p.done:
		return p.exit, p.err
	case <-ctx.Done():
		return backend.ProcessExit{}, backend.FromOS("process", "", ctx.Err())
	}
}

// Close implements backend.Process: the request is cancelled, which kills
// the process and its descendants in the box. Close waits (at most the
// kill grace and some) for the agent to confirm, so that the box's
// process count is right when it returns.
func (p *process) Close() error {
	p.closeOnce.Do(func() {
		select {
		case <-p.done:
		default:
			ctx, cancel := context.WithTimeout(p.ctx, executeGrace)
			if p.call(ctx, agentproto.OpCancel, agentproto.CancelArgs{Target: p.id}, nil) == nil {
				select {
				case <-p.done:
				case <-ctx.Done():
				}
			}
			cancel()
		}
		p.cancel()
		p.wg.Wait()
		p.stdout.Close()
		p.stderr.Close()
		p.end()
	})
	return nil
}

// procStdin writes a process's stdin in chunks, one proc_write at a time.
type procStdin struct {
	p  *process
	mu sync.Mutex
}

// Write implements io.Writer.
func (w *procStdin) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for n < len(b) {
		k := min(len(b)-n, agentproto.ProcChunkBytes)
		if err := w.write(b[n:n+k], false); err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// Close implements io.Closer: it sends EOF.
func (w *procStdin) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.write(nil, true)
}

func (w *procStdin) write(b []byte, eof bool) error {
	p := w.p
	select {
	case <-p.done:
		switch {
		case p.err != nil:
			return p.err
		case eof && len(b) == 0:
			return nil // closing the stdin of an ended process is a no-op
		}
		return backend.Errorf(backend.CodeInvalidArgument, "", "the process has exited")
	default:
	}
	p.f.m.touch(p.f.sb)
	err := p.call(p.ctx, agentproto.OpProcWrite, agentproto.ProcWriteArgs{Target: p.id, EOF: eof}, b)
	if err != nil && p.ctx.Err() != nil {
		return backend.Errorf(backend.CodeCancelled, "", "the process was closed")
	}
	return err
}
