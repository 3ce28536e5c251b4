package boxagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentlog"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// procWriteTimeout bounds one write to a process's stdin: a process that
// does not read its input fails the write instead of holding it forever.
const procWriteTimeout = 30 * time.Second

// proc is one interactive process, named by the id of its proc_start
// request.
type proc struct {
	pgid    int
	tag     uint32
	service bool      // runs as a uid of its own (serviceCredential)
	conn    bool      // a port forward (dial.go): no process, no signals
	stdin   procInput // nil once closed

	wmu sync.Mutex // one stdin write at a time

	mu     sync.Mutex
	cond   *sync.Cond
	credit int // output bytes (EventCost-charged) the agent may still send
	done   bool
}

// procInput is where proc_write's payload goes: a process's stdin pipe,
// or a forwarded connection (whose Close half-closes it).
type procInput interface {
	Write([]byte) (int, error)
	Close() error
	SetWriteDeadline(time.Time) error
}

// take waits for output credit and reserves it for up to n bytes of one
// event; it returns how many bytes may be sent, or false once the process
// request ended.
func (p *proc) take(n int) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.credit <= agentproto.EventCost && !p.done {
		p.cond.Wait()
	}
	if p.done {
		return 0, false
	}
	k := min(n, p.credit-agentproto.EventCost)
	p.credit -= k + agentproto.EventCost
	return k, true
}

// ack returns credit; more than the window in total is capped.
func (p *proc) ack(n int64) {
	p.mu.Lock()
	p.credit = int(min(int64(agentproto.ProcWindow), int64(p.credit)+max(n, 0)))
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *proc) finish() {
	p.mu.Lock()
	p.done = true
	p.cond.Broadcast()
	p.mu.Unlock()
}

// procStart runs one interactive process for the life of its request: it
// starts the command as execute does (own process group, the sandbox user,
// a tag), streams its output as stdout and stderr events within the
// output window, and answers with its exit once it has exited and its
// output is delivered. Cancelling the request ends the process and every
// descendant.
func (s *server) procStart(ctx context.Context, req agentproto.Request) agentproto.Response {
	var a backend.ProcessRequest
	if e := decodeArgs(req, &a); e != nil {
		return agentproto.Failure(req.ID, e)
	}
	if a.Port != 0 {
		return s.dial(ctx, req, a)
	}
	if a.Service && len(a.Env) > 0 && s.environExposed {
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeUnsupported, "",
			"process: this sandbox's kernel (gVisor) lets every process read any process's environment, so the service's env would reach the sandbox's commands; run services that take env (MCP servers with secrets) in a runc sandbox"))
	}
	pl, err := s.plan(backend.ExecuteRequest{Command: a.Command, Cwd: a.Cwd, Env: a.Env})
	if err != nil {
		return agentproto.Failure(req.ID, backend.FromOS("process", "", err))
	}
	p := &proc{credit: agentproto.ProcWindow}
	p.cond = sync.NewCond(&p.mu)
	s.mu.Lock()
	full := len(s.procs)-s.conns >= agentproto.MaxProcesses
	if !full {
		s.procs[req.ID] = p
	}
	s.mu.Unlock()
	if full {
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeTooLarge, "", "%d processes already run in this sandbox; close one first", agentproto.MaxProcesses).
			WithDetail("limit", fmt.Sprint(agentproto.MaxProcesses)))
	}
	defer func() {
		s.mu.Lock()
		delete(s.procs, req.ID)
		s.mu.Unlock()
	}()

	pipe := func() (r, w *os.File) {
		if err == nil {
			r, w, err = os.Pipe()
		}
		return r, w
	}
	inR, inW := pipe()
	outR, outW := pipe()
	errR, errW := pipe()
	closeAll := func(fs ...*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	if err != nil {
		closeAll(inR, inW, outR, outW, errR, errW)
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeInternal, "", "process: create pipes: %v", err))
	}
	if s.as != nil {
		p.tag = s.newTag()
		p.service = a.Service
	}
	ooms, oomsKnown := oomKills()
	cmd := s.command(pl, outW, p.tag)
	if p.service {
		// A service (its env may hold secrets) runs as a uid of its own,
		// out of reach of the commands (docs/security.md).
		cmd.cred = s.as.serviceCredential(p.tag)
	}
	cmd.stdin, cmd.stderr = inR, errW
	pgid, wait, serr := s.start(cmd, "process")
	closeAll(inR, outW, errW) // the child's ends: the child holds them now
	if serr != nil {
		closeAll(inW, outR, errR)
		return agentproto.Failure(req.ID, serr)
	}
	p.pgid = pgid
	p.mu.Lock()
	p.stdin = inW
	p.mu.Unlock()
	lg := s.lg.With(agentlog.Uint64("request-id", req.ID), agentlog.Int("pgid", p.pgid))
	s.send(agentproto.Response{ID: req.ID, Event: agentproto.EventStarted})

	var readers sync.WaitGroup
	for _, o := range []struct {
		r     *os.File
		event string
	}{{outR, agentproto.EventStdout}, {errR, agentproto.EventStderr}} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			s.pumpOutput(req.ID, p, o.r, o.event)
		}()
	}

	waited := make(chan exitStatus, 1)
	go func() { waited <- wait() }()
	cancelled := false
	var st exitStatus
	select {
	case st = <-waited:
	case <-ctx.Done():
		cancelled = true
		s.end(p.pgid, p.tag, p.service, lg)
		st = <-waited
	}
	p.closeStdin()
	// Background children may still hold the output pipes: draining stops
	// at the deadline, or at once when the request was cancelled.
	drain := time.Now().Add(backend.DrainGrace)
	if cancelled {
		drain = time.Now()
	}
	_ = outR.SetReadDeadline(drain)
	_ = errR.SetReadDeadline(drain)
	readersDone := make(chan struct{})
	go func() { readers.Wait(); close(readersDone) }()
	select {
	case <-readersDone:
	case <-ctx.Done():
		p.finish()
		<-readersDone
	}
	p.finish()
	closeAll(outR, errR)
	if cancelled {
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeCancelled, "", "the process was closed; it and its descendants were killed"))
	}
	exit := backend.ProcessExit{ExitCode: -1}
	if code := st.code(); code != nil {
		exit.ExitCode = *code
	}
	if ws := st.ws; st.ok && ws.Signaled() {
		exit.Signal = backend.SignalName(int(ws.Signal()))
		if ws.Signal() == syscall.SIGKILL && oomsKnown {
			now, ok := oomKills()
			exit.OOMKilled = ok && now > ooms
		}
	}
	return agentproto.Result(req.ID, exit)
}

// pumpOutput sends what r yields as events of kind event, within the
// process's output credit, until r ends or the process request does.
func (s *server) pumpOutput(id uint64, p *proc, r io.Reader, event string) {
	buf := make([]byte, agentproto.ProcChunkBytes)
	for {
		n, err := r.Read(buf)
		for data := buf[:n]; len(data) > 0; {
			k, ok := p.take(len(data))
			if !ok {
				return
			}
			if s.w.Write(agentproto.Response{ID: id, Event: event, Data: data[:k]}) != nil {
				return
			}
			data = data[k:]
		}
		if err != nil {
			return
		}
	}
}

// closeStdin closes the process's stdin once.
func (p *proc) closeStdin() {
	p.mu.Lock()
	in := p.stdin
	p.stdin = nil
	p.mu.Unlock()
	if in != nil {
		in.Close()
	}
}

// proc returns the running process a proc op targets.
func (s *server) proc(op agentproto.Op, target uint64) (*proc, *backend.Error) {
	s.mu.Lock()
	p := s.procs[target]
	s.mu.Unlock()
	if p == nil {
		return nil, backend.Errorf(backend.CodeInvalidArgument, "", "%s: process %d is not running (never started, or it exited)", op, target)
	}
	return p, nil
}

// procWrite writes the payload to a process's stdin (bounded by
// procWriteTimeout) and closes it when asked.
func (s *server) procWrite(req agentproto.Request) agentproto.Response {
	var a agentproto.ProcWriteArgs
	if e := decodeArgs(req, &a); e != nil {
		return agentproto.Failure(req.ID, e)
	}
	p, e := s.proc(req.Op, a.Target)
	if e != nil {
		if len(req.Payload) == 0 && a.EOF {
			return agentproto.Result(req.ID, struct{}{}) // closing is idempotent
		}
		return agentproto.Failure(req.ID, e)
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.mu.Lock()
	in := p.stdin
	p.mu.Unlock()
	if in == nil {
		if len(req.Payload) == 0 && a.EOF {
			return agentproto.Result(req.ID, struct{}{})
		}
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeInvalidArgument, "", "the process's standard input is closed"))
	}
	if len(req.Payload) > 0 {
		_ = in.SetWriteDeadline(time.Now().Add(procWriteTimeout))
		if _, err := in.Write(req.Payload); err != nil {
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				return agentproto.Failure(req.ID, backend.Errorf(backend.CodeTimeout, "", "the process did not read its standard input within %s", procWriteTimeout))
			case errors.Is(err, syscall.EPIPE):
				return agentproto.Failure(req.ID, backend.Errorf(backend.CodeInvalidArgument, "", "the process no longer reads its standard input (it closed it or exited)"))
			default:
				return agentproto.Failure(req.ID, backend.Errorf(backend.CodeInternal, "", "write the process's standard input: %v", err))
			}
		}
	}
	if a.EOF {
		p.closeStdin()
	}
	return agentproto.Result(req.ID, struct{}{})
}

// procSignal signals a process's group and every process carrying its tag.
func (s *server) procSignal(req agentproto.Request) agentproto.Response {
	var a agentproto.ProcSignalArgs
	if e := decodeArgs(req, &a); e != nil {
		return agentproto.Failure(req.ID, e)
	}
	if err := backend.CheckSignal(a.Signal); err != nil {
		return agentproto.Failure(req.ID, backend.FromOS("signal", "", err))
	}
	p, e := s.proc(req.Op, a.Target)
	if e != nil {
		return agentproto.Failure(req.ID, e)
	}
	if p.conn {
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeInvalidArgument, "", "%s: %d is a port forward, not a process; it takes no signals", req.Op, a.Target))
	}
	sig := syscall.Signal(backend.Signals[a.Signal])
	s.signalling(p.service, func() {
		_ = signalCommand(p.pgid, p.tag, sig)
	})
	return agentproto.Result(req.ID, struct{}{})
}

// procAck returns output credit to a process; a process that has ended is
// fine (its last acknowledgements may arrive after it).
func (s *server) procAck(req agentproto.Request) agentproto.Response {
	var a agentproto.ProcAckArgs
	if e := decodeArgs(req, &a); e != nil {
		return agentproto.Failure(req.ID, e)
	}
	s.mu.Lock()
	p := s.procs[a.Target]
	s.mu.Unlock()
	if p != nil {
		p.ack(a.Bytes)
	}
	return agentproto.Result(req.ID, struct{}{})
}
