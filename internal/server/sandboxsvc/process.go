package sandboxsvc

import (
	"context"
	"errors"
	"io"
	"sync"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// processChunk is the largest stdout or stderr message of a Process stream.
const processChunk = sandbox.ProcessChunk

// Process runs an interactive process for the life of the stream: the
// first message starts it; later ones feed stdin, close it or signal; the
// answers are started, the output as it comes, and the exit last. The
// stream ending early (the client cancelled) closes the process, which
// kills it and its descendants. A resumable one runs in s.execs instead,
// detached from the stream (processResumable).
func (s *Service) Process(stream plumbv1.SandboxService_ProcessServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return s.fail("Process", backend.Errorf(backend.CodeInvalidArgument, "", "the first message of a Process stream must be start"))
	}
	f, err := s.files(ctx, start.GetSandboxId())
	if err != nil {
		return s.fail("Process", err)
	}
	if start.GetResumable() || start.GetExecutionId() != "" || start.GetAfterSequence() != 0 {
		return s.processResumable(stream, f, start)
	}
	p, err := f.StartProcess(ctx, processRequest(start))
	if err != nil {
		return s.fail("Process", err)
	}
	defer p.Close()

	var sendMu sync.Mutex
	send := func(r *plumbv1.ProcessResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(r)
	}
	if err := send(&plumbv1.ProcessResponse{Kind: &plumbv1.ProcessResponse_Started{Started: &plumbv1.ProcessStarted{}}}); err != nil {
		return err
	}

	// Requests: stdin, close, signals; the client half-closing is EOF.
	bad := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					_ = p.Stdin().Close()
				}
				return
			}
			switch k := m.GetKind().(type) {
			case *plumbv1.ProcessRequest_Stdin:
				// A process that exited or closed its stdin drops input;
				// its exit says how it ended.
				_, _ = p.Stdin().Write(k.Stdin)
			case *plumbv1.ProcessRequest_CloseStdin:
				if k.CloseStdin {
					_ = p.Stdin().Close()
				}
			case *plumbv1.ProcessRequest_Signal:
				if err := p.Signal(ctx, k.Signal); err != nil && backend.CodeOf(err) == backend.CodeInvalidArgument {
					bad <- err
					return
				}
			default:
				bad <- backend.Errorf(backend.CodeInvalidArgument, "", "a Process stream takes one start, first; then stdin, close_stdin or signal")
				return
			}
		}
	}()

	// Output: both streams drained concurrently, as the contract asks.
	var pumps sync.WaitGroup
	sendErr := make(chan error, 2)
	pump := func(r io.Reader, wrap func([]byte) *plumbv1.ProcessResponse) {
		defer pumps.Done()
		buf := make([]byte, processChunk)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if serr := send(wrap(append([]byte(nil), buf[:n]...))); serr != nil {
					sendErr <- serr
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	pumps.Add(2)
	go pump(p.Stdout(), func(b []byte) *plumbv1.ProcessResponse {
		return &plumbv1.ProcessResponse{Kind: &plumbv1.ProcessResponse_Stdout{Stdout: b}}
	})
	go pump(p.Stderr(), func(b []byte) *plumbv1.ProcessResponse {
		return &plumbv1.ProcessResponse{Kind: &plumbv1.ProcessResponse_Stderr{Stderr: b}}
	})
	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()

	select {
	case <-drained:
	case <-ctx.Done():
		// The client went away: the process goes too.
		p.Close()
		<-drained
		return ctx.Err()
	case err := <-bad:
		p.Close()
		<-drained
		return s.fail("Process", err)
	case err := <-sendErr:
		p.Close()
		<-drained
		return err
	}
	exit, err := p.Wait(ctx)
	if err != nil {
		return s.fail("Process", err)
	}
	return send(&plumbv1.ProcessResponse{Kind: &plumbv1.ProcessResponse_Exit{Exit: &plumbv1.ProcessExit{ExitCode: int32(exit.ExitCode), Signal: exit.Signal, OomKilled: exit.OOMKilled}}})
}

// processRequest is the process start names.
func processRequest(start *plumbv1.ProcessStart) backend.ProcessRequest {
	return backend.ProcessRequest{Command: start.GetCommand(), Cwd: start.GetCwd(), Env: start.GetEnv(), Service: start.GetService(), Port: int(start.GetPort())}
}

// processResumable serves a Process stream whose start is resumable (the
// process is started in s.execs) or names an execution_id (re-attach):
// the stream reads the execution's output after after_sequence, and its
// requests go to the process while it is the attached stream. The stream
// ending leaves the process running for the resume grace.
func (s *Service) processResumable(stream plumbv1.SandboxService_ProcessServer, f *sandbox.Files, start *plumbv1.ProcessStart) error {
	ctx := stream.Context()
	id := start.GetExecutionId()
	switch {
	case id != "" && start.GetResumable():
		return s.fail("Process", invalidField("start.resumable", "a start with execution_id re-attaches to a resumable process: leave resumable unset"))
	case id != "" && (start.GetCommand() != "" || start.GetCwd() != "" || len(start.GetEnv()) > 0 || start.GetService() || start.GetPort() != 0):
		return s.fail("Process", invalidField("start.command", "a start with execution_id re-attaches to a running process: leave command, cwd, env, service and port unset"))
	case id == "" && start.GetAfterSequence() != 0:
		return s.fail("Process", invalidField("start.after_sequence", "after_sequence needs the execution_id it counts in"))
	}
	if id == "" {
		var err error
		if id, err = s.execs.StartProcess(ctx, tenant.From(ctx), start.GetSandboxId(), f, processRequest(start)); err != nil {
			return s.fail("Process", err)
		}
		if err := stream.Send(&plumbv1.ProcessResponse{Kind: &plumbv1.ProcessResponse_Started{Started: &plumbv1.ProcessStarted{ExecutionId: id}}}); err != nil {
			return err
		}
	}
	// A bad request ends this stream (the process stays, detached).
	actx, bad := context.WithCancelCause(ctx)
	defer bad(nil)
	ready := func(in sandbox.ProcessInput) {
		go func() {
			for {
				m, err := stream.Recv()
				if err != nil {
					if errors.Is(err, io.EOF) {
						_ = in.CloseStdin()
					}
					return
				}
				switch k := m.GetKind().(type) {
				case *plumbv1.ProcessRequest_Stdin:
					_ = in.Write(k.Stdin)
				case *plumbv1.ProcessRequest_CloseStdin:
					if k.CloseStdin {
						_ = in.CloseStdin()
					}
				case *plumbv1.ProcessRequest_Signal:
					if err := in.Signal(ctx, k.Signal); err != nil && backend.CodeOf(err) == backend.CodeInvalidArgument {
						bad(err)
						return
					}
				default:
					bad(backend.Errorf(backend.CodeInvalidArgument, "", "a Process stream takes one start, first; then stdin, close_stdin or signal"))
					return
				}
			}
		}()
	}
	err := s.execs.AttachProcess(actx, tenant.From(ctx), start.GetSandboxId(), id, start.GetAfterSequence(), ready, func(ev sandbox.ExecEvent) error {
		m := &plumbv1.ProcessResponse{Sequence: ev.Sequence, LostMessages: ev.Lost}
		switch {
		case ev.Exit != nil:
			m.Kind = &plumbv1.ProcessResponse_Exit{Exit: &plumbv1.ProcessExit{ExitCode: int32(ev.Exit.ExitCode), Signal: ev.Exit.Signal, OomKilled: ev.Exit.OOMKilled}}
		case ev.Stderr:
			m.Kind = &plumbv1.ProcessResponse_Stderr{Stderr: ev.Output}
		default:
			m.Kind = &plumbv1.ProcessResponse_Stdout{Stdout: ev.Output}
		}
		return stream.Send(m)
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.fail("Process", err)
	}
	return nil
}
