package agentsvc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost/runs"
	"github.com/plumbhq/plumb/internal/server"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/pbconv"
)

// cleanupTimeout bounds the removal of a new thread whose run did not
// start.
const cleanupTimeout = time.Minute

// Run appends user input to a thread and streams the run (agent.md §2.2).
func (s *Service) Run(req *plumbv1.RunRequest, stream grpc.ServerStreamingServer[plumbv1.RunResponse]) error {
	in, err := s.runInput(req)
	if err != nil {
		return server.Status(err)
	}
	if in.ThreadID != "" {
		if err := s.checkOwner(stream.Context(), in.ThreadID); err != nil {
			return s.status("run", err)
		}
	}
	return s.serve(stream.Context(), in.ThreadID, req.GetDetach(), "run",
		func(ctx context.Context, sink agent.Sink) error {
			if in.ThreadID == "" {
				// The service creates new threads itself, owned by the
				// caller's tenant.
				return s.runSeeded(ctx, in, sink)
			}
			return s.leased(ctx, in.ThreadID, sink, func(ctx context.Context, u underLease, sink agent.Sink) error {
				in.Fence, in.HandOff, in.Flush = u.fence, u.handOff, u.flush
				_, err := s.rt.Run(ctx, in, sink)
				return err
			})
		},
		func(e *plumbv1.Event) error { return stream.Send(&plumbv1.RunResponse{Event: e}) })
}

// runSeeded runs on a new thread, owned by the caller's tenant, with any
// seed files. The thread is created first: the files may go to backends
// that belong to it (its sandbox, store routes named after its labels). When the run does not start, the
// thread is deleted again, with its sandbox (OnDeleteThread).
func (s *Service) runSeeded(ctx context.Context, in agent.RunInput, sink agent.Sink) error {
	now := s.clock.Now()
	t := agent.Thread{ID: s.newID(), CreatedAt: now, UpdatedAt: now, Metadata: in.Metadata, Tenant: tenant.From(ctx)}
	if err := s.threads.CreateThread(ctx, t); err != nil {
		return fmt.Errorf("create thread for the seed files: %w", err)
	}
	in.ThreadID = t.ID
	var started atomic.Bool
	err := s.leased(ctx, t.ID, sink, func(ctx context.Context, u underLease, sink agent.Sink) error {
		in.Fence, in.HandOff, in.Flush = u.fence, u.handOff, u.flush
		_, err := s.rt.Run(ctx, in, func(e agent.Event) {
			started.Store(true)
			sink(e)
		})
		return err
	})
	if err == nil || started.Load() {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	lg := s.lg.With(zap.String("thread-id", t.ID))
	if s.cfg.OnDeleteThread != nil {
		td, lerr := s.threads.LoadThread(ctx, t.ID)
		if lerr == nil {
			lerr = s.cfg.OnDeleteThread(ctx, td)
		}
		if lerr != nil {
			lg.Warn("the run on a new thread did not start and its cleanup failed; the thread is kept", zap.Error(lerr))
			return err
		}
	}
	if derr := s.threads.DeleteThread(ctx, t.ID); derr != nil {
		lg.Warn("the run on a new thread did not start and the thread could not be deleted", zap.Error(derr))
	}
	return err
}

// Resume answers a pending interrupt and streams the continued run
// (agent.md §6.4).
func (s *Service) Resume(req *plumbv1.ResumeRequest, stream grpc.ServerStreamingServer[plumbv1.ResumeResponse]) error {
	in, err := resumeInput(req)
	if err != nil {
		return server.Status(err)
	}
	if err := s.checkOwner(stream.Context(), in.ThreadID); err != nil {
		return s.status("resume", err)
	}
	return s.serve(stream.Context(), in.ThreadID, req.GetDetach(), "resume",
		func(ctx context.Context, sink agent.Sink) error {
			return s.leased(ctx, in.ThreadID, sink, func(ctx context.Context, u underLease, sink agent.Sink) error {
				in.Fence, in.HandOff, in.Flush = u.fence, u.handOff, u.flush
				_, err := s.rt.Resume(ctx, in, sink)
				return err
			})
		},
		func(e *plumbv1.Event) error { return stream.Send(&plumbv1.ResumeResponse{Event: e}) })
}

// serve runs one segment: it takes the thread and a run slot in the
// registry, starts the runtime call in a goroutine and streams the
// segment's log to the client. The run's context outlives the stream;
// unless the run is detached, the stream's end (the client leaving) cancels
// it and the stream's deadline bounds it (the runtime adds the run
// deadline; Cancel and Shutdown cancel it). A stream cut because its
// client fell behind (*runs.LagError) leaves the run going, detached, so
// that the client can Attach again.
func (s *Service) serve(ctx context.Context, threadID string, detach bool, kind string,
	call func(context.Context, agent.Sink) error, send func(*plumbv1.Event) error) error {
	detach = detach || s.cfg.DetachOnDisconnect
	base, stopDeadline := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok && !detach {
		base, stopDeadline = context.WithDeadline(base, dl)
	}
	runCtx, cancel := context.WithCancel(base)
	cancelRun := func() { cancel(); stopDeadline() }
	r, err := s.reg.Begin(threadID, cancelRun)
	if err != nil {
		cancelRun()
		return server.Status(err)
	}
	stop := func() bool { return false }
	if !detach {
		stop = context.AfterFunc(ctx, func() {
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) { // runCtx has the same deadline
				cancelRun()
			}
		})
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancelRun()
		s.end(r, call(runCtx, func(e agent.Event) { r.Emit(pbconv.EventToPB(e)) }))
	}()
	err = r.Stream(ctx, send)
	if err == nil {
		return nil
	}
	lg := s.lg.With(zap.String("rpc", kind), zap.String("thread-id", r.ThreadID()), zap.String("run-id", r.RunID()), zap.Bool("detach", detach))
	if ctx.Err() != nil {
		// The client went away: a run without detach is cancelled with
		// the stream's context; a detached one goes on and can be
		// attached.
		lg.Debug("client left the stream", zap.Error(err))
		return server.Status(ctx.Err())
	}
	if errors.Is(err, runs.ErrLagging) {
		stop()
		lg.Warn("the client fell behind; stream cut, the run goes on detached", zap.Error(err))
		return server.Status(err)
	}
	st := server.Status(err)
	if status.Code(st) == codes.Internal {
		lg.Error("run did not start", zap.Error(err))
	}
	return st
}

// end ends segment r whose runtime call returned err. A run that goes on
// elsewhere (handed off, or its lease lost) ends its streams with the
// sequence to re-Attach after (runs.Run.Abort).
func (s *Service) end(r *runs.Run, err error) {
	if r.RunID() != "" {
		lg := s.lg.With(zap.String("thread-id", r.ThreadID()), zap.String("run-id", r.RunID()))
		switch {
		case errors.Is(err, agent.ErrHandedOff), errors.Is(err, agent.ErrLeaseLost):
			lg.Info("the run goes on on another replica; ending its streams here", zap.Error(err))
			r.Abort(err)
			return
		case err != nil:
			lg.Error("the runtime failed after run_started", zap.Error(err))
		}
	}
	r.End(err)
}

// Attach replays a thread's current or retained run after after_sequence
// (0: from its start, through every retained segment), then follows it
// live (agent.md §2.4).
func (s *Service) Attach(req *plumbv1.AttachRequest, stream grpc.ServerStreamingServer[plumbv1.AttachResponse]) error {
	id := req.GetThreadId()
	if err := requireThreadID(id); err != nil {
		return server.Status(err)
	}
	ctx := stream.Context()
	if err := s.checkOwner(ctx, id); err != nil {
		return s.status("attach", err)
	}
	send := func(e *plumbv1.Event) error { return stream.Send(&plumbv1.AttachResponse{Event: e}) }
	r, after, err := s.reg.Attach(id, req.GetAfterSequence())
	if s.cfg.Events != nil && (errors.Is(err, runs.ErrNoRun) || errors.Is(err, runs.ErrOutOfRange) || (err == nil && r.Ended())) {
		// Not live here, or not from after_sequence on: the run may be
		// live on another replica (or have been taken over by one), its
		// earlier segments ran elsewhere, or this replica handed it over;
		// the shared event log has every segment of it, this replica's
		// included.
		err := s.followStored(ctx, id, req.GetAfterSequence(), send)
		if errors.Is(err, errNoStoredRun) {
			err = fmt.Errorf("%w: %w", runs.ErrNoRun, err)
		}
		if err != nil && ctx.Err() != nil {
			return server.Status(ctx.Err())
		}
		return server.Status(err)
	}
	if errors.Is(err, runs.ErrNoRun) {
		if _, lerr := s.threads.LoadThread(ctx, id); errors.Is(lerr, agent.ErrThreadNotFound) {
			err = lerr
		}
	}
	if err != nil {
		return server.Status(err)
	}
	err = r.Follow(ctx, after, send)
	if err != nil && ctx.Err() != nil {
		return server.Status(ctx.Err())
	}
	return server.Status(err)
}

// Cancel cancels the thread's active run and waits (as long as the call's
// context allows) until it has ended, so that the thread is free when
// Cancel returns. Attached streams receive run_finished{CANCELLED}. With
// Config.Leases, a run of another replica is cancelled through the shared
// store (cancelElsewhere).
func (s *Service) Cancel(ctx context.Context, req *plumbv1.CancelRequest) (*plumbv1.CancelResponse, error) {
	id := req.GetThreadId()
	if err := requireThreadID(id); err != nil {
		return nil, server.Status(err)
	}
	if err := s.checkOwner(ctx, id); err != nil {
		return nil, s.status("cancel", err)
	}
	r := s.reg.Cancel(id)
	if r == nil {
		td, err := s.threads.LoadThread(ctx, id)
		if err != nil {
			return nil, server.Status(err)
		}
		if s.cfg.Leases != nil {
			return s.cancelElsewhere(ctx, td)
		}
		return &plumbv1.CancelResponse{}, nil
	}
	s.lg.Info("run cancelled", zap.String("thread-id", id), zap.String("run-id", r.RunID()))
	select {
	case <-r.Done():
	case <-ctx.Done():
	}
	return &plumbv1.CancelResponse{RunId: r.RunID(), WasRunning: true}, nil
}
