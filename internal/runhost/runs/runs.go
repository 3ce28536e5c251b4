// Package runs is agentd's run registry (docs/agent-core.md §2.4): the run segments
// active in this process, one per thread, each with a replay log of its
// events, kept for a retention period after the terminal event so that
// Attach can replay it. A segment that continues a run (Resume after an
// interrupt) keeps the run's earlier segments that are still retained, so
// that Attach replays the whole run, segment after segment. It also owns
// the run slots (server.max_concurrent_runs) and the draining state of a
// shutdown.
//
// A replay log is bounded in events and bytes, whoever is reading it: a
// stream that falls so far behind that the log must drop events it has
// not sent yet ends with a *LagError instead of holding them in memory,
// and the run and the other streams go on unaffected.
//
// The registry stores events as they will be sent (plumb.v1 messages) and
// never renumbers them: sequence numbers come from the runtime. It must
// not map errors to gRPC status codes; it returns the sentinel errors
// below and internal/server maps them.
package runs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/agent"
	"google.golang.org/protobuf/proto"
)

// Defaults of Options.
const (
	DefaultMaxRuns   = 64
	DefaultRetention = 5 * time.Minute
	DefaultMaxEvents = 10000
	DefaultMaxBytes  = 16 << 20
)

// Errors of the registry; internal/server maps them to gRPC codes.
var (
	// ErrNoSlot: every run slot is taken (RESOURCE_EXHAUSTED).
	ErrNoSlot = errors.New("no run slot is free")
	// ErrShuttingDown: the registry is draining (UNAVAILABLE).
	ErrShuttingDown = errors.New("agentd is shutting down")
	// ErrReplicaStopping: the registry of a replica that hands its runs
	// to other replicas is draining (UNAVAILABLE, REPLICA_STOPPING). It is
	// also ErrShuttingDown.
	ErrReplicaStopping = fmt.Errorf("%w: this replica hands its runs to the other replicas; call another one", ErrShuttingDown)
	// ErrNoRun: the thread has no active or retained run (NOT_FOUND).
	ErrNoRun = errors.New("no active or retained run")
	// ErrOutOfRange: Attach asked for events the replay log no longer
	// holds (OUT_OF_RANGE). The error is an *OutOfRangeError.
	ErrOutOfRange = errors.New("after_sequence is older than the replay log")
	// ErrRunning: the operation needs a thread without an active run
	// (FAILED_PRECONDITION).
	ErrRunning = errors.New("thread has an active run")
	// ErrLagging: a stream fell so far behind its run that the replay log
	// dropped events it had not sent (RESOURCE_EXHAUSTED). The error is a
	// *LagError.
	ErrLagging = errors.New("the stream fell behind the run")
)

// OutOfRangeError reports an Attach whose after_sequence lies before the
// oldest event the replay log still holds.
type OutOfRangeError struct {
	ThreadID string
	// After is the requested after_sequence; Oldest the smallest sequence
	// that can still be replayed.
	After, Oldest uint64
}

func (e *OutOfRangeError) Error() string {
	return fmt.Sprintf("thread %s: after_sequence %d is older than the replay log (oldest event: %d; events of the run "+
		"past the replay retention or size caps are dropped); "+
		"GetThread has the committed messages, Attach with after_sequence %d follows the rest",
		e.ThreadID, e.After, e.Oldest, e.Oldest-1)
}

// Is matches ErrOutOfRange.
func (e *OutOfRangeError) Is(target error) bool { return target == ErrOutOfRange }

// LagError ends a stream (Run, Resume or Attach) that read more slowly
// than its run produced events: to stay within its bounds the replay log
// dropped events the stream had not sent yet. The run goes on.
type LagError struct {
	ThreadID string
	// Last is the last sequence the stream sent (its after_sequence when
	// it sent nothing); Oldest the smallest sequence the log still holds.
	Last, Oldest uint64
}

func (e *LagError) Error() string {
	return fmt.Sprintf("thread %s: the stream fell behind the run; events after %d were dropped from the replay log (oldest event: %d); "+
		"GetThread has the committed messages, Attach with after_sequence %d follows the rest",
		e.ThreadID, e.Last, e.Oldest, e.Oldest-1)
}

// Is matches ErrLagging.
func (e *LagError) Is(target error) bool { return target == ErrLagging }

// CutError ends a stream whose run segment stopped without a terminal
// event (Run.Abort): the run goes on elsewhere, and the client re-Attaches
// after Last. Err says why (agent.ErrHandedOff, agent.ErrLeaseLost, ...).
type CutError struct {
	ThreadID string
	// Last is the last sequence the stream delivered (its after_sequence
	// when it delivered nothing).
	Last uint64
	Err  error
}

func (e *CutError) Error() string {
	return fmt.Sprintf("thread %s: the stream ended after sequence %d: %v; Attach with after_sequence %d follows the rest",
		e.ThreadID, e.Last, e.Err, e.Last)
}

// Unwrap returns why the segment stopped.
func (e *CutError) Unwrap() error { return e.Err }

// Options configure a Registry. Zero values take the defaults.
type Options struct {
	// MaxRuns is how many runs may be active at once.
	MaxRuns int
	// Retention is how long a run's replay log is kept after its terminal
	// event.
	Retention time.Duration
	// MaxEvents and MaxBytes (the events' encoded size) cap a replay log;
	// past either, deltas are coalesced and then the oldest events
	// dropped, down to 90 % of both caps. A stream whose unsent events are
	// dropped ends with a *LagError. The newest event is always kept.
	MaxEvents int
	MaxBytes  int
	// Now is the clock of retention (default time.Now).
	Now func() time.Time
	// Replicated: the registry is one replica's of several, which take
	// over its runs when it stops; Begin during a drain then fails with
	// ErrReplicaStopping.
	Replicated bool
}

// Registry tracks run segments by thread. It is safe for concurrent use.
type Registry struct {
	o Options

	mu       sync.Mutex
	threads  map[string]*Run // newest segment per thread: starting, active or retained
	reserved map[string]bool // threads held by Reserve
	live     map[*Run]bool   // segments whose runtime call has not returned
	draining bool
	ended    chan struct{} // closed (and replaced) whenever a segment ends
}

// New returns an empty registry.
func New(o Options) *Registry {
	if o.MaxRuns <= 0 {
		o.MaxRuns = DefaultMaxRuns
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.MaxEvents <= 0 {
		o.MaxEvents = DefaultMaxEvents
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Registry{
		o: o, threads: make(map[string]*Run), reserved: make(map[string]bool),
		live: make(map[*Run]bool), ended: make(chan struct{}),
	}
}

// Begin registers a new run segment and takes a run slot. threadID is the
// thread the request names ("" for a new thread: the segment is filed
// under its thread when run_started arrives). cancel stops the segment's
// context (Cancel, Shutdown). Errors: ErrShuttingDown, agent.ErrThreadBusy
// when the thread has a segment that has not ended, ErrNoSlot.
func (g *Registry) Begin(threadID string, cancel context.CancelFunc) (*Run, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.draining {
		if g.o.Replicated {
			return nil, ErrReplicaStopping
		}
		return nil, ErrShuttingDown
	}
	g.prune()
	if threadID != "" {
		if ex := g.threads[threadID]; g.reserved[threadID] || (ex != nil && !ex.Ended()) {
			return nil, fmt.Errorf("thread %s is busy: %w", threadID, agent.ErrThreadBusy)
		}
	}
	if len(g.live) >= g.o.MaxRuns {
		return nil, fmt.Errorf("%w (%d runs active)", ErrNoSlot, len(g.live))
	}
	r := &Run{g: g, cancel: cancel, threadID: threadID, wake: make(chan struct{}), done: make(chan struct{}), owner: &follower{}}
	// The owner's stream is a follower from the start: trimming never
	// coalesces across its position, even before Stream is called.
	r.followers = map[*follower]bool{r.owner: true}
	g.live[r] = true
	if threadID != "" {
		r.prev = g.threads[threadID]
		g.threads[threadID] = r
	}
	return r, nil
}

// Finishing returns the done channel of threadID's segment when it has
// emitted its terminal event but not yet ended (its end steps, a
// workspace snapshot say, still hold the thread), and nil otherwise. A
// client that learnt the run ended from the store (its record, the
// shared event log) may start the next run meanwhile: waiting on the
// channel lets that run begin instead of finding the thread busy.
func (g *Registry) Finishing(threadID string) <-chan struct{} {
	g.mu.Lock()
	ex := g.threads[threadID]
	g.mu.Unlock()
	if ex == nil {
		return nil
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.ended || ex.held == nil {
		return nil
	}
	return ex.done
}

// Reserve holds threadID so that no run can begin on it until release is
// called (DeleteThread uses it). It fails with agent.ErrThreadBusy when
// the thread has a segment that has not ended or is already reserved.
func (g *Registry) Reserve(threadID string) (release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ex := g.threads[threadID]; g.reserved[threadID] || (ex != nil && !ex.Ended()) {
		return nil, fmt.Errorf("thread %s is busy: %w", threadID, agent.ErrThreadBusy)
	}
	g.reserved[threadID] = true
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		delete(g.reserved, threadID)
	}, nil
}

// Active returns the thread's segment that has not ended, or nil.
func (g *Registry) Active(threadID string) *Run {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r := g.threads[threadID]; r != nil && !r.Ended() {
		return r
	}
	return nil
}

// Cancel cancels the thread's active segment. It returns the segment (nil
// when none was active); its Done channel closes once the runtime call has
// returned and the terminal event is in the log.
func (g *Registry) Cancel(threadID string) *Run {
	r := g.Active(threadID)
	if r != nil {
		r.cancel()
	}
	return r
}

// Attach returns the thread's newest segment (active or retained) and the
// sequence to replay after: Follow sends the run's retained earlier
// segments first (0 is the start of the run). Errors: ErrNoRun,
// *OutOfRangeError when an event after after is no longer retained.
func (g *Registry) Attach(threadID string, after uint64) (*Run, uint64, error) {
	g.mu.Lock()
	g.prune()
	r := g.threads[threadID]
	g.mu.Unlock()
	if r == nil {
		return nil, 0, fmt.Errorf("thread %s: %w", threadID, ErrNoRun)
	}
	r.mu.Lock()
	started, ended := r.started, r.ended
	r.mu.Unlock()
	if !started {
		if ended {
			return nil, 0, fmt.Errorf("thread %s: %w", threadID, ErrNoRun)
		}
		return r, after, nil // starting: Follow sends earlier segments once it has started
	}
	if oldest := r.oldest(); after < oldest {
		return nil, 0, &OutOfRangeError{ThreadID: threadID, After: after, Oldest: oldest + 1}
	}
	return r, after, nil
}

// Forget drops the thread's retained segment (after the thread was
// deleted). An active segment is kept.
func (g *Registry) Forget(threadID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r := g.threads[threadID]; r != nil && r.Ended() {
		delete(g.threads, threadID)
	}
}

// Drain makes every later Begin fail with ErrShuttingDown.
func (g *Registry) Drain() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.draining = true
}

// CancelAll cancels every segment that has not ended.
func (g *Registry) CancelAll() {
	g.mu.Lock()
	rs := make([]*Run, 0, len(g.live))
	for r := range g.live {
		rs = append(rs, r)
	}
	g.mu.Unlock()
	for _, r := range rs {
		r.cancel()
	}
}

// Wait blocks until no segment is live or ctx ends.
func (g *Registry) Wait(ctx context.Context) error {
	for {
		g.mu.Lock()
		n, ch := len(g.live), g.ended
		g.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Live returns how many segments hold a run slot.
func (g *Registry) Live() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.live)
}

// prune drops retained segments past their retention, and the earlier
// segments of retained runs past theirs. Called with g.mu held.
func (g *Registry) prune() {
	now := g.o.Now()
	for id, r := range g.threads {
		if r.expired(now) {
			delete(g.threads, id)
			continue
		}
		// Segments end in order: the first expired one ends the chain.
		for seg := r; ; {
			seg.mu.Lock()
			e := seg.earlier
			seg.mu.Unlock()
			if e == nil {
				break
			}
			if e.expired(now) {
				seg.mu.Lock()
				seg.earlier = nil
				seg.mu.Unlock()
				break
			}
			seg = e
		}
	}
}

// expired reports whether the segment ended more than Retention before
// now. Called without r.mu held.
func (r *Run) expired(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended && !now.Before(r.endedAt.Add(r.g.o.Retention))
}

// file records the thread of a segment that began without one, once its
// first event names it. Called without r.mu held.
func (g *Registry) file(r *Run, threadID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ex := g.threads[threadID]; ex == nil || ex == r || ex.Ended() {
		g.threads[threadID] = r
	}
}

// Run is one run segment (a Run or a Resume stream) and its replay log.
type Run struct {
	g      *Registry
	cancel context.CancelFunc

	mu        sync.Mutex
	threadID  string
	runID     string
	started   bool
	first     uint64 // sequence of the segment's first event
	floor     uint64 // events with a sequence ≤ floor are gone from the log
	events    []entry
	bytes     int            // encoded size of events
	held      *plumbv1.Event // the terminal event, published by End
	ended     bool
	startErr  error
	cut       error // why an aborted segment's streams end (Abort)
	endedAt   time.Time
	wake      chan struct{} // closed (and replaced) on every change
	done      chan struct{} // closed by End
	followers map[*follower]bool
	owner     *follower
	// prev is the thread's retained segment this one replaced in Begin,
	// restored if this one fails to start.
	prev *Run
	// earlier is the run's previous segment (this one resumes the same
	// run), while it is retained; its own earlier ones chain from it.
	// Ended segments never change, so they are read without following.
	earlier *Run
}

// entry is one event of the log and its encoded size.
type entry struct {
	e    *plumbv1.Event
	size int
}

type follower struct {
	// cursor is the last sequence handed to the stream's send: an event
	// counts as sent from then on, so that trimming never merges it into
	// a later one.
	cursor uint64
}

// ThreadID returns the segment's thread ("" before run_started of a new
// thread).
func (r *Run) ThreadID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.threadID
}

// RunID returns the run id ("" before run_started).
func (r *Run) RunID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runID
}

// Ended reports whether the runtime call has returned.
func (r *Run) Ended() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
}

// Done is closed when the runtime call has returned and the terminal
// event (if any) is in the log.
func (r *Run) Done() <-chan struct{} { return r.done }

// Emit appends one event; it is the runtime sink of the segment. The
// terminal event is held back until End, so that a client who sees it
// finds the thread's lease and the run slot already free.
func (r *Run) Emit(e *plumbv1.Event) {
	// File the segment under its thread before its first event can reach
	// a stream: a client that has seen run_started may Attach at once.
	r.mu.Lock()
	first, prev := !r.started && !r.ended, r.prev
	r.mu.Unlock()
	if first && e.GetThreadId() != "" {
		r.g.file(r, e.GetThreadId())
	}
	var earlier *Run
	if first && prev != nil && prev.RunID() == e.GetRunId() {
		earlier = prev // a Resume of the run prev interrupted
	}
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		return
	}
	if !r.started {
		r.started, r.prev, r.earlier = true, nil, earlier
		r.threadID, r.runID = e.GetThreadId(), e.GetRunId()
		r.first = e.GetSequence()
		r.floor = r.first - 1
	}
	if isTerminal(e) {
		r.held = e
	} else {
		r.push(e)
		r.trim()
		r.signal()
	}
	r.mu.Unlock()
}

// End records that the runtime call returned with err, releases the run
// slot and publishes the terminal event. A segment that emitted nothing
// keeps err as its start error (what the owner's stream returns).
func (r *Run) End(err error) { r.end(err, nil) }

// Abort ends a segment that stopped without a terminal event because it
// goes on elsewhere (handed off, or its thread's lease lost): like End,
// but once a stream has sent the segment's log it ends with a *CutError
// wrapping cause, naming the last sequence it delivered. A terminal event
// held back is dropped. A segment that emitted nothing ends as End(cause)
// would.
func (r *Run) Abort(cause error) { r.end(cause, cause) }

func (r *Run) end(err, cut error) {
	g := r.g
	g.mu.Lock()
	defer g.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return
	}
	delete(g.live, r)
	if !r.started {
		if err == nil {
			err = errors.New("the run ended without events")
		}
		r.startErr = err
		if r.threadID != "" && g.threads[r.threadID] == r {
			if r.prev != nil {
				g.threads[r.threadID] = r.prev // a rejected request keeps the replay
			} else {
				delete(g.threads, r.threadID)
			}
		}
		r.prev = nil
	}
	if r.started && cut != nil {
		r.cut, r.held = cut, nil
	}
	if r.held != nil {
		r.push(r.held)
		r.held = nil
	}
	r.ended, r.endedAt = true, g.o.Now()
	r.signal()
	close(r.done)
	close(g.ended)
	g.ended = make(chan struct{})
}

// signal wakes the followers. Called with r.mu held.
func (r *Run) signal() {
	close(r.wake)
	r.wake = make(chan struct{})
}

// Stream sends the segment's events from its start until the terminal
// event, following it live: the owner's stream (Run, Resume). It must be
// called exactly once per segment. When the run failed before emitting
// anything it returns that error; when the stream falls behind, a
// *LagError (the run goes on).
func (r *Run) Stream(ctx context.Context, send func(*plumbv1.Event) error) error {
	return r.follow(ctx, r.owner, send, true)
}

// Follow sends the events after sequence after, then follows the segment
// live until its terminal event (Attach). after comes from
// Registry.Attach. It returns a *LagError when the stream falls behind.
func (r *Run) Follow(ctx context.Context, after uint64, send func(*plumbv1.Event) error) error {
	f := &follower{cursor: after}
	r.mu.Lock()
	if r.started && max(after, r.first-1) < r.floor {
		// Trimmed since Registry.Attach.
		err := &OutOfRangeError{ThreadID: r.threadID, After: after, Oldest: r.floor + 1}
		r.mu.Unlock()
		return err
	}
	r.followers[f] = true
	r.mu.Unlock()
	return r.follow(ctx, f, send, false)
}

func (r *Run) follow(ctx context.Context, f *follower, send func(*plumbv1.Event) error, owner bool) error {
	defer func() {
		r.mu.Lock()
		delete(r.followers, f)
		r.mu.Unlock()
	}()
	for {
		r.mu.Lock()
		if r.started && f.cursor < r.first-1 {
			if !owner {
				// Attach: the run's earlier segments first.
				r.mu.Unlock()
				if err := r.replayEarlier(ctx, f, send); err != nil {
					return err
				}
				r.mu.Lock()
			}
			f.cursor = max(f.cursor, r.first-1) // nothing before the segment is in its log
		}
		if r.started && f.cursor < r.floor {
			// The log dropped events this stream had not sent (or, right
			// after Registry.Attach, the ones it asked for).
			err := &LagError{ThreadID: r.threadID, Last: f.cursor, Oldest: r.floor + 1}
			r.mu.Unlock()
			return err
		}
		// One event at a time: a stream blocked in send holds no more of
		// the log than that event.
		i := sort.Search(len(r.events), func(i int) bool { return r.events[i].e.GetSequence() > f.cursor })
		if i < len(r.events) {
			e := r.events[i].e
			f.cursor = e.GetSequence()
			r.mu.Unlock()
			if err := send(e); err != nil {
				return err
			}
			if isTerminal(e) {
				return nil
			}
			continue
		}
		ended, startErr, cut, wake, threadID := r.ended, r.startErr, r.cut, r.wake, r.threadID
		r.mu.Unlock()
		if ended {
			if cut != nil {
				return &CutError{ThreadID: threadID, Last: f.cursor, Err: cut}
			}
			if startErr != nil {
				if owner {
					return startErr
				}
				return fmt.Errorf("thread %s: %w", threadID, ErrNoRun)
			}
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// chain returns the run's retained segments before r, oldest first, as
// far back as they follow each other without a gap (a segment whose log
// was trimmed at its start ends the chain). Called without r.mu held.
func (r *Run) chain() []*Run {
	now := r.g.o.Now()
	var out []*Run
	for seg := r; ; {
		seg.mu.Lock()
		e, contiguous := seg.earlier, seg.floor == seg.first-1
		first := seg.first
		seg.mu.Unlock()
		if e == nil || !contiguous || e.expired(now) {
			break
		}
		e.mu.Lock()
		n := len(e.events)
		adjacent := n > 0 && e.events[n-1].e.GetSequence() == first-1
		e.mu.Unlock()
		if !adjacent {
			break
		}
		out = append(out, e)
		seg = e
	}
	slices.Reverse(out)
	return out
}

// oldest returns the sequence after which the run can still be replayed
// from r and its chain without a gap. Called without r.mu held, on a
// started segment.
func (r *Run) oldest() uint64 { return r.oldestOf(r.chain()) }

// oldestOf is oldest for r's chain c.
func (r *Run) oldestOf(c []*Run) uint64 {
	if len(c) > 0 {
		r = c[0]
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.floor
}

// replayEarlier sends f the events of the run's earlier segments after
// its cursor, up to r's first event, terminal events (interrupted)
// included: Attach replays the whole run. Called without r.mu held, on a
// started segment.
func (r *Run) replayEarlier(ctx context.Context, f *follower, send func(*plumbv1.Event) error) error {
	r.mu.Lock()
	cursor, first, threadID := f.cursor, r.first, r.threadID
	r.mu.Unlock()
	chain := r.chain()
	if oldest := r.oldestOf(chain); cursor < oldest {
		return &OutOfRangeError{ThreadID: threadID, After: cursor, Oldest: oldest + 1}
	}
	for _, seg := range chain {
		seg.mu.Lock()
		events := seg.events // an ended segment's log no longer changes
		seg.mu.Unlock()
		for _, x := range events {
			if seq := x.e.GetSequence(); seq > cursor && seq < first {
				if err := ctx.Err(); err != nil {
					return err
				}
				if err := send(x.e); err != nil {
					return err
				}
				cursor = seq
			}
		}
	}
	r.mu.Lock()
	f.cursor = max(f.cursor, cursor)
	r.mu.Unlock()
	return nil
}

// push appends e to the log. Called with r.mu held.
func (r *Run) push(e *plumbv1.Event) {
	n := proto.Size(e)
	r.events = append(r.events, entry{e: e, size: n})
	r.bytes += n
}

// trim keeps the log within MaxEvents and MaxBytes: past either, deltas
// are coalesced (into deltas of at most a tenth of MaxBytes), then the
// oldest events dropped down to 90 % of both caps (so that trimming runs
// once per 10 % of growth), keeping at least the newest event. Two deltas are never merged across a stream's position,
// so no stream receives text twice; a stream whose unsent events are
// dropped finds its cursor below the floor and ends with a *LagError.
// Called with r.mu held.
func (r *Run) trim() {
	o := r.g.o
	if len(r.events) <= o.MaxEvents && r.bytes <= o.MaxBytes {
		return
	}
	cursors := make([]uint64, 0, len(r.followers))
	for f := range r.followers {
		cursors = append(cursors, f.cursor)
	}
	// straddles reports whether a stream has sent a but not b.
	straddles := func(a, b uint64) bool {
		return slices.ContainsFunc(cursors, func(c uint64) bool { return a <= c && c < b })
	}
	out := make([]entry, 0, len(r.events))
	bytes := 0
	for _, x := range r.events {
		// A merged delta stays under a tenth of MaxBytes, so that it can
		// be dropped like any other event (and is not copied ever again).
		if n := len(out); n > 0 && out[n-1].size+x.size <= o.MaxBytes/10 && !straddles(out[n-1].e.GetSequence(), x.e.GetSequence()) {
			if m := coalesce(out[n-1].e, x.e); m != nil {
				bytes -= out[n-1].size
				out[n-1] = entry{e: m, size: proto.Size(m)}
				bytes += out[n-1].size
				continue
			}
		}
		out = append(out, x)
		bytes += x.size
	}
	maxEvents, maxBytes := o.MaxEvents-o.MaxEvents/10, o.MaxBytes-o.MaxBytes/10
	drop := 0
	for len(out)-drop > 1 && (len(out)-drop > maxEvents || bytes > maxBytes) {
		bytes -= out[drop].size
		drop++
	}
	if drop > 0 {
		r.floor = out[drop-1].e.GetSequence()
		out = append([]entry(nil), out[drop:]...)
	}
	r.events, r.bytes = out, bytes
}

// coalesce merges b into a when both are text deltas of the same model
// call and attempt, argument deltas of the same call, or output of the same
// running call; it returns the merged event (a new message carrying b's
// sequence and timestamp) or nil.
func coalesce(a, b *plumbv1.Event) *plumbv1.Event {
	if a.GetAgentPath() != b.GetAgentPath() || a.GetParentToolCallId() != b.GetParentToolCallId() {
		return nil
	}
	switch {
	case a.GetMessageDelta() != nil && b.GetMessageDelta() != nil:
		x, y := a.GetMessageDelta(), b.GetMessageDelta()
		if x.GetStep() != y.GetStep() || x.GetAttempt() != y.GetAttempt() {
			return nil
		}
		m := proto.Clone(b).(*plumbv1.Event)
		m.GetMessageDelta().Text = x.GetText() + y.GetText()
		return m
	case a.GetReasoningDelta() != nil && b.GetReasoningDelta() != nil:
		x, y := a.GetReasoningDelta(), b.GetReasoningDelta()
		if x.GetStep() != y.GetStep() || x.GetAttempt() != y.GetAttempt() {
			return nil
		}
		m := proto.Clone(b).(*plumbv1.Event)
		m.GetReasoningDelta().Text = x.GetText() + y.GetText()
		return m
	case a.GetToolCallDelta() != nil && b.GetToolCallDelta() != nil:
		x, y := a.GetToolCallDelta(), b.GetToolCallDelta()
		if x.GetStep() != y.GetStep() || x.GetAttempt() != y.GetAttempt() || x.GetIndex() != y.GetIndex() || x.GetTruncated() {
			return nil
		}
		// The merged delta keeps the id and name the first one may carry.
		m := proto.Clone(b).(*plumbv1.Event)
		d := m.GetToolCallDelta()
		d.Id, d.Name, d.Args = x.GetId()+y.GetId(), x.GetName()+y.GetName(), x.GetArgs()+y.GetArgs()
		return m
	case a.GetToolOutput() != nil && b.GetToolOutput() != nil:
		x, y := a.GetToolOutput(), b.GetToolOutput()
		if x.GetId() != y.GetId() || x.GetTruncated() {
			return nil
		}
		m := proto.Clone(b).(*plumbv1.Event)
		m.GetToolOutput().Text = x.GetText() + y.GetText()
		return m
	}
	return nil
}

// isTerminal reports whether e ends a stream (docs/agent-core.md §8).
func isTerminal(e *plumbv1.Event) bool {
	switch e.GetPayload().(type) {
	case *plumbv1.Event_RunFinished, *plumbv1.Event_Interrupted, *plumbv1.Event_Error:
		return true
	}
	return false
}
