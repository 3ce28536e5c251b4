package sandboxclient

import (
	"context"
	"errors"
	"io"
	"sync"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/backend"
)

var _ backend.ProcessStarter = (*Backend)(nil)

// processBuffer bounds each output stream a client holds unread; past it
// the stream stops being received, and gRPC flow control holds the worker
// back, which holds the process back.
const processBuffer = 1 << 20

// stdinChunk is the largest stdin message sent.
const stdinChunk = 1 << 20

// StartProcess starts an interactive process in the sandbox over a
// SandboxService.Process stream. ctx bounds the start; the process lives
// until it exits, Close, or the sandbox ends.
func (b *Backend) StartProcess(ctx context.Context, req backend.ProcessRequest) (backend.Process, error) {
	if req.Port != 0 {
		if err := backend.CheckPortForward(req); err != nil {
			return nil, err
		}
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel) // only while starting
	s, err := b.c.Process(pctx)
	if err == nil {
		err = s.Send(&plumbv1.ProcessRequest{Kind: &plumbv1.ProcessRequest_Start{Start: &plumbv1.ProcessStart{
			SandboxId: b.id, Command: req.Command, Cwd: req.Cwd, Env: req.Env, Service: req.Service, Port: int32(req.Port), //nolint:gosec // checked above
		}}})
	}
	var first *plumbv1.ProcessResponse
	if err == nil {
		first, err = s.Recv()
	}
	if !stop() || err == nil && first.GetStarted() == nil {
		cancel()
		if ctx.Err() != nil {
			return nil, backend.FromOS("process", "", ctx.Err())
		}
		if err == nil {
			return nil, backend.Errorf(backend.CodeUnavailable, "", "the worker did not start the process (it answered %T)", first.GetKind())
		}
	}
	if err != nil {
		cancel()
		return nil, fail("", err)
	}
	p := &process{
		s: s, cancel: cancel, done: make(chan struct{}),
		stdout: backend.NewOutputBuffer(processBuffer, nil),
		stderr: backend.NewOutputBuffer(processBuffer, nil),
	}
	p.stdin = &stdin{p: p}
	go p.recv()
	return p, nil
}

// process is the client side of a Process stream.
type process struct {
	s      plumbv1.SandboxService_ProcessClient
	cancel context.CancelFunc

	sendMu         sync.Mutex // one Send at a time
	stdin          *stdin
	stdout, stderr *backend.OutputBuffer
	done           chan struct{} // closed with exit and err set
	exit           backend.ProcessExit
	err            error
}

// recv takes the stream's messages until it ends.
func (p *process) recv() {
	defer close(p.done)
	var err error
	exited := false
	for err == nil {
		var m *plumbv1.ProcessResponse
		if m, err = p.s.Recv(); err != nil {
			break
		}
		switch k := m.GetKind().(type) {
		case *plumbv1.ProcessResponse_Stdout:
			p.stdout.Push(k.Stdout)
		case *plumbv1.ProcessResponse_Stderr:
			p.stderr.Push(k.Stderr)
		case *plumbv1.ProcessResponse_Exit:
			p.exit = backend.ProcessExit{ExitCode: int(k.Exit.GetExitCode()), Signal: k.Exit.GetSignal(), OOMKilled: k.Exit.GetOomKilled()}
			exited = true
		}
	}
	switch {
	case exited && errors.Is(err, io.EOF):
		err = nil
	case errors.Is(err, io.EOF):
		err = backend.Errorf(backend.CodeUnavailable, "", "the process stream ended without the process's exit")
	default:
		err = fail("", err)
	}
	p.err = err
	p.stdout.CloseWithError(err)
	p.stderr.CloseWithError(err)
}

func (p *process) send(m *plumbv1.ProcessRequest) error {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if err := p.s.Send(m); err != nil {
		if errors.Is(err, io.EOF) {
			// The server ended the stream; its status comes with Recv.
			<-p.done
			if p.err != nil {
				return p.err
			}
			return backend.Errorf(backend.CodeInvalidArgument, "", "the process has exited")
		}
		return fail("", err)
	}
	return nil
}

// ended reports whether the process's stream ended without an error (the
// process exited).
func (p *process) ended() bool {
	select {
	case <-p.done:
		return p.err == nil
	default:
		return false
	}
}

// Stdin implements backend.Process.
func (p *process) Stdin() io.WriteCloser { return p.stdin }

// Stdout implements backend.Process.
func (p *process) Stdout() io.Reader { return p.stdout }

// Stderr implements backend.Process.
func (p *process) Stderr() io.Reader { return p.stderr }

// Signal implements backend.Process.
func (p *process) Signal(_ context.Context, signal string) error {
	if err := backend.CheckSignal(signal); err != nil {
		return err
	}
	return p.send(&plumbv1.ProcessRequest{Kind: &plumbv1.ProcessRequest_Signal{Signal: signal}})
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

// Close implements backend.Process: cancelling the stream makes the worker
// kill the process and its descendants.
func (p *process) Close() error {
	p.cancel()
	p.stdout.Close()
	p.stderr.Close()
	<-p.done
	return nil
}

// stdin sends a process's standard input.
type stdin struct {
	p      *process
	mu     sync.Mutex
	closed bool
}

// Write implements io.Writer.
func (w *stdin) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, backend.Errorf(backend.CodeInvalidArgument, "", "the process's standard input is closed")
	}
	n := 0
	for n < len(b) {
		k := min(len(b)-n, stdinChunk)
		if err := w.p.send(&plumbv1.ProcessRequest{Kind: &plumbv1.ProcessRequest_Stdin{Stdin: b[n : n+k]}}); err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// Close implements io.Closer: it closes the process's stdin (EOF).
func (w *stdin) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	select {
	case <-w.p.done:
		return nil // the process has ended: there is nothing to close
	default:
	}
	err := w.p.send(&plumbv1.ProcessRequest{Kind: &plumbv1.ProcessRequest_CloseStdin{CloseStdin: true}})
	if err != nil && w.p.ended() {
		return nil
	}
	return err
}
