package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
	"go.uber.org/zap"
)

// stream is one open connection to a sandbox agent: frames are written to
// w and read from r; Close tears it down. When w is a net.Conn, writes get
// deadlines.
type stream struct {
	r io.Reader
	w io.Writer
	c io.Closer
}

// The channel's rules against a hostile agent (docs/security.md, Channel).
const (
	// DefaultChannelMemoryBytes is the default worker-wide budget for the
	// bytes of agent frames being read plus stream events queued.
	DefaultChannelMemoryBytes = 256 << 20
	// frameRate and frameBurst bound the frames per second one channel
	// accepts (a token bucket). An honest agent's output events are at
	// least one 64 KiB pipe read each when output is fast (a command
	// writing 1 GB/s makes about 16000 a second) and few when it is slow;
	// the limit stops floods of tiny frames, not honest throughput.
	frameRate  = 20000
	frameBurst = 40000
	// writeTimeout bounds a write to the agent when the caller's context
	// has no deadline.
	writeTimeout = 30 * time.Second
	// maxCancelled bounds the cancelled requests whose final response is
	// still awaited; past it the oldest is forgotten (a late frame for it
	// then counts as a violation).
	maxCancelled = 1024
	// executeGrace is added to an execute's timeout before sandboxd stops
	// waiting: the agent's kill and drain graces plus slack.
	executeGrace = backend.KillGrace + backend.DrainGrace + 5*time.Second
)

// violation is a reset the box caused by breaking the protocol (as
// opposed to the stream simply ending). Violations count against the
// sandbox; see Manager.violation.
type violation struct{ msg string }

func (v *violation) Error() string { return "agent protocol violation: " + v.msg }

func violationf(format string, args ...any) error {
	return &violation{msg: fmt.Sprintf(format, args...)}
}

// isViolation reports whether err is a protocol violation.
func isViolation(err error) bool {
	var v *violation
	return errors.As(err, &v)
}

// memBudget is one memory budget shared by every channel of a Manager.
// Acquiring never blocks: a channel that cannot get budget is reset.
type memBudget struct {
	mu   sync.Mutex
	used int64
	max  int64
}

func newMemBudget(max int64) *memBudget {
	if max <= 0 {
		max = DefaultChannelMemoryBytes
	}
	return &memBudget{max: max}
}

func (b *memBudget) acquire(n int) bool {
	if b == nil || n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+int64(n) > b.max {
		return false
	}
	b.used += int64(n)
	return true
}

func (b *memBudget) release(n int) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= int64(n)
	b.mu.Unlock()
}

func (b *memBudget) inUse() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// bucket is a token bucket of frames.
type bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func (b *bucket) take(now time.Time) bool {
	if b.last.IsZero() {
		b.tokens = b.burst
	} else {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// channelOptions tune a channel; the zero value is usable (no shared
// budget, no violation callback, the default rate).
type channelOptions struct {
	budget      *memBudget
	onViolation func(error) // called once per violation, never under a lock
	// onLost, when set, is called (never under a lock) when the channel
	// resets because its stream ended or failed by itself: not closed by
	// the worker, not a violation.
	onLost      func(error)
	rate, burst float64
	// writeTimeout bounds writes when the caller has no deadline
	// (writeTimeout when 0); maxWait, when set, caps every op's wait.
	// Tests lower both.
	writeTimeout time.Duration
	maxWait      time.Duration
	// lentStreams, when set, counts the executes whose output came
	// through a lent pipe.
	lentStreams *atomic.Int64
}

// channel multiplexes requests to one sandbox agent over one stream. The
// agent is untrusted: a frame that breaks a rule resets the channel (every
// request in flight fails with a retryable unavailable error and the
// channel refuses new ones) and is reported as a violation. The rules: a
// response must answer a request in flight (late frames of cancelled
// requests are dropped); an event must be of a kind its op receives; every
// frame must fit its op's budget (agentproto.LimitsOf) and the worker's
// memory budget; frames must not come faster than the rate limit. The
// owner opens a new channel after a reset.
type channel struct {
	lg     *zap.Logger
	w      *agentproto.Writer
	c      io.Closer
	opts   channelOptions
	maxLag int // maxLagBytes; tests lower it

	mu        sync.Mutex
	nextID    uint64
	pending   map[uint64]*call
	cancelled map[uint64]agentproto.Limits // cancelled, final not yet seen
	order     []uint64                     // cancelled ids, oldest first
	err       error                        // set once the channel is reset
	done      chan struct{}
	// watch is the one timer that finds requests past their wait
	// (watchdog), armed for watchAt; watchAt is zero while it is not.
	watch   *time.Timer
	watchAt time.Time

	// owner is the sandbox record the channel's callbacks act on; wake
	// moves it to the record a recreated box is served under.
	owner *atomic.Pointer[sandbox]
	// armed: the owner is created and handed out, so a stdio channel's
	// own end has its container checked (newAgentChannel).
	armed *atomic.Bool
	// pid1: the container's own stdio, served by the agent as PID 1.
	pid1 bool
	// lending borrows the agent's descriptors (lend.go); reset closes it.
	lending lending
}

// maxLagBytes bounds the stream events one request may hold that its
// caller has not taken yet: one download item, about what a 64-event buffer
// of full chunks held before. A caller that falls further behind (a gRPC
// client that stops reading its stream) has its request cancelled rather
// than stalling the read loop, which would stall every other request on the
// sandbox.
const maxLagBytes = backend.ItemCap

// eventOverhead is charged per queued event on top of its payload, so a
// flood of empty events is bounded too; it is the cost an output window
// charges too.
const eventOverhead = agentproto.EventCost

// call is one request in flight. The read loop queues its responses
// without ever waiting for the caller.
type call struct {
	op   agentproto.Op
	lim  agentproto.Limits
	sent time.Time     // when the request was written (see request.sent)
	wake chan struct{} // 1-buffered: the queue, final, lagged or overdue changed
	// deadline is when the request has waited its lim.Wait (zero: it
	// waits as long as it takes); set before it is sent, under the
	// channel's mu.
	deadline time.Time

	mu     sync.Mutex
	events []agentproto.Response // not yet taken by the caller, in order
	queued int                   // bytes charged for events
	final  *agentproto.Response
	lagged bool // the caller fell too far behind
	// overdue: the request waited its lim.Wait (the channel's watchdog).
	overdue bool
	// feeding: a lent pipe still feeds output events (channel.feed), so
	// the final response waits for the pipe's end.
	feeding bool
	closed  bool     // discarded: nothing more is queued
	pipe    *os.File // a lent output pipe, taken or feeding; discard closes it
}

func newCall(lim agentproto.Limits) *call { return &call{lim: lim, wake: make(chan struct{}, 1)} }

// push queues resp. An event is charged to budget; lagged reports that it
// would put more than limit bytes in the queue (everything queued is then
// dropped and the call marked lagged), noBudget that the shared budget
// could not take it, overWindow that it exceeds a windowed request's
// window (the agent ignored its credit).
func (c *call) push(resp agentproto.Response, limit int, budget *memBudget) (lagged, noBudget, overWindow bool) {
	c.mu.Lock()
	switch cost := len(resp.Data) + eventOverhead; {
	case resp.Done:
		if c.final == nil { // a failed feed's final stays
			c.final = &resp
		}
	case c.lagged, c.closed:
		// Already dropped; nothing more is queued for it.
	case c.lim.Window > 0 && c.queued+cost > c.lim.Window:
		// A windowed request's agent sent beyond its credit.
		overWindow = true
	case c.queued+cost > limit:
		budget.release(c.queued)
		c.events, c.queued, c.lagged = nil, 0, true
		lagged = true
	case !budget.acquire(cost):
		noBudget = true
	default:
		c.events = append(c.events, resp)
		c.queued += cost
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return lagged, noBudget, overWindow
}

// next takes the next event (ok true), or reports the final response,
// the lag, or that the request is overdue (markOverdue) once no event is
// left. All zero means wait for c.wake.
func (c *call) next(budget *memBudget) (ev agentproto.Response, ok bool, final *agentproto.Response, lagged, overdue bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lagged {
		return ev, false, nil, true, false
	}
	if len(c.events) > 0 {
		ev = c.events[0]
		c.events[0] = agentproto.Response{}
		c.events = c.events[1:]
		cost := len(ev.Data) + eventOverhead
		c.queued -= cost
		budget.release(cost)
		return ev, true, nil, false, false
	}
	if c.feeding {
		return ev, false, nil, false, c.overdue
	}
	return ev, false, c.final, false, c.final == nil && c.overdue
}

// endFeed ends a lent pipe's feed; a non-nil fail replaces the final
// response (the output is incomplete).
func (c *call) endFeed(fail *backend.Error) {
	c.mu.Lock()
	c.feeding = false
	if fail != nil {
		c.final = &agentproto.Response{Done: true, Error: fail}
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// markOverdue tells the caller its request has waited too long.
func (c *call) markOverdue() {
	c.mu.Lock()
	c.overdue = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// discard drops what is still queued and returns its budget.
func (c *call) discard(budget *memBudget) {
	c.mu.Lock()
	budget.release(c.queued)
	c.events, c.queued, c.closed = nil, 0, true
	if c.pipe != nil {
		c.pipe.Close() // a feed reading it ends
	}
	c.mu.Unlock()
}

func newChannel(s stream, lg *zap.Logger, opts channelOptions) *channel {
	if opts.rate <= 0 {
		opts.rate, opts.burst = frameRate, frameBurst
	}
	if opts.writeTimeout <= 0 {
		opts.writeTimeout = writeTimeout
	}
	ch := &channel{
		lg:        lg,
		w:         agentproto.NewWriter(s.w),
		c:         s.c,
		opts:      opts,
		maxLag:    maxLagBytes,
		pending:   map[uint64]*call{},
		cancelled: map[uint64]agentproto.Limits{},
		done:      make(chan struct{}),
	}
	go ch.readLoop(s.r)
	return ch
}

// frameCap is the largest frame any request in flight (or cancelled and
// awaiting its final) may receive; a frame is refused as soon as it grows
// past it, before it is all buffered.
func (ch *channel) frameCap() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	n := 0
	for _, c := range ch.pending {
		n = max(n, c.lim.EventBytes, c.lim.FinalBytes)
	}
	for _, l := range ch.cancelled {
		n = max(n, l.EventBytes, l.FinalBytes)
	}
	return n
}

func (ch *channel) readLoop(src io.Reader) {
	r := agentproto.NewReader(src, agentproto.MaxFrameBytes)
	charged := 0 // frame bytes beyond RetainBytes charged to the budget
	r.Grow = func(n int) error {
		if limit := ch.frameCap(); charged+n+agentproto.RetainBytes > limit {
			return violationf("a frame of more than %d bytes arrived; no request in flight accepts one larger than %d", charged+n+agentproto.RetainBytes, limit)
		}
		if !ch.opts.budget.acquire(n) {
			return violationf("the worker's channel memory budget (%d bytes) is exhausted", ch.opts.budget.max)
		}
		charged += n
		return nil
	}
	tb := bucket{rate: ch.opts.rate, burst: ch.opts.burst}
	for {
		frame, err := r.Next()
		if err == nil {
			if !tb.take(time.Now()) {
				err = violationf("more than %.0f frames a second", ch.opts.rate)
			} else if err = ch.handle(r, frame); err == nil {
				// The caller the frame woke runs before this loop's next
				// read, which finds the stream empty (EAGAIN) at the end
				// of most calls and would delay every answer by a
				// system call (docs/benchmarks.md, B1-runsc).
				runtime.Gosched()
			}
		}
		ch.opts.budget.release(charged)
		charged = 0
		if err != nil {
			switch {
			case errors.Is(err, io.EOF):
				err = errors.New("agent stream closed")
			case errors.Is(err, agentproto.ErrFrameTooLarge):
				err = violationf("a frame exceeds the %d-byte limit", agentproto.MaxFrameBytes)
			}
			ch.reset(err)
			return
		}
	}
}

// handle checks one frame against the rules, reads its binary payload and
// queues it for its call.
func (ch *channel) handle(r *agentproto.Reader, frame []byte) error {
	resp, err := agentproto.DecodeResponse(frame)
	if err != nil {
		return violationf("%v", err)
	}
	size := len(frame) + resp.Bin
	ch.mu.Lock()
	c := ch.pending[resp.ID]
	if c == nil {
		lim, cancelled := ch.cancelled[resp.ID]
		if cancelled && resp.Done {
			delete(ch.cancelled, resp.ID)
			ch.order = slices.DeleteFunc(ch.order, func(id uint64) bool { return id == resp.ID })
		}
		issued := resp.ID <= ch.nextID
		ch.mu.Unlock()
		switch {
		case cancelled:
			if err := checkFrame(resp, lim, size); err != nil {
				return err
			}
			_, err := ch.payload(r, resp.Bin) // then dropped
			return err
		case issued:
			return violationf("a response for request %d, which has already finished", resp.ID)
		default:
			return violationf("a response for request %d, which was never sent", resp.ID)
		}
	}
	if resp.Done {
		delete(ch.pending, resp.ID)
	}
	ch.mu.Unlock()
	if err := checkFrame(resp, c.lim, size); err != nil {
		return err
	}
	if resp.Data, err = ch.payload(r, resp.Bin); err != nil {
		return err
	}
	if resp.Event == agentproto.EventLentOn {
		return ch.startFeed(resp.ID, c)
	}
	lagged, noBudget, overWindow := c.push(resp, ch.maxLag, ch.opts.budget)
	switch {
	case noBudget:
		return violationf("the worker's channel memory budget (%d bytes) is exhausted", ch.opts.budget.max)
	case overWindow:
		return violationf("%s events for request %d exceed its %d-byte output window", resp.Event, resp.ID, c.lim.Window)
	}
	if lagged {
		ch.lg.Warn("request cancelled: its caller fell behind its stream", zap.Uint64("request-id", resp.ID), zap.Int("limit-bytes", ch.maxLag))
		ch.cancel(resp.ID, c.lim)
	}
	return nil
}

// payload reads a frame's n-byte binary payload (already checked against
// its op's budget), charging the worker's memory budget while it is read.
func (ch *channel) payload(r *agentproto.Reader, n int) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	if !ch.opts.budget.acquire(n) {
		return nil, violationf("the worker's channel memory budget (%d bytes) is exhausted", ch.opts.budget.max)
	}
	defer ch.opts.budget.release(n)
	return r.ReadPayload(n)
}

// checkFrame applies an op's limits to one of its responses.
func checkFrame(resp agentproto.Response, lim agentproto.Limits, size int) error {
	if resp.Done {
		if size > lim.FinalBytes {
			return violationf("a %d-byte final response to request %d exceeds its %d-byte budget", size, resp.ID, lim.FinalBytes)
		}
		return nil
	}
	if !lim.Allows(resp.Event) {
		allowed := "none"
		if len(lim.Events) > 0 {
			allowed = strings.Join(lim.Events, ", ")
		}
		return violationf("event %s for request %d, whose operation receives %s", backend.Quote(resp.Event), resp.ID, allowed)
	}
	if size > lim.EventBytes {
		return violationf("a %d-byte %s event for request %d exceeds its %d-byte budget", size, resp.Event, resp.ID, lim.EventBytes)
	}
	return nil
}

// reset fails everything in flight and closes the stream. Only the first
// reason is kept; a violation is reported to the owner.
func (ch *channel) reset(reason error) {
	ch.mu.Lock()
	if ch.err != nil {
		ch.mu.Unlock()
		return
	}
	ch.err = reason
	if ch.watch != nil {
		ch.watch.Stop()
	}
	inflight := len(ch.pending)
	ch.pending = map[uint64]*call{}
	ch.cancelled = map[uint64]agentproto.Limits{}
	ch.order = nil
	l := ch.lending.l
	ch.mu.Unlock()
	l.close()
	// Log and report before waking the callers: nothing of the channel's
	// runs after they return.
	ch.lg.Warn("agent channel reset", zap.Error(reason), zap.Int("in-flight", inflight))
	switch {
	case isViolation(reason):
		if ch.opts.onViolation != nil {
			ch.opts.onViolation(reason)
		}
	case !errors.Is(reason, errChannelClosed) && ch.opts.onLost != nil:
		ch.opts.onLost(reason)
	}
	close(ch.done)
	_ = ch.c.Close()
}

// broken reports whether the channel was reset.
func (ch *channel) broken() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.err != nil
}

func (ch *channel) unavailable() *backend.Error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return backend.Errorf(backend.CodeUnavailable, "", "sandbox agent channel lost (%v); the operation may not have completed, retry it", ch.err)
}

// overdueError is a request whose final response did not arrive within its
// op's wait (agentproto.Limits.Wait, or an execute's timeout plus grace).
// The request was cancelled at the agent and a violation counted.
type overdueError struct {
	op   agentproto.Op
	wait time.Duration
}

func (e *overdueError) Error() string {
	return fmt.Sprintf("the sandbox agent did not finish %s within %s; it was cancelled, retry it", e.op, e.wait)
}

// limitsFor returns the limits of one request.
func limitsFor(op agentproto.Op, args any) agentproto.Limits {
	if ea, ok := args.(agentproto.ExecuteArgs); ok && op == agentproto.OpExecute {
		l := agentproto.ExecuteLimits(ea)
		l.Wait = executeTimeout(ea.ExecuteRequest) + executeGrace
		return l
	}
	if l, ok := agentproto.LimitsOf(op); ok {
		return l
	}
	return agentproto.Limits{FinalBytes: agentproto.SmallFrameBytes, Wait: agentproto.ResponseWait}
}

// limits returns the limits of one request on ch: its wait is at most the
// channel's.
func (ch *channel) limits(op agentproto.Op, args any) agentproto.Limits {
	lim := limitsFor(op, args)
	if ch.opts.maxWait > 0 && lim.Wait > 0 {
		lim.Wait = min(lim.Wait, ch.opts.maxWait)
	}
	return lim
}

// executeTimeout is the timeout the agent applies to req (it refuses
// values out of range before running anything).
func executeTimeout(req backend.ExecuteRequest) time.Duration {
	switch t := req.TimeoutSeconds; {
	case t == nil:
		return backend.ExecuteDefaultTimeout
	case *t <= 0 || time.Duration(*t)*time.Second > backend.ExecuteMaxTimeout:
		return backend.ExecuteMaxTimeout
	default:
		return time.Duration(*t) * time.Second
	}
}

// call sends one request and waits for its final response's result; see
// exchange.
func (ch *channel) call(ctx context.Context, op agentproto.Op, args any, onEvent func(agentproto.Response) error) (agentproto.RawMessage, error) {
	final, err := ch.exchange(ctx, op, args, nil, onEvent)
	return final.Result, err
}

// exchange sends one request, with payload as its binary payload, and
// waits for its final response. Stream events go to onEvent in order (nil
// drops them); an error from onEvent cancels the request, and so does
// onEvent falling more than maxLag bytes behind the agent (a *Error with
// CodeSlowConsumer). A request not answered within its op's wait is
// cancelled and fails with *overdueError. Operation failures come back as
// *backend.Error.
func (ch *channel) exchange(ctx context.Context, op agentproto.Op, args any, payload []byte, onEvent func(agentproto.Response) error) (agentproto.Response, error) {
	r, err := ch.send(ctx, op, args, payload)
	if err != nil {
		return agentproto.Response{}, err
	}
	defer r.c.discard(ch.opts.budget)
	return ch.await(ctx, r, onEvent)
}

// request is a request sent and in flight.
type request struct {
	op  agentproto.Op
	id  uint64
	c   *call
	lim agentproto.Limits
	// sent is when the request was written; its wait counts from there.
	sent time.Time
}

// send writes one request and registers it in flight; await then takes
// its responses, and the caller must discard its call when done.
func (ch *channel) send(ctx context.Context, op agentproto.Op, args any, payload []byte) (request, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return request{}, backend.Errorf(backend.CodeInternal, "", "encode %s arguments: %v", op, err)
	}
	lim := ch.limits(op, args)
	c := newCall(lim)
	sent := time.Now()
	c.op, c.sent = op, sent
	if lim.Wait > 0 {
		c.deadline = sent.Add(lim.Wait)
	}
	ch.mu.Lock()
	if ch.err != nil {
		ch.mu.Unlock()
		return request{}, ch.unavailable()
	}
	ch.nextID++
	id := ch.nextID
	ch.pending[id] = c
	if !c.deadline.IsZero() {
		ch.watchLocked(c.deadline)
	}
	ch.mu.Unlock()
	r := request{op: op, id: id, c: c, lim: lim, sent: sent}
	if err := ch.w.WriteContext(ctx, agentproto.Request{ID: id, Op: op, Args: raw, Payload: payload}, ch.opts.writeTimeout); err != nil {
		c.discard(ch.opts.budget)
		switch {
		case errors.Is(err, agentproto.ErrFrameTooLarge):
			ch.forget(id)
			return request{}, backend.Errorf(backend.CodeTooLarge, "", "%s request exceeds the %d-byte agent frame limit", op, agentproto.MaxFrameBytes)
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			// Nothing was written: the caller gave up waiting for the writer.
			ch.forget(id)
			return request{}, backend.FromOS(string(op), "", err)
		case errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil:
			ch.reset(violationf("the agent did not take a %s request within its write deadline", op))
		default:
			ch.reset(fmt.Errorf("write request: %w", err))
		}
		return request{}, ch.unavailable()
	}
	return r, nil
}

// await takes the responses of a sent request until its final one; see
// exchange.
func (ch *channel) await(ctx context.Context, r request, onEvent func(agentproto.Response) error) (agentproto.Response, error) {
	var none agentproto.Response
	for {
		ev, ok, final, lagged, overdue := r.c.next(ch.opts.budget)
		switch {
		case ok && ev.Event == agentproto.EventLent:
			ch.takeLent(ctx, r, ev)
			continue
		case ok:
			if onEvent != nil {
				if err := onEvent(ev); err != nil {
					ch.cancel(r.id, r.lim)
					return none, err
				}
			}
			continue
		case lagged:
			// The read loop has dropped the request and cancelled it.
			return none, errorf(CodeSlowConsumer, "%s was cancelled: its stream was not read fast enough (more than %d bytes waiting); read the stream as it arrives", r.op, ch.maxLag)
		case final != nil:
			if final.Error != nil {
				return none, final.Error
			}
			return *final, nil
		case overdue:
			ch.cancel(r.id, r.lim)
			err := &overdueError{op: r.op, wait: r.lim.Wait}
			if ch.opts.onViolation != nil {
				ch.opts.onViolation(violationf("%v", err))
			}
			return none, err
		}
		select {
		case <-r.c.wake:
		case <-ch.done:
			return none, ch.unavailable()
		case <-ctx.Done():
			ch.cancel(r.id, r.lim)
			return none, backend.FromOS(string(r.op), "", ctx.Err())
		}
	}
}

// takeLent takes the pipe a streaming execute lent (a lent event, always
// its request's first): it borrows the read end and tells the agent, which
// then says lent_on and writes the rest of the output there. The pipe is
// the call's before the agent hears of it, so the read loop finds it at
// lent_on (startFeed). A pipe that cannot be borrowed or announced is
// dropped: the output stays on the channel.
func (ch *channel) takeLent(ctx context.Context, r request, ev agentproto.Response) {
	var lent agentproto.Lent
	r.c.mu.Lock()
	taken := r.c.pipe != nil
	r.c.mu.Unlock()
	if taken || agentproto.UnmarshalResult(ev.Result, &lent) != nil {
		return
	}
	pipe, err := ch.lending.l.borrowPipe(&lent)
	if err != nil {
		return
	}
	r.c.mu.Lock()
	r.c.pipe = pipe
	r.c.mu.Unlock()
	if _, err := ch.exchange(ctx, agentproto.OpLentTaken, agentproto.LentTakenArgs{Target: r.id}, nil, nil); err != nil {
		r.c.mu.Lock()
		drop := !r.c.feeding
		if drop {
			r.c.pipe = nil
		}
		r.c.mu.Unlock()
		if drop {
			pipe.Close()
		}
	}
}

// startFeed starts feeding the pipe request id lent into its queue, at
// the agent's lent_on (the rest of the output is in the pipe). The read
// loop does it, not the caller's await: a caller stuck on its own slow
// consumer must not keep the pipe unread, or the command would block on a
// full pipe instead of its stream falling behind and being cancelled.
func (ch *channel) startFeed(id uint64, c *call) error {
	c.mu.Lock()
	pipe, feeding := c.pipe, c.feeding
	c.feeding = true
	c.mu.Unlock()
	if pipe == nil || feeding {
		return violationf("a lent_on event for request %d, whose pipe was not taken or already feeds", id)
	}
	if ch.opts.lentStreams != nil {
		ch.opts.lentStreams.Add(1)
	}
	go ch.feed(request{op: c.op, id: id, c: c, lim: c.lim, sent: c.sent}, pipe)
	return nil
}

// lentReadBytes is the most one read of a lent output pipe takes: one
// chunk, what the agent writes at once and an output frame carries.
const lentReadBytes = agentproto.ChunkBytes

// feed reads a lent output pipe into r's queue as output events, as the
// read loop queues frames: charged to the worker's memory budget (a read
// waits for room in it) and to the request's lag bound, past which the
// request is cancelled (its caller is not reading). It ends at the pipe's
// end, which the agent closes before its final response; or failing, when
// the pipe is not at its end within the request's wait, or when the
// request is done and its call discarded (which closes the pipe).
func (ch *channel) feed(r request, pipe *os.File) {
	defer pipe.Close()
	if r.lim.Wait > 0 {
		_ = pipe.SetReadDeadline(r.sent.Add(r.lim.Wait))
	}
	buf := make([]byte, lentReadBytes)
	for {
		// The event keeps the bytes it carries (a gRPC stream may still
		// hold a message it has sent): a full read hands its buffer over,
		// a short one a copy of what it filled.
		n, err := pipe.Read(buf)
		var data []byte
		if n >= lentReadBytes/2 {
			data, buf = buf[:n], make([]byte, lentReadBytes)
		} else {
			data = bytes.Clone(buf[:n])
		}
		if n > 0 && !ch.queueLent(r, data) {
			r.c.endFeed(nil)
			return
		}
		switch {
		case errors.Is(err, io.EOF):
			r.c.endFeed(nil)
			return
		case err != nil:
			r.c.endFeed(backend.Errorf(backend.CodeUnavailable, "", "%s: reading its output from the sandbox agent's pipe: %v", r.op, err))
			return
		}
	}
}

// queueLent queues one read of a lent pipe as an output event; false when
// the feed must stop: the request was cancelled for its lag, or is done.
func (ch *channel) queueLent(r request, data []byte) bool {
	ev := agentproto.Response{ID: r.id, Event: agentproto.EventOutput, Data: data}
	for {
		lagged, noBudget, _ := r.c.push(ev, ch.maxLag, ch.opts.budget)
		switch {
		case lagged:
			ch.lg.Warn("request cancelled: its caller fell behind its stream", zap.Uint64("request-id", r.id), zap.Int("limit-bytes", ch.maxLag))
			ch.cancel(r.id, r.lim)
			return false
		case !noBudget:
			r.c.mu.Lock()
			closed := r.c.closed
			r.c.mu.Unlock()
			return !closed
		}
		// The worker's budget is full: wait for room, as a frame would
		// wait in the agent's stdout.
		select {
		case <-ch.done:
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// watchLocked makes the watchdog fire by at; ch.mu is held. One timer
// serves every request in flight, re-armed only for a deadline earlier
// than the one it has: a timer per request, armed each time its caller
// parks, would wake the runtime's network poller on every request
// (docs/benchmarks.md, B1-runsc).
func (ch *channel) watchLocked(at time.Time) {
	if !ch.watchAt.IsZero() && !at.Before(ch.watchAt) {
		return
	}
	ch.watchAt = at
	if ch.watch == nil {
		ch.watch = time.AfterFunc(time.Until(at), ch.watchdog)
		return
	}
	ch.watch.Reset(time.Until(at))
}

// watchdog tells the callers of requests past their deadline, then arms
// itself for the earliest deadline left.
func (ch *channel) watchdog() {
	var late []*call
	ch.mu.Lock()
	ch.watchAt = time.Time{}
	if ch.err != nil {
		ch.mu.Unlock()
		return
	}
	now := time.Now()
	var next time.Time
	for _, c := range ch.pending {
		switch {
		case c.deadline.IsZero():
		case !c.deadline.After(now):
			late = append(late, c)
		case next.IsZero() || c.deadline.Before(next):
			next = c.deadline
		}
	}
	if !next.IsZero() {
		ch.watchLocked(next)
	}
	ch.mu.Unlock()
	for _, c := range late {
		c.markOverdue()
	}
}

// forget drops a pending request that was never sent.
func (ch *channel) forget(id uint64) {
	ch.mu.Lock()
	delete(ch.pending, id)
	ch.mu.Unlock()
}

// cancel drops a pending request and asks the agent to stop it. Its late
// frames, and the cancel's own answer, are dropped until their finals.
func (ch *channel) cancel(id uint64, lim agentproto.Limits) {
	raw, _ := json.Marshal(agentproto.CancelArgs{Target: id})
	ch.mu.Lock()
	if ch.err != nil {
		ch.mu.Unlock()
		return
	}
	if _, ok := ch.pending[id]; ok {
		delete(ch.pending, id)
		ch.awaitLocked(id, lim)
	}
	ch.nextID++
	cid := ch.nextID
	ch.awaitLocked(cid, limitsFor(agentproto.OpCancel, nil))
	ch.mu.Unlock()
	// The caller must not wait for the write: it is sent in the background,
	// bounded by the write timeout, and a failure resets the channel.
	go func() {
		err := ch.w.WriteContext(context.Background(), agentproto.Request{ID: cid, Op: agentproto.OpCancel, Args: raw}, ch.opts.writeTimeout)
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			ch.reset(violationf("the agent did not take a cancel request within %s", ch.opts.writeTimeout))
		default:
			ch.reset(fmt.Errorf("write cancel: %w", err))
		}
	}()
}

// awaitLocked records id as cancelled, awaiting its final; ch.mu is held.
func (ch *channel) awaitLocked(id uint64, lim agentproto.Limits) {
	ch.cancelled[id] = lim
	ch.order = append(ch.order, id)
	if len(ch.order) > maxCancelled {
		delete(ch.cancelled, ch.order[0])
		ch.order = ch.order[1:]
	}
}

// errChannelClosed is the reset of a channel the worker closed.
var errChannelClosed = errors.New("channel closed")

// close tears the channel down.
func (ch *channel) close() { ch.reset(errChannelClosed) }
