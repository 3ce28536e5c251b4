package runhost

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/pbconv/agentconv"
	"github.com/plumbhq/plumb/pkg/store"
)

// OnBusy is what a Run does when its thread is busy: a run is going on it
// (on any replica), or runs are queued on it (double-texting,
// docs/runs.md).
type OnBusy int

// Double-texting strategies.
const (
	// OnBusyReject fails the Run with agent.ErrThreadBusy (ABORTED).
	OnBusyReject OnBusy = iota
	// OnBusyEnqueue queues the run (store.Runs.EnqueueRun): it starts,
	// detached, once the runs before it on the thread have ended.
	OnBusyEnqueue
	// OnBusyInterrupt queues the run as OnBusyEnqueue does and stops the
	// thread's current run at its next checkpoint (interruptCurrent): it
	// ends CANCELLED (agent.CodeSuperseded), keeping its committed work,
	// and the queue starts the new run.
	OnBusyInterrupt
	// OnBusyRollback queues the run as OnBusyEnqueue does and stops the
	// thread's current run at its next checkpoint discarding what it did
	// (agent.RunInput.Rollback): it ends CANCELLED (agent.CodeRolledBack)
	// with the thread back where it was before it, and the queue starts
	// the new run.
	OnBusyRollback
	// OnBusySteer delivers the input to the thread's running run at its
	// next model call (steer) and follows that run as Attach does; on a
	// thread without a running run it is OnBusyEnqueue.
	OnBusySteer
)

// queues reports whether the strategy queues a run on a busy thread.
func (o OnBusy) queues() bool {
	return o == OnBusyEnqueue || o == OnBusyInterrupt || o == OnBusyRollback || o == OnBusySteer
}

// stopMode is how the strategy stops the thread's current run ("": it
// does not).
func (o OnBusy) stopMode() store.StopMode {
	switch o {
	case OnBusyInterrupt:
		return store.StopInterrupt
	case OnBusyRollback:
		return store.StopRollback
	}
	return ""
}

// ParseOnBusy parses a configured strategy: "reject", "enqueue",
// "interrupt", "rollback", "steer" ("" = reject).
func ParseOnBusy(s string) (OnBusy, error) {
	switch s {
	case "", "reject":
		return OnBusyReject, nil
	case "enqueue":
		return OnBusyEnqueue, nil
	case "interrupt":
		return OnBusyInterrupt, nil
	case "rollback":
		return OnBusyRollback, nil
	case "steer":
		return OnBusySteer, nil
	}
	return OnBusyReject, fmt.Errorf("unknown strategy %q (reject, enqueue, interrupt, rollback or steer)", s)
}

// RunOptions are how RunWith runs.
type RunOptions struct {
	// Detach keeps the run going when its client leaves (see Run).
	Detach bool
	// OnBusy is what to do when the thread is busy.
	OnBusy OnBusy
}

// DefaultQueueInterval is how often a host looks for queued runs that
// nobody starts (Config.QueueInterval): their thread's run ended on a
// replica that died before it started them, or agentd restarted.
const DefaultQueueInterval = 5 * time.Second

// queueScanLimit bounds the threads one queue scan looks at.
const queueScanLimit = 100

// errQueueWaits: the thread's queue cannot move now (the thread has a
// pending interrupt, or its run is to be taken over); a later end of a
// run, or a scan, starts it.
var errQueueWaits = errors.New("the thread's queued runs wait")

// RunWith is Run with a double-texting strategy: with OnBusyEnqueue, a
// run on a busy thread — a run going on it on any replica, or runs
// queued on it — is queued instead (a QUEUED run record), send receives
// a single run_queued event carrying that record, and RunWith returns
// nil. The queued run starts detached once the runs before it on the
// thread have ended (startQueued), in order and once. With
// OnBusyReject (and for a new thread), RunWith is Run, except that a
// thread with queued runs is busy too (the queue keeps its order). With
// OnBusyInterrupt the run is queued as with OnBusyEnqueue, then the
// thread's current run is asked to stop (interruptCurrent); the runs
// queued before it still go first.
func (h *Host) RunWith(ctx context.Context, in agent.RunInput, o RunOptions, send Send) error {
	if o.OnBusy == OnBusySteer && in.ThreadID != "" {
		steered, err := h.steer(ctx, in)
		if err != nil || steered {
			if err != nil {
				return err
			}
			return h.Attach(ctx, in.ThreadID, 0, send)
		}
	}
	if in.ThreadID != "" && h.cfg.Runs != nil {
		next, err := h.cfg.Runs.NextQueuedRun(ctx, in.ThreadID)
		if err != nil {
			return err
		}
		if next != nil {
			if !o.OnBusy.queues() {
				return fmt.Errorf("thread %s has queued runs: %w", in.ThreadID, agent.ErrThreadBusy)
			}
			return h.enqueueBusy(ctx, in, o, send)
		}
	}
	if !o.OnBusy.queues() || in.ThreadID == "" {
		return h.Run(ctx, in, o.Detach, send)
	}
	if h.cfg.Runs == nil {
		return ErrNoRunRecords
	}
	var sent atomic.Bool
	err := h.Run(ctx, in, o.Detach, func(e *plumbv1.Event) error {
		sent.Store(true)
		return send(e)
	})
	if errors.Is(err, agent.ErrThreadBusy) && !sent.Load() {
		return h.enqueueBusy(ctx, in, o, send)
	}
	return err
}

// enqueueBusy queues in on its busy thread and, with OnBusyInterrupt or
// OnBusyRollback, stops the thread's current run.
func (h *Host) enqueueBusy(ctx context.Context, in agent.RunInput, o RunOptions, send Send) error {
	if err := h.admit(ctx, in.ThreadID); err != nil {
		return err
	}
	if err := h.enqueue(ctx, in, send); err != nil {
		return err
	}
	mode := o.OnBusy.stopMode()
	if mode == "" {
		return nil
	}
	if err := h.interruptCurrent(ctx, in.ThreadID, mode); err != nil {
		// The new run is queued: it starts when the current run ends,
		// as if enqueued.
		h.lg.Warn("interrupt the thread's current run; the new run waits for it", zap.String("thread-id", in.ThreadID), zap.Error(err))
	}
	return nil
}

// enqueue stores in as a QUEUED run of its thread, tells send, and starts
// the queue in case the thread became free meanwhile.
func (h *Host) enqueue(ctx context.Context, in agent.RunInput, send Send) error {
	now := h.clock.Now()
	rec := agent.RunRecord{
		RunID: h.newID(), Spec: in.Spec, Status: agent.StatusQueued, Input: slices.Clone(in.Input), CreatedAt: now, Metadata: maps.Clone(in.Metadata),
	}
	if err := h.cfg.Runs.EnqueueRun(ctx, in.ThreadID, rec); err != nil {
		return err
	}
	h.lg.Info("run queued behind the thread's current run", zap.String("thread-id", in.ThreadID), zap.String("run-id", rec.RunID))
	h.startQueued(in.ThreadID)
	pb := agentconv.RunRecordToPB(&rec)
	pb.ThreadId = in.ThreadID
	return send(&plumbv1.Event{
		RunId: rec.RunID, ThreadId: in.ThreadID, Timestamp: timestamppb.New(now),
		Payload: &plumbv1.Event_RunQueued{RunQueued: &plumbv1.RunQueued{Run: pb}},
	})
}

// startQueued starts the thread's oldest queued run, detached, when the
// thread is free: no segment of it here, no pending interrupt, its last
// run not RUNNING (one to be taken over goes first). Under the thread's
// lease it reads the queue again, so that the run starts once, whichever
// replica (or scan) tries; the runtime's first checkpoint, fenced, turns
// the record RUNNING. A queued run the runtime refuses to start (its
// agent is gone, ...) ends FAILED with the reason and the next one is
// tried.
func (h *Host) startQueued(threadID string) {
	if h.cfg.Runs == nil || h.reg.Active(threadID) != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
	defer cancel()
	lg := h.lg.With(zap.String("thread-id", threadID))
	if ok, _, _, err := h.queueCanMove(ctx, threadID); !ok {
		if err != nil {
			lg.Warn("look at the thread's queued runs", zap.Error(err))
		}
		return
	}
	runCtx, cancelRun := context.WithCancel(context.Background())
	r, err := h.reg.Begin(threadID, cancelRun)
	if err != nil {
		cancelRun() // busy here, no slot or stopping: a later end or scan starts it
		return
	}
	h.wg.Add(2)
	go func() {
		defer h.wg.Done()
		defer cancelRun()
		var (
			runID   string
			started atomic.Bool
		)
		err := h.leased(runCtx, threadID, func(e agent.Event) { r.Emit(agentconv.EventToPB(e)) }, func(ctx context.Context, u underLease, sink agent.Sink) error {
			ok, takeover, tenantName, err := h.queueCanMove(ctx, threadID)
			switch {
			case err != nil:
				return err
			case takeover:
				// Under the lease the thread turned out to have a run to
				// take over: hand the lease off (expired, not released)
				// so that the takeover scan continues that run first.
				return fmt.Errorf("%w: %w", errQueueWaits, agent.ErrHandedOff)
			case !ok:
				return errQueueWaits
			}
			next, err := h.cfg.Runs.NextQueuedRun(ctx, threadID)
			if err != nil || next == nil {
				return err
			}
			runID = next.Record.RunID
			if err := h.admitQueued(ctx, tenantName, threadID, runID); err != nil {
				return err
			}
			lg.Info("starting a queued run", zap.String("run-id", runID))
			in := agent.RunInput{
				ThreadID: threadID, RunID: runID, Spec: next.Record.Spec, Input: next.Record.Input, CreatedAt: next.Record.CreatedAt, Metadata: next.Record.Metadata,
				Fence: u.fence, HandOff: u.handOff, Stop: u.stop, Rollback: u.rollback, Flush: u.flush,
			}
			_, err = h.rt.Run(ctx, in, func(e agent.Event) {
				started.Store(true)
				sink(e)
			})
			var pe *agent.PendingInterruptError
			if err != nil && !started.Load() && !errors.As(err, &pe) && !errors.Is(err, agent.ErrThreadBusy) && ctx.Err() == nil {
				// The run cannot start: end it, so that the queue moves.
				lg.Warn("a queued run could not start; it ends FAILED", zap.String("run-id", runID), zap.Error(err))
				rerr := &agent.RunError{Code: agent.CodeInternal, Message: err.Error()}
				if eerr := h.cfg.Runs.EndQueuedRun(ctx, runID, agent.StatusFailed, rerr, h.clock.Now()); eerr != nil {
					lg.Warn("end a queued run that could not start", zap.String("run-id", runID), zap.Error(eerr))
				}
			}
			return err
		})
		if err != nil && !started.Load() && !errors.Is(err, errQueueWaits) && !errors.Is(err, agent.ErrThreadBusy) {
			lg.Debug("the thread's queue did not move", zap.Error(err))
		}
		h.end(r, err)
		if !errors.Is(err, errQuotaWaits) {
			// A queue waiting for its tenant's quota is tried again by
			// the queue scan, not at once (it would wait again).
			h.afterSegment(r.ThreadID())
		}
	}()
	// Nobody streams a queued run: drain its owner's stream so that it
	// behaves as a detached run (Attach and WaitRun follow it).
	go func() {
		defer h.wg.Done()
		_ = r.Stream(context.Background(), func(*plumbv1.Event) error { return nil })
	}()
}

// queueCanMove reports whether the thread's queue may start its next run
// now: the thread has a queued run and no pending interrupt, and its last
// run is not RUNNING. takeover reports such a RUNNING run: its replica
// died or handed it off, and it is taken over first (its end starts the
// queue). tenant is the thread's.
func (h *Host) queueCanMove(ctx context.Context, threadID string) (ok, takeover bool, tenant string, err error) {
	next, err := h.cfg.Runs.NextQueuedRun(ctx, threadID)
	if err != nil || next == nil {
		return false, false, "", err
	}
	td, err := h.threads.LoadThread(ctx, threadID)
	if err != nil {
		return false, false, "", err
	}
	if td.LastRun != nil && td.LastRun.Status == agent.StatusRunning && td.Interrupt == nil {
		return false, true, td.Thread.Tenant, nil
	}
	return td.Interrupt == nil, false, td.Thread.Tenant, nil
}

// errQuotaWaits: the thread's next queued run waits for its tenant's
// quota (Config.AdmitQueued); the queue scan tries again.
var errQuotaWaits = fmt.Errorf("%w for its tenant's quota", errQueueWaits)

// queueWaiter is an AdmitQueued error that keeps the run QUEUED.
type queueWaiter interface {
	error
	QueueWaits() bool
}

// admitQueued asks Config.AdmitQueued whether queued run runID of
// tenant's thread may start now: nil, errQuotaWaits (it stays QUEUED), or
// the refusal, after the run was ended FAILED with it.
func (h *Host) admitQueued(ctx context.Context, tenant, threadID, runID string) error {
	if h.cfg.AdmitQueued == nil {
		return nil
	}
	err := h.cfg.AdmitQueued(ctx, tenant, threadID)
	if err == nil {
		return nil
	}
	lg := h.lg.With(zap.String("thread-id", threadID), zap.String("run-id", runID))
	if w, ok := errors.AsType[queueWaiter](err); ok && w.QueueWaits() {
		lg.Debug("a queued run waits for its tenant's quota", zap.Error(err))
		return fmt.Errorf("%w: %w", errQuotaWaits, err)
	}
	if ctx.Err() != nil {
		return err
	}
	lg.Info("a queued run is refused as it starts; it ends FAILED", zap.Error(err))
	info := agent.ErrorInfo(err)
	if eerr := h.cfg.Runs.EndQueuedRun(ctx, runID, agent.StatusFailed, &info, h.clock.Now()); eerr != nil {
		lg.Warn("end a queued run refused as it starts", zap.Error(eerr))
	}
	return err
}

// afterSegment is called when a run segment of the thread ended here
// (its lease, if any, released): the thread's next queued run may start.
func (h *Host) afterSegment(threadID string) {
	if threadID != "" && h.cfg.Runs != nil {
		h.startQueued(threadID)
	}
}

// startQueueScan starts the loop that starts the queued runs nobody
// starts (see DefaultQueueInterval), when the host keeps run records.
func (h *Host) startQueueScan() func() {
	if h.cfg.Runs == nil || h.cfg.QueueInterval < 0 {
		return func() {}
	}
	every := h.cfg.QueueInterval
	if every == 0 {
		every = DefaultQueueInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			h.scanQueues(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// scanQueues starts the next queued run of every thread whose queue
// waits for nobody.
func (h *Host) scanQueues(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	ids, err := h.cfg.Runs.QueuedThreads(lctx, queueScanLimit)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			h.lg.Warn("list threads with queued runs", zap.Error(err))
		}
		return
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		h.startQueued(id)
	}
}
