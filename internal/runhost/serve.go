package runhost

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost/runs"
	"github.com/plumbhq/plumb/internal/tenant"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/pbconv/agentconv"
)

// cleanupTimeout bounds the removal of a new thread whose run did not
// start, and the release or hand-off of a lease once its run has ended.
const cleanupTimeout = time.Minute

// Send delivers one event of a run to its client, in sequence order. The
// events are the plumb.v1 messages the streams carry (see the package
// doc): the replay log is bounded by their encoded size and the shared
// event log stores them encoded.
type Send func(*plumbv1.Event) error

// Run appends in's input to a thread (a new one, owned by ctx's tenant,
// when in.ThreadID is "") and streams the run to send until its terminal
// event. The caller has checked that ctx's tenant owns in.ThreadID.
//
// The run's context outlives ctx: unless detach is set (or
// Config.DetachOnDisconnect), ctx's end (the client leaving) cancels the
// run and ctx's deadline bounds it (the runtime adds the run deadline;
// Cancel and Shutdown cancel it). A stream cut because its client fell
// behind (runs.ErrLagging) leaves the run going, detached, so that the
// client can Attach again. When ctx ends, Run returns ctx's error.
func (h *Host) Run(ctx context.Context, in agent.RunInput, detach bool, send Send) error {
	if err := h.admit(ctx, in.ThreadID); err != nil {
		return err
	}
	return h.serve(ctx, in.ThreadID, detach, "run", func(ctx context.Context, sink agent.Sink) error {
		if in.ThreadID == "" {
			// The host creates new threads itself, owned by the
			// caller's tenant.
			return h.runSeeded(ctx, in, sink)
		}
		return h.leased(ctx, in.ThreadID, sink, func(ctx context.Context, u underLease, sink agent.Sink) error {
			in.Fence, in.HandOff, in.Stop, in.Rollback, in.Flush = u.fence, u.handOff, u.stop, u.rollback, u.flush
			_, err := h.rt.Run(ctx, in, sink)
			return err
		})
	}, send)
}

// runSeeded runs on a new thread, owned by the caller's tenant, with any
// seed files. The thread is created first: the files may go to backends
// that belong to it (its sandbox, store routes named after its labels). When the run does not start, the
// thread is deleted again, with its sandbox (OnDeleteThread).
func (h *Host) runSeeded(ctx context.Context, in agent.RunInput, sink agent.Sink) error {
	now := h.clock.Now()
	t := agent.Thread{ID: h.newID(), CreatedAt: now, UpdatedAt: now, Metadata: in.Metadata, Tenant: tenant.From(ctx)}
	if err := h.threads.CreateThread(ctx, t); err != nil {
		return fmt.Errorf("create thread for the seed files: %w", err)
	}
	in.ThreadID = t.ID
	var started atomic.Bool
	err := h.leased(ctx, t.ID, sink, func(ctx context.Context, u underLease, sink agent.Sink) error {
		in.Fence, in.HandOff, in.Stop, in.Rollback, in.Flush = u.fence, u.handOff, u.stop, u.rollback, u.flush
		_, err := h.rt.Run(ctx, in, func(e agent.Event) {
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
	lg := h.lg.With(zap.String("thread-id", t.ID))
	if h.cfg.OnDeleteThread != nil {
		td, lerr := h.threads.LoadThread(ctx, t.ID)
		if lerr == nil {
			lerr = h.cfg.OnDeleteThread(ctx, td)
		}
		if lerr != nil {
			lg.Warn("the run on a new thread did not start and its cleanup failed; the thread is kept", zap.Error(lerr))
			return err
		}
	}
	if derr := h.threads.DeleteThread(ctx, t.ID); derr != nil {
		lg.Warn("the run on a new thread did not start and the thread could not be deleted", zap.Error(derr))
	}
	return err
}

// Resume answers a pending interrupt and streams the continued run to
// send, as Run does. The caller has checked that ctx's tenant owns
// in.ThreadID.
func (h *Host) Resume(ctx context.Context, in agent.ResumeInput, detach bool, send Send) error {
	if err := h.admit(ctx, in.ThreadID); err != nil {
		return err
	}
	return h.serve(ctx, in.ThreadID, detach, "resume", func(ctx context.Context, sink agent.Sink) error {
		return h.leased(ctx, in.ThreadID, sink, func(ctx context.Context, u underLease, sink agent.Sink) error {
			in.Fence, in.HandOff, in.Stop, in.Rollback, in.Flush = u.fence, u.handOff, u.stop, u.rollback, u.flush
			_, err := h.rt.Resume(ctx, in, sink)
			return err
		})
	}, send)
}

// admit asks Config.Admit about a request of ctx's tenant on threadID.
func (h *Host) admit(ctx context.Context, threadID string) error {
	if h.cfg.Admit == nil {
		return nil
	}
	return h.cfg.Admit(ctx, tenant.From(ctx), threadID)
}

// serve runs one segment: it takes the thread and a run slot in the
// registry, starts the runtime call in a goroutine and streams the
// segment's log to send (see Run).
func (h *Host) serve(ctx context.Context, threadID string, detach bool, kind string,
	call func(context.Context, agent.Sink) error, send Send) error {
	detach = detach || h.cfg.DetachOnDisconnect
	base, stopDeadline := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok && !detach {
		base, stopDeadline = context.WithDeadline(base, dl)
	}
	if threadID != "" {
		if finishing := h.reg.Finishing(threadID); finishing != nil {
			select {
			case <-finishing:
			case <-ctx.Done():
				stopDeadline()
				return ctx.Err()
			}
		}
	}
	runCtx, cancel := context.WithCancel(base)
	cancelRun := func() { cancel(); stopDeadline() }
	r, err := h.reg.Begin(threadID, cancelRun)
	if err != nil {
		cancelRun()
		return err
	}
	stop := func() bool { return false }
	if !detach {
		stop = context.AfterFunc(ctx, func() {
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) { // runCtx has the same deadline
				cancelRun()
			}
		})
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer cancelRun()
		h.end(r, call(runCtx, func(e agent.Event) { r.Emit(agentconv.EventToPB(e)) }))
		h.afterSegment(r.ThreadID())
	}()
	err = r.Stream(ctx, send)
	if err == nil {
		return nil
	}
	lg := h.lg.With(zap.String("rpc", kind), zap.String("thread-id", r.ThreadID()), zap.String("run-id", r.RunID()), zap.Bool("detach", detach))
	if ctx.Err() != nil {
		// The client went away: a run without detach is cancelled with
		// the stream's context; a detached one goes on and can be
		// attached.
		lg.Debug("client left the stream", zap.Error(err))
		return ctx.Err()
	}
	if errors.Is(err, runs.ErrLagging) {
		stop()
		lg.Warn("the client fell behind; stream cut, the run goes on detached", zap.Error(err))
	}
	return err
}

// end ends segment r whose runtime call returned err. A run that goes on
// elsewhere (handed off, or its lease lost) ends its streams with the
// sequence to re-Attach after (runs.Run.Abort).
func (h *Host) end(r *runs.Run, err error) {
	if r.RunID() != "" {
		lg := h.lg.With(zap.String("thread-id", r.ThreadID()), zap.String("run-id", r.RunID()))
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

// Attach replays a thread's current or retained run after after (0: from
// its start, through every retained segment), then follows it live, to
// send. With Config.Events, a run this replica does not hold from after
// on is followed in the shared event log. When ctx ends, Attach returns
// ctx's error. The caller has checked that ctx's tenant owns the thread.
func (h *Host) Attach(ctx context.Context, threadID string, after uint64, send Send) error {
	r, from, err := h.reg.Attach(threadID, after)
	if h.cfg.Events != nil && (errors.Is(err, runs.ErrNoRun) || errors.Is(err, runs.ErrOutOfRange) || (err == nil && r.Ended())) {
		// Not live here, or not from after on: the run may be live on
		// another replica (or have been taken over by one), its earlier
		// segments ran elsewhere, or this replica handed it over; the
		// shared event log has every segment of it, this replica's
		// included.
		err := h.followStored(ctx, threadID, after, send)
		if errors.Is(err, errNoStoredRun) {
			err = fmt.Errorf("%w: %w", runs.ErrNoRun, err)
		}
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	if errors.Is(err, runs.ErrNoRun) {
		if _, lerr := h.threads.LoadThread(ctx, threadID); errors.Is(lerr, agent.ErrThreadNotFound) {
			err = lerr
		}
	}
	if err != nil {
		return err
	}
	sent := false
	err = r.Follow(ctx, from, func(ev *plumbv1.Event) error { sent = true; return send(ev) })
	if errors.Is(err, runs.ErrOutOfRange) && !sent && h.cfg.Events != nil {
		// A segment that had no events yet when Attach found it (a
		// takeover numbers its first event after the stored ones) is
		// past `after` by the time Follow reads it: the log has them.
		err = h.followStored(ctx, threadID, after, send)
	}
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Cancelled is what Cancel did: the run it cancelled, if any.
type Cancelled struct {
	// RunID is the cancelled run ("" when none was running, or when it
	// had not started yet).
	RunID string
	// WasRunning reports whether a run was active.
	WasRunning bool
	// Queued are the thread's QUEUED runs, cancelled without starting.
	Queued []string
}

// Cancel cancels the thread's queued runs (they end CANCELLED without
// starting, cancelQueued) and its active run, and waits (as long as ctx
// allows) until that run has ended, so that the thread is free when
// Cancel returns. Attached streams receive run_finished{CANCELLED}. With
// Config.Leases, a run of another replica is cancelled through the shared
// store (cancelElsewhere). The caller has checked that ctx's tenant owns
// the thread.
func (h *Host) Cancel(ctx context.Context, threadID string) (Cancelled, error) {
	// The queue first: the running run's end would start it.
	queued, err := h.cancelQueued(ctx, threadID)
	if err != nil {
		return Cancelled{}, err
	}
	c, err := h.cancelRunning(ctx, threadID)
	c.Queued = queued
	return c, err
}

// cancelRunning cancels the thread's active run (see Cancel).
func (h *Host) cancelRunning(ctx context.Context, threadID string) (Cancelled, error) {
	r := h.reg.Cancel(threadID)
	if r == nil {
		td, err := h.threads.LoadThread(ctx, threadID)
		if err != nil {
			return Cancelled{}, err
		}
		if h.cfg.Leases != nil {
			return h.cancelElsewhere(ctx, td)
		}
		return Cancelled{}, nil
	}
	h.lg.Info("run cancelled", zap.String("thread-id", threadID), zap.String("run-id", r.RunID()))
	select {
	case <-r.Done():
	case <-ctx.Done():
	}
	return Cancelled{RunID: r.RunID(), WasRunning: true}, nil
}
