package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/model"
)

// storeWriteTimeout bounds a checkpoint written after the run's context
// ended (cancellation must still be recorded).
const storeWriteTimeout = 30 * time.Second

// ConfigureRequest is what a Runner asks its ConfigureFunc for.
type ConfigureRequest struct {
	// ThreadID and RunID identify the run (the thread may not be stored
	// yet for a new thread).
	ThreadID, RunID string
	// Spec is the run's configuration (restored from the run record on
	// Resume).
	Spec RunSpec
	// Resumed is true for Resume.
	Resumed bool
	// Files are RunRequest.files, to seed into the State backend (Run
	// only).
	Files map[string][]byte
	// ThreadFiles are the thread's stored State-backend files, to load
	// into the backend before anything else.
	ThreadFiles map[string]json.RawMessage
	// Metadata are the thread's labels as the run will see them: the
	// stored ones with the request's metadata merged in.
	Metadata map[string]string
}

// ConfigureFunc builds the root agent context's Config (model, fresh
// middleware stack, tools, limits, backend) for one run segment. An error
// fails the request before run_started; wrap ErrInvalidInput for bad
// requests.
type ConfigureFunc func(ctx context.Context, req ConfigureRequest) (*Config, error)

// Runner runs and resumes root agents (docs/agent-core.md §2.2, §6.4) over a Store.
// It holds an in-process lease per thread (one active run per thread).
// Run registries, replay logs and detach belong to the transport adapter.
type Runner struct {
	store     Store
	configure ConfigureFunc
	lg        *zap.Logger
	clock     Clock
	newID     func() string
	tracer    trace.Tracer

	mu     sync.Mutex
	leases map[string]bool
}

// RunnerOption adjusts a Runner.
type RunnerOption func(*Runner)

// WithLogger sets the logger; nil means zap.NewNop().
func WithLogger(lg *zap.Logger) RunnerOption { return func(r *Runner) { r.lg = lg } }

// WithClock sets the clock of event and record timestamps.
func WithClock(c Clock) RunnerOption { return func(r *Runner) { r.clock = c } }

// WithIDs sets the generator of thread, run and interrupt ids (default
// ULIDs).
func WithIDs(f func() string) RunnerOption { return func(r *Runner) { r.newID = f } }

// NewRunner returns a Runner.
func NewRunner(store Store, configure ConfigureFunc, opts ...RunnerOption) *Runner {
	r := &Runner{store: store, configure: configure, leases: make(map[string]bool)}
	for _, o := range opts {
		o(r)
	}
	if r.lg == nil {
		r.lg = zap.NewNop()
	}
	r.lg = r.lg.Named("agent")
	if r.clock == nil {
		r.clock = realClock{}
	}
	if r.newID == nil {
		r.newID = func() string { return ulid.Make().String() }
	}
	if r.tracer == nil {
		r.tracer = defaultTracer()
	}
	return r
}

// Store returns the runner's store.
func (r *Runner) Store() Store { return r.store }

// RunInput is a Run request in domain terms.
type RunInput struct {
	// ThreadID is the thread to continue; "" creates one.
	ThreadID string
	// Metadata is merged into the thread's labels.
	Metadata map[string]string
	// Spec configures the run; it is persisted for Resume.
	Spec RunSpec
	// Input are the user messages. Required.
	Input []string
	// Files are seeded into the State backend by the ConfigureFunc.
	Files map[string][]byte
	// AbandonInterrupt drops a pending interrupt instead of failing.
	AbandonInterrupt bool
	// RunID, if set, is the run's id (a queued run keeps the id it was
	// given when it was queued); "" generates one.
	RunID string
	// CreatedAt, if set, is when the run was asked for (a queued run's
	// queue time); zero is its start.
	CreatedAt time.Time
	// Fence, when set, is the thread's lease: every checkpoint of the run
	// is committed under it (see Store).
	Fence *Fence
	// HandOff, when closed, asks the run to stop at its next checkpoint
	// and leave its record RUNNING for another process to continue (see
	// ErrHandedOff). Nil: never.
	HandOff <-chan struct{}
	// Stop, when closed, asks the run to end at its next checkpoint: the
	// step in flight (its model call and tool calls) completes and is
	// committed, then the run ends CANCELLED with the error
	// CodeSuperseded (a newer run interrupted it, docs/runs.md). Nil:
	// never.
	Stop <-chan struct{}
	// Rollback, when closed, asks the run to end at its next checkpoint
	// and discard what it did: the thread's log is cut back to where it
	// was when the run started and its state (todos, summary, middleware
	// state, State-backend files) restored from RunRecord.Baseline; the
	// run ends CANCELLED with the error CodeRolledBack. Files in a
	// sandbox are not rolled back. Nil: never.
	Rollback <-chan struct{}
	// Flush, when set, is called before each checkpoint commit and
	// returns once every event the run emitted so far is stored where a
	// process continuing the run reads them (agentd's shared event log):
	// a committed checkpoint then never counts events that nobody can
	// replay. Its error fails the commit.
	Flush func(ctx context.Context) error
}

// ResumeInput is a Resume request in domain terms.
type ResumeInput struct {
	ThreadID    string
	InterruptID string
	Decisions   []Decision
	// Fence, HandOff, Stop, Rollback and Flush are as in RunInput.
	Fence    *Fence
	HandOff  <-chan struct{}
	Stop     <-chan struct{}
	Rollback <-chan struct{}
	Flush    func(ctx context.Context) error
}

// ContinueInput names a run to take over: a run whose record is still
// RUNNING because the process that ran it is gone (another agentd replica
// that died, or lost the thread's lease).
type ContinueInput struct {
	ThreadID string
	// RunID, if set, must be the thread's last run.
	RunID string
	// AfterSequence numbers the continued segment's events after it (and
	// after the run record's LastSequence): events the previous process
	// emitted after its last checkpoint keep their numbers.
	AfterSequence uint64
	// Fence, HandOff, Stop and Flush are as in RunInput. A Stop closed
	// from the start ends the run at its first checkpoint boundary: a
	// redone step (tool calls whose results were not committed) completes
	// first.
	Fence    *Fence
	HandOff  <-chan struct{}
	Stop     <-chan struct{}
	Rollback <-chan struct{}
	Flush    func(ctx context.Context) error
}

// ErrNotRunning: Continue found no RUNNING run to take over (it ended,
// paused or is another run).
var ErrNotRunning = errors.New("the thread's last run is not running")

// ErrHandedOff is what Run, Resume and Continue return after run_started
// when the run stopped to be continued by another process: its input's
// HandOff was closed (it stopped after the checkpoint of the step in
// flight), or its context was cancelled with ErrHandedOff as the cause
// (it stopped at once; the uncommitted step is redone by Continue). No
// terminal event is emitted and the run's record stays RUNNING at its
// last checkpoint.
var ErrHandedOff = errors.New("the run was handed off to be continued elsewhere")

// RunResult is how a run segment ended.
type RunResult struct {
	ThreadID, RunID string
	// Status is COMPLETED, MAX_ITERATIONS, CANCELLED, DEADLINE_EXCEEDED,
	// INTERRUPTED or FAILED.
	Status    RunStatus
	FinalText string
	Usage     model.Usage
	// Interrupt is set when Status is INTERRUPTED.
	Interrupt *Interrupted
	// Error is set when Status is FAILED, and for a CANCELLED run that a
	// newer run interrupted (CodeSuperseded).
	Error *RunError
}

// loadLeased takes the in-process lease of an existing thread and loads
// it; the caller must call release once the segment is done.
func (r *Runner) loadLeased(ctx context.Context, threadID string) (td *ThreadData, release func(), err error) {
	release, ok := r.lease(threadID)
	if !ok {
		return nil, nil, fmt.Errorf("thread %s is busy: %w", threadID, ErrThreadBusy)
	}
	if td, err = r.store.LoadThread(ctx, threadID); err != nil {
		release()
		return nil, nil, err
	}
	return td, release, nil
}

func (r *Runner) lease(threadID string) (func(), bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leases[threadID] {
		return nil, false
	}
	r.leases[threadID] = true
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.leases, threadID)
	}, true
}

// Active reports whether the thread has a run in this process.
func (r *Runner) Active(threadID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leases[threadID]
}

// Run starts a run. Errors before run_started are returned (see the Err*
// values); afterwards every failure is an error event and the returned
// error is nil. Events go to sink in sequence order; the last one is
// run_finished, interrupted or error. The segment is one agent.run span
// (a child of the span in ctx, if any).
func (r *Runner) Run(ctx context.Context, in RunInput, sink Sink) (res *RunResult, err error) {
	ctx, span := r.tracer.Start(ctx, SpanRun, trace.WithAttributes(attribute.Bool(AttrResumed, false)))
	defer func() { endRun(span, res, err) }()
	if len(in.Input) == 0 {
		return nil, fmt.Errorf("%w: input is empty", ErrInvalidInput)
	}
	threadID := in.ThreadID
	isNew := threadID == ""
	if isNew {
		threadID = r.newID()
	}
	release, ok := r.lease(threadID)
	if !ok {
		return nil, fmt.Errorf("thread %s is busy: %w", threadID, ErrThreadBusy)
	}
	defer release()
	var td *ThreadData
	if isNew {
		td = &ThreadData{Thread: Thread{ID: threadID, Metadata: in.Metadata}}
	} else {
		if td, err = r.store.LoadThread(ctx, threadID); err != nil {
			return nil, err
		}
		if td.Interrupt != nil && !in.AbandonInterrupt {
			return nil, &PendingInterruptError{ThreadID: threadID, InterruptID: td.Interrupt.InterruptID}
		}
	}
	runID := in.RunID
	if runID == "" {
		runID = r.newID()
	}
	span.SetAttributes(attribute.String(AttrThreadID, threadID), attribute.String(AttrConversation, threadID), attribute.String(AttrRunID, runID))
	labels := maps.Clone(td.Thread.Metadata)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, in.Metadata)
	cfg, err := r.configure(ctx, ConfigureRequest{ThreadID: threadID, RunID: runID, Spec: in.Spec, Files: in.Files, ThreadFiles: td.Files, Metadata: labels})
	if err != nil {
		return nil, err
	}
	setAgentAttrs(span, cfg)
	now := r.clock.Now()
	if isNew {
		td.Thread.CreatedAt, td.Thread.UpdatedAt = now, now
		if err := r.store.CreateThread(ctx, td.Thread); err != nil {
			return nil, err
		}
	}
	if td.Interrupt != nil {
		if err := r.abandon(ctx, td, in.Fence); err != nil {
			return nil, err
		}
	}
	st := RestoreState(Snapshot{Messages: td.Messages, Summary: td.Summary, Todos: td.Todos, Private: td.Private})
	created := in.CreatedAt
	if created.IsZero() {
		created = now
	}
	rr := r.newRootRun(sink, cfg, td, st, RunRecord{
		RunID: runID, Spec: in.Spec, Status: StatusRunning, StartedAt: now, FirstMessage: len(td.Messages),
		Input: slices.Clone(in.Input), CreatedAt: created, Baseline: NewBaseline(td),
	})
	rr.fence, rr.flush = in.Fence, in.Flush
	if in.Metadata != nil && !isNew {
		rr.metadata = in.Metadata
	}
	x, err := newExecution(cfg, rr.rc, st)
	if err != nil {
		return nil, err
	}
	rr.x = x
	x.checkpoint = rr.save
	x.handOff = in.HandOff
	x.stop = in.Stop
	x.rollback = in.Rollback
	rr.steerable(x)

	var inputs []Message
	for _, text := range in.Input {
		inputs = append(inputs, Message{Message: model.Message{Role: model.RoleUser, Content: text}, Source: SourceInput, CreatedAt: now})
	}
	st.Append(inputs...)
	runCtx, cancel := rr.context(ctx)
	defer cancel()
	// The input and the run's record are committed before run_started:
	// a client that got the run id from run_started finds the run
	// (GetRun, WaitRun, on any replica sharing the store). A run whose
	// first checkpoint fails has not started: its error is returned.
	if err := x.save(runCtx, PhaseInput); err != nil {
		return nil, fmt.Errorf("run %s: the input's checkpoint: %w", runID, err)
	}
	rr.rc.Emit(RunStarted{ThreadID: threadID, RunID: runID, Agent: cfg.Agent, Model: cfg.ModelKey})
	return handedOff(rr.start(runCtx, nil))
}

// handedOff returns a segment's result, or ErrHandedOff for a segment
// that stopped to be continued elsewhere (its record still RUNNING).
func handedOff(res *RunResult) (*RunResult, error) {
	if res.Status == StatusRunning {
		return res, ErrHandedOff
	}
	return res, nil
}

// abandon drops a pending interrupt (RunRequest.abandon_interrupt): the
// completed sibling results are appended, the gated calls become dangling,
// and the interrupted run is recorded as CANCELLED.
func (r *Runner) abandon(ctx context.Context, td *ThreadData, fence *Fence) error {
	var add []Message
	now := r.clock.Now()
	if p := td.Pending; p != nil {
		for _, c := range p.Calls {
			if res, ok := p.Results[c.ID]; ok {
				add = append(add, Message{
					Message:   model.Message{Role: model.RoleTool, Content: res.Content, ToolCallID: c.ID, Name: c.Name},
					IsError:   res.IsError,
					Origin:    originOf(&res),
					CreatedAt: now,
				})
			}
		}
	}
	rec := RunRecord{RunID: td.Interrupt.RunID}
	if td.LastRun != nil && td.LastRun.RunID == rec.RunID {
		rec = *td.LastRun
	}
	rec.Status, rec.FinishedAt = StatusCancelled, now
	cp := &Checkpoint{
		ThreadID: td.Thread.ID, Phase: PhaseFinal, Step: rec.Steps, Base: len(td.Messages), Append: add,
		Todos: td.Todos, Summary: td.Summary, Private: td.Private, Run: rec, Fence: fence, CreatedAt: now,
	}
	if err := r.store.SaveCheckpoint(ctx, cp); err != nil {
		return fmt.Errorf("abandon interrupt: %w", err)
	}
	r.lg.Info("pending interrupt abandoned", zap.String("thread-id", td.Thread.ID),
		zap.String("interrupt-id", td.Interrupt.InterruptID), zap.Int("completed-results", len(add)))
	td.Messages = append(td.Messages, add...)
	td.Pending, td.Interrupt = nil, nil
	return nil
}

// Resume continues an interrupted run with decisions (docs/agent-core.md §6.4). The
// decisions are validated first (docs/agent-core.md §6.5); on any problem nothing changes and
// a *DecisionError is returned. The segment is one agent.run span.
func (r *Runner) Resume(ctx context.Context, in ResumeInput, sink Sink) (res *RunResult, err error) {
	ctx, span := r.startResumed(ctx, in.ThreadID)
	defer func() { endRun(span, res, err) }()
	td, release, err := r.loadLeased(ctx, in.ThreadID)
	if err != nil {
		return nil, err
	}
	defer release()
	if td.Interrupt == nil || td.Pending == nil {
		return nil, fmt.Errorf("thread %s has no pending interrupt: %w", in.ThreadID, ErrNoPendingInterrupt)
	}
	if in.InterruptID != td.Interrupt.InterruptID {
		return nil, &StaleInterruptError{Got: in.InterruptID, Current: td.Interrupt.InterruptID}
	}
	plan, err := planResume(td.Pending, in.Decisions)
	if err != nil {
		return nil, err
	}
	if td.LastRun == nil || td.LastRun.RunID != td.Interrupt.RunID {
		return nil, fmt.Errorf("thread %s: the interrupted run's record is missing", in.ThreadID)
	}
	rec := *td.LastRun
	span.SetAttributes(attribute.String(AttrRunID, rec.RunID))
	cfg, err := r.configure(ctx, ConfigureRequest{ThreadID: td.Thread.ID, RunID: rec.RunID, Spec: rec.Spec, Resumed: true, ThreadFiles: td.Files, Metadata: td.Thread.Metadata})
	if err != nil {
		return nil, err
	}
	setAgentAttrs(span, cfg)
	st := RestoreState(Snapshot{Messages: td.Messages, Summary: td.Summary, Todos: td.Todos, Private: td.Private, Pending: td.Pending})
	rec.Status = StatusRunning
	rr := r.newRootRun(sink, cfg, td, st, rec)
	rr.fence, rr.flush = in.Fence, in.Flush
	rr.rc.step = rec.Steps
	rr.shared.seq = rec.LastSequence
	rr.shared.total = rec.Usage
	x, err := newExecution(cfg, rr.rc, st)
	if err != nil {
		return nil, err
	}
	rr.x = x
	x.checkpoint = rr.save
	x.handOff = in.HandOff
	x.stop = in.Stop
	x.rollback = in.Rollback
	rr.steerable(x)
	rr.rc.Emit(RunStarted{ThreadID: td.Thread.ID, RunID: rec.RunID, Agent: cfg.Agent, Model: cfg.ModelKey, Resumed: true})
	runCtx, cancel := rr.context(ctx)
	defer cancel()
	return handedOff(rr.start(runCtx, plan))
}

// Continue takes over a run whose record is RUNNING although no process
// runs it (its agentd replica died or lost the thread's lease) and goes on
// from the thread's last checkpoint, as a segment that starts with
// run_started{resumed}. Nothing committed is done again: the stored log,
// state and step count are where the run goes on from. The one thing
// redone is the step whose model call was committed (PhaseModel) but
// whose tool results were not: its tool calls run again (at least once;
// a tool call whose result was committed never runs again). A subagent
// running at the takeover starts over with its task call, as subagents
// are not checkpointed.
//
// Errors before run_started: ErrThreadBusy, ErrThreadNotFound,
// ErrNotRunning, or the ConfigureFunc's (the run is then recorded FAILED
// with it, so that nobody tries again).
func (r *Runner) Continue(ctx context.Context, in ContinueInput, sink Sink) (res *RunResult, err error) {
	ctx, span := r.startResumed(ctx, in.ThreadID)
	defer func() { endRun(span, res, err) }()
	td, release, err := r.loadLeased(ctx, in.ThreadID)
	if err != nil {
		return nil, err
	}
	defer release()
	if td.LastRun == nil || td.LastRun.Status != StatusRunning || td.Interrupt != nil || (in.RunID != "" && td.LastRun.RunID != in.RunID) {
		return nil, fmt.Errorf("thread %s: %w", in.ThreadID, ErrNotRunning)
	}
	rec := *td.LastRun
	span.SetAttributes(attribute.String(AttrRunID, rec.RunID))
	cfg, err := r.configure(ctx, ConfigureRequest{ThreadID: td.Thread.ID, RunID: rec.RunID, Spec: rec.Spec, Resumed: true, ThreadFiles: td.Files, Metadata: td.Thread.Metadata})
	if err != nil {
		r.failRecord(ctx, td, rec, in.Fence, err)
		return nil, err
	}
	setAgentAttrs(span, cfg)
	st := RestoreState(Snapshot{Messages: td.Messages, Summary: td.Summary, Todos: td.Todos, Private: td.Private, Pending: td.Pending})
	rr := r.newRootRun(sink, cfg, td, st, rec)
	rr.fence, rr.flush = in.Fence, in.Flush
	rr.rc.step = rec.Steps
	rr.shared.seq = max(rec.LastSequence, in.AfterSequence)
	rr.shared.total = rec.Usage
	x, err := newExecution(cfg, rr.rc, st)
	if err != nil {
		r.failRecord(ctx, td, rec, in.Fence, err)
		return nil, err
	}
	rr.x = x
	x.checkpoint = rr.save
	x.redo = td.Pending
	x.handOff = in.HandOff
	x.stop = in.Stop
	x.rollback = in.Rollback
	rr.steerable(x)
	rr.rc.Logger.Info("taking over a run from its last checkpoint", zap.Int("steps", rec.Steps),
		zap.Int("messages", len(td.Messages)), zap.Bool("redo-tool-calls", td.Pending != nil))
	rr.rc.Emit(RunStarted{ThreadID: td.Thread.ID, RunID: rec.RunID, Agent: cfg.Agent, Model: cfg.ModelKey, Resumed: true})
	runCtx, cancel := rr.context(ctx)
	defer cancel()
	return handedOff(rr.start(runCtx, nil))
}

// failRecord records a run that cannot be continued as FAILED with err.
func (r *Runner) failRecord(ctx context.Context, td *ThreadData, rec RunRecord, fence *Fence, err error) {
	info := ErrorInfo(err)
	rec.Status, rec.Error, rec.FinishedAt = StatusFailed, &info, r.clock.Now()
	cp := &Checkpoint{
		ThreadID: td.Thread.ID, Phase: PhaseFinal, Step: rec.Steps, Base: len(td.Messages),
		Todos: td.Todos, Summary: td.Summary, Private: td.Private, Run: rec, Fence: fence, CreatedAt: rec.FinishedAt,
	}
	if serr := r.store.SaveCheckpoint(ctx, cp); serr != nil {
		r.lg.Warn("record a run that cannot be continued as failed", zap.String("thread-id", td.Thread.ID), zap.Error(serr))
	}
}

// rootRun is one segment of a root run.
type rootRun struct {
	r         *Runner
	cfg       *Config
	td        *ThreadData
	st        *State
	x         *execution
	rc        *RunContext
	shared    *runShared
	rec       RunRecord
	persisted int
	edits     []CallEdit
	metadata  map[string]string
	files     map[string]json.RawMessage // taken from the backend, not yet stored
	interrupt *PendingInterrupt
	segStart  time.Time
	fence     *Fence
	flush     func(ctx context.Context) error
	// consume are the steers the next checkpoint delivers.
	consume []int64
}

// steerable lets x take the run's steers when the store keeps them.
func (rr *rootRun) steerable(x *execution) {
	ss, ok := rr.r.store.(SteerStore)
	if !ok {
		return
	}
	x.steers = func(ctx context.Context) ([]Steer, error) {
		return ss.PendingSteers(ctx, rr.td.Thread.ID, rr.rec.RunID)
	}
	x.consume = func(ids []int64) { rr.consume = append(rr.consume, ids...) }
}

var errRunTimeout = errors.New("run timeout")

func (r *Runner) newRootRun(sink Sink, cfg *Config, td *ThreadData, st *State, rec RunRecord) *rootRun {
	path := cfg.Agent
	if path == "" {
		path = "main"
	}
	lg := r.lg.With(zap.String("thread-id", td.Thread.ID), zap.String("run-id", rec.RunID))
	shared := &runShared{sink: sink, clock: r.clock, newID: r.newID, lg: lg, tracer: r.tracer}
	rc := &RunContext{
		ThreadID: td.Thread.ID, RunID: rec.RunID, Agent: cfg.Agent, ModelKey: cfg.ModelKey,
		AgentPath: path, Backend: cfg.Backend, Clock: r.clock,
		Logger:    lg.With(zap.String("agent-path", path)),
		StartedAt: rec.StartedAt, Limits: cfg.Limits.WithDefaults(), shared: shared,
	}
	return &rootRun{r: r, cfg: cfg, td: td, st: st, rc: rc, shared: shared, rec: rec, persisted: len(td.Messages), segStart: time.Now()}
}

// context returns the segment's context: the run timeout minus the time
// the run was already active.
func (rr *rootRun) context(ctx context.Context) (context.Context, context.CancelFunc) {
	left := rr.rc.Limits.Timeout - rr.rec.Elapsed
	return context.WithTimeoutCause(ctx, max(left, time.Millisecond), errRunTimeout)
}

// start runs BeforeAgent and the loop, then finishes the segment.
func (rr *rootRun) start(ctx context.Context, plan *resumePlan) *RunResult {
	if plan != nil {
		rr.x.onEdit = func(e CallEdit) { rr.edits = append(rr.edits, e) }
	}
	release, err := rr.x.provideTools(ctx)
	defer release()
	if err != nil {
		if ctx.Err() != nil {
			return rr.finish(ctx, loopEnd{kind: endStopped})
		}
		return rr.finish(ctx, loopEnd{kind: endFailed, err: err})
	}
	before := rr.st.Len()
	if err := rr.x.beforeAgent(ctx); err != nil {
		if ctx.Err() != nil {
			return rr.finish(ctx, loopEnd{kind: endStopped})
		}
		return rr.finish(ctx, loopEnd{kind: endFailed, err: err})
	}
	if rr.st.Len() != before {
		if err := rr.x.save(ctx, PhaseInput); err != nil {
			return rr.finish(ctx, loopEnd{kind: endFailed, err: err})
		}
	}
	return rr.finish(ctx, rr.x.loop(ctx, plan))
}

// save writes one checkpoint of the current state.
func (rr *rootRun) save(ctx context.Context, phase Phase) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeWriteTimeout)
	defer cancel()
	if rr.cfg.FileChanges != nil {
		delta, err := rr.cfg.FileChanges()
		if err != nil {
			return fmt.Errorf("collect file changes: %w", err)
		}
		for p, f := range delta {
			if rr.files == nil {
				rr.files = make(map[string]json.RawMessage)
			}
			rr.files[p] = f
		}
	}
	todos, sum, private, pending := rr.st.parts()
	rec := rr.rec
	rec.Steps = rr.rc.Step()
	rec.Usage = rr.rc.RunUsage()
	rec.Elapsed = rr.rec.Elapsed + time.Since(rr.segStart)
	if rr.fence != nil {
		rec.Holder = rr.fence.Holder
	}
	if rec.LastSequence < rr.shared.nextSequence()-1 {
		rec.LastSequence = rr.shared.nextSequence() - 1
	}
	cp := &Checkpoint{
		ThreadID: rr.td.Thread.ID, Phase: phase, Step: rec.Steps,
		Base: rr.persisted, Append: rr.st.MessagesFrom(rr.persisted), EditCalls: rr.edits, Metadata: rr.metadata,
		Todos: todos, Summary: sum, Private: private, Pending: pending, Interrupt: rr.interrupt,
		Files: rr.files, Run: rec, Fence: rr.fence, CreatedAt: rr.r.clock.Now(), ConsumeSteers: rr.consume,
	}
	if rr.flush != nil {
		if err := rr.flush(ctx); err != nil {
			rr.rc.Logger.Error("checkpoint failed: the run's events could not be stored", zap.String("phase", string(phase)), zap.Error(err))
			return fmt.Errorf("store the run's events before checkpoint %s: %w", phase, err)
		}
	}
	if err := rr.r.store.SaveCheckpoint(ctx, cp); err != nil {
		rr.rc.Logger.Error("checkpoint failed", zap.String("phase", string(phase)), zap.Error(err))
		return err
	}
	rr.persisted += len(cp.Append)
	rr.edits, rr.metadata, rr.files, rr.consume = nil, nil, nil, nil
	return nil
}

// finish records how the segment ended and emits the terminal event.
func (rr *rootRun) finish(ctx context.Context, end loopEnd) *RunResult {
	res := &RunResult{ThreadID: rr.td.Thread.ID, RunID: rr.rec.RunID}
	now := rr.r.clock.Now()
	rr.rec.FinalText = LastText(rr.st.MessagesFrom(rr.rec.FirstMessage))
	switch end.kind {
	case endInterrupted:
		p := rr.st.Pending()
		rr.interrupt = &PendingInterrupt{
			InterruptID: rr.r.newID(), RunID: rr.rec.RunID, Requests: p.AllRequests(), CreatedAt: now,
		}
		rr.rec.Status = StatusInterrupted
		rr.rec.LastSequence = rr.shared.nextSequence()
		if err := rr.save(ctx, PhaseInterrupt); err != nil {
			rr.interrupt = nil
			return rr.fail(ctx, res, &storageError{err})
		}
		ev := Interrupted{InterruptID: rr.interrupt.InterruptID, Requests: rr.interrupt.Requests}
		rr.rc.Emit(ev)
		res.Status, res.Interrupt, res.Usage = StatusInterrupted, &ev, rr.rc.RunUsage()
		return res
	case endFailed:
		return rr.fail(ctx, res, end.err)
	case endStopped:
		if errors.Is(context.Cause(ctx), ErrHandedOff) {
			end.kind = endHandedOff
		}
	case endSuperseded:
		rr.rec.Error = &RunError{Code: CodeSuperseded, Message: "interrupted by a newer run"}
	case endRolledBack:
		return rr.rollBack(ctx, res)
	}
	if end.kind == endHandedOff {
		// Nothing more is saved: the record stays RUNNING at the last
		// checkpoint, where Continue picks the run up.
		rr.rc.Logger.Info("run handed off at its last checkpoint", zap.Int("steps", rr.rc.Step()))
		res.Status = StatusRunning
		return res
	}
	switch end.kind {
	case endCompleted:
		rr.rec.Status = StatusCompleted
	case endStepLimit:
		rr.rec.Status = StatusMaxIterations
	default:
		rr.rec.Status = StatusCancelled
		if errors.Is(context.Cause(ctx), errRunTimeout) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			rr.rec.Status = StatusDeadlineExceeded
		}
	}
	rr.rec.FinishedAt = now
	rr.rec.LastSequence = rr.shared.nextSequence()
	rr.st.setPending(nil)
	if err := rr.save(ctx, PhaseFinal); err != nil {
		return rr.fail(ctx, res, &storageError{err})
	}
	usage := rr.rc.RunUsage()
	rr.rc.Emit(RunFinished{Status: rr.rec.Status, FinalText: rr.rec.FinalText, Usage: usage})
	rr.rc.Logger.Info("run finished", zap.String("status", string(rr.rec.Status)),
		zap.Int("steps", rr.rc.Step()), zap.Int("total-tokens", usage.Total))
	res.Status, res.FinalText, res.Usage = rr.rec.Status, rr.rec.FinalText, usage
	return res
}

// fail records a failed run and emits the error event.
func (rr *rootRun) fail(ctx context.Context, res *RunResult, err error) *RunResult {
	info := ErrorInfo(err)
	rr.rc.Logger.Warn("run failed", zap.String("error-code", info.Code), zap.Error(err))
	rr.rec.Status, rr.rec.Error, rr.rec.FinishedAt = StatusFailed, &info, rr.r.clock.Now()
	rr.rec.LastSequence = rr.shared.nextSequence()
	rr.st.setPending(nil)
	if serr := rr.save(ctx, PhaseFinal); serr != nil && info.Code != CodeStorage {
		info = ErrorInfo(&storageError{serr})
	}
	rr.rc.Emit(info)
	res.Status, res.Error, res.Usage = StatusFailed, &info, rr.rc.RunUsage()
	return res
}

// rollBack ends a run that a newer run rolled back (RunInput.Rollback):
// one final checkpoint cuts the log back to the run's first message and
// restores the state of its baseline, the run's record ends CANCELLED
// with CodeRolledBack, and run_finished{CANCELLED} is emitted.
func (rr *rootRun) rollBack(ctx context.Context, res *RunResult) *RunResult {
	now := rr.r.clock.Now()
	rr.rec.Status, rr.rec.FinishedAt, rr.rec.FinalText = StatusCancelled, now, ""
	rr.rec.Error = &RunError{Code: CodeRolledBack, Message: "rolled back by a newer run"}
	rr.rec.Steps = rr.rc.Step()
	rr.rec.Usage = rr.rc.RunUsage()
	rr.rec.Elapsed += time.Since(rr.segStart)
	rr.rec.LastSequence = rr.shared.nextSequence()
	if rr.fence != nil {
		rr.rec.Holder = rr.fence.Holder
	}
	b := rr.rec.Baseline
	if b == nil {
		b = &RunBaseline{FilesOmitted: true} // a record from before baselines: the log only
	}
	cp := &Checkpoint{
		ThreadID: rr.td.Thread.ID, Phase: PhaseFinal, Step: rr.rec.Steps, Base: rr.rec.FirstMessage, Truncate: true,
		Todos: b.Todos, Summary: b.Summary, Private: b.Private, Run: rr.rec, Fence: rr.fence, CreatedAt: now,
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeWriteTimeout)
	defer cancel()
	if !b.FilesOmitted {
		cur, err := rr.r.store.LoadThread(wctx, rr.td.Thread.ID)
		if err != nil {
			return rr.fail(ctx, res, &storageError{err})
		}
		cp.Files = maps.Clone(b.Files)
		for p := range cur.Files {
			if _, ok := b.Files[p]; !ok {
				if cp.Files == nil {
					cp.Files = map[string]json.RawMessage{}
				}
				cp.Files[p] = nil // created by the run
			}
		}
	}
	if rr.flush != nil {
		if err := rr.flush(wctx); err != nil {
			return rr.fail(ctx, res, &storageError{err})
		}
	}
	if err := rr.r.store.SaveCheckpoint(wctx, cp); err != nil {
		rr.rc.Logger.Error("rollback checkpoint failed", zap.Error(err))
		return rr.fail(ctx, res, &storageError{err})
	}
	rr.persisted = rr.rec.FirstMessage
	usage := rr.rc.RunUsage()
	rr.rc.Emit(RunFinished{Status: StatusCancelled, Usage: usage})
	rr.rc.Logger.Info("run rolled back by a newer run", zap.Int("steps", rr.rc.Step()), zap.Int("messages", rr.rec.FirstMessage))
	res.Status, res.Usage, res.Error = StatusCancelled, usage, rr.rec.Error
	return res
}
