package sandboxsvc

import (
	"errors"
	"io"
	"sync"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/backend"
)

// processChunk is the largest stdout or stderr message of a Process stream.
const processChunk = 64 << 10

// Process runs an interactive process for the life of the stream: the
// first message starts it; later ones feed stdin, close it or signal; the
// answers are started, the output as it comes, and the exit last. The
// stream ending early (the client cancelled) closes the process, which
// kills it and its descendants.
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
	p, err := f.StartProcess(ctx, backend.ProcessRequest{Command: start.GetCommand(), Cwd: start.GetCwd(), Env: start.GetEnv(), Service: start.GetService(), Port: int(start.GetPort())})
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
