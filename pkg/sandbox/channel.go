package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
	"go.uber.org/zap"
)

// stream is one open connection to a sandbox agent: frames are written to
// w and read from r; Close tears it down.
type stream struct {
	r io.Reader
	w io.Writer
	c io.Closer
}

// channel multiplexes requests to one sandbox agent over one stream. Any
// malformed or oversized frame from the agent (the container is untrusted),
// or the stream breaking, resets the channel: every request in flight fails
// with a retryable unavailable error and the channel refuses new ones. The
// owner then opens a new channel.
type channel struct {
	lg *zap.Logger
	w  *agentproto.Writer
	c  io.Closer

	maxLag int // maxLagBytes; tests lower it

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*call
	err     error // set once the channel is reset
	done    chan struct{}
}

// maxLagBytes bounds the stream events one request may hold that its
// caller has not taken yet: one download item, about what a 64-event buffer
// of full chunks held before. A caller that falls further behind (a gRPC
// client that stops reading its stream) has its request cancelled rather
// than stalling the read loop, which would stall every other request on the
// sandbox.
const maxLagBytes = backend.ItemCap

// eventOverhead is charged per queued event on top of its payload, so a
// flood of empty events is bounded too.
const eventOverhead = 256

// call is one request in flight. The read loop queues its responses
// without ever waiting for the caller.
type call struct {
	wake chan struct{} // 1-buffered: the queue, final or lagged changed

	mu     sync.Mutex
	events []agentproto.Response // not yet taken by the caller, in order
	queued int                   // bytes charged for events
	final  *agentproto.Response
	lagged bool // the caller fell too far behind
}

func newCall() *call { return &call{wake: make(chan struct{}, 1)} }

// push queues resp; it reports false, drops everything queued and marks
// the call lagged when an event would put more than limit bytes in the
// queue.
func (c *call) push(resp agentproto.Response, limit int) bool {
	c.mu.Lock()
	ok := true
	switch cost := len(resp.Data) + eventOverhead; {
	case resp.Done:
		c.final = &resp
	case c.queued+cost > limit:
		c.events, c.queued, c.lagged = nil, 0, true
		ok = false
	default:
		c.events = append(c.events, resp)
		c.queued += cost
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return ok
}

// next takes the next event (ok true), or reports the final response or
// the lag once no event is left. All zero means wait for c.wake.
func (c *call) next() (ev agentproto.Response, ok bool, final *agentproto.Response, lagged bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lagged {
		return ev, false, nil, true
	}
	if len(c.events) > 0 {
		ev = c.events[0]
		c.events[0] = agentproto.Response{}
		c.events = c.events[1:]
		c.queued -= len(ev.Data) + eventOverhead
		return ev, true, nil, false
	}
	return ev, false, c.final, false
}

func newChannel(s stream, lg *zap.Logger) *channel {
	ch := &channel{
		lg:      lg,
		w:       agentproto.NewWriter(s.w),
		c:       s.c,
		maxLag:  maxLagBytes,
		pending: map[uint64]*call{},
		done:    make(chan struct{}),
	}
	go ch.readLoop(agentproto.NewReader(s.r, agentproto.MaxFrameBytes))
	return ch
}

func (ch *channel) readLoop(r *agentproto.Reader) {
	for {
		frame, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("agent stream closed")
			}
			ch.reset(err)
			return
		}
		resp, err := agentproto.DecodeResponse(frame)
		if err != nil {
			ch.reset(err)
			return
		}
		ch.mu.Lock()
		c := ch.pending[resp.ID]
		if c != nil && resp.Done {
			delete(ch.pending, resp.ID)
		}
		ch.mu.Unlock()
		if c == nil {
			continue // a request we gave up on (cancelled)
		}
		if !c.push(resp, ch.maxLag) {
			ch.lg.Warn("request cancelled: its caller fell behind its stream", zap.Uint64("request-id", resp.ID), zap.Int("limit-bytes", ch.maxLag))
			ch.cancel(resp.ID)
		}
	}
}

// reset fails everything in flight and closes the stream. Only the first
// reason is kept.
func (ch *channel) reset(reason error) {
	ch.mu.Lock()
	if ch.err != nil {
		ch.mu.Unlock()
		return
	}
	ch.err = reason
	inflight := len(ch.pending)
	ch.pending = map[uint64]*call{}
	ch.mu.Unlock()
	// Log before waking the callers: nothing of the channel's runs after
	// they return.
	ch.lg.Warn("agent channel reset", zap.Error(reason), zap.Int("in-flight", inflight))
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

// call sends one request and waits for its final response. Stream events
// go to onEvent in order (nil drops them); an error from onEvent cancels the
// request, and so does onEvent falling more than maxLag bytes behind the
// agent (a *Error with CodeSlowConsumer). Operation failures come back as
// *backend.Error.
func (ch *channel) call(ctx context.Context, op agentproto.Op, args any, onEvent func(agentproto.Response) error) (json.RawMessage, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, backend.Errorf(backend.CodeInternal, "", "encode %s arguments: %v", op, err)
	}
	c := newCall()
	ch.mu.Lock()
	if ch.err != nil {
		ch.mu.Unlock()
		return nil, ch.unavailable()
	}
	ch.nextID++
	id := ch.nextID
	ch.pending[id] = c
	ch.mu.Unlock()

	if err := ch.w.Write(agentproto.Request{ID: id, Op: op, Args: raw}); err != nil {
		ch.forget(id)
		if errors.Is(err, agentproto.ErrFrameTooLarge) {
			return nil, backend.Errorf(backend.CodeTooLarge, "", "%s request exceeds the %d-byte agent frame limit", op, agentproto.MaxFrameBytes)
		}
		ch.reset(fmt.Errorf("write request: %w", err))
		return nil, ch.unavailable()
	}
	for {
		ev, ok, final, lagged := c.next()
		switch {
		case ok:
			if onEvent != nil {
				if err := onEvent(ev); err != nil {
					ch.cancel(id)
					return nil, err
				}
			}
			continue
		case lagged:
			// The read loop has dropped the request and cancelled it.
			return nil, errorf(CodeSlowConsumer, "%s was cancelled: its stream was not read fast enough (more than %d bytes waiting); read the stream as it arrives", op, ch.maxLag)
		case final != nil:
			if final.Error != nil {
				return nil, final.Error
			}
			return final.Result, nil
		}
		select {
		case <-c.wake:
		case <-ch.done:
			return nil, ch.unavailable()
		case <-ctx.Done():
			ch.cancel(id)
			return nil, backend.FromOS(string(op), "", ctx.Err())
		}
	}
}

// forget drops a pending request: the read loop ignores its responses.
func (ch *channel) forget(id uint64) {
	ch.mu.Lock()
	delete(ch.pending, id)
	ch.mu.Unlock()
}

// cancel drops a pending request and asks the agent to stop it.
func (ch *channel) cancel(id uint64) {
	ch.forget(id)
	raw, _ := json.Marshal(agentproto.CancelArgs{Target: id})
	ch.mu.Lock()
	if ch.err != nil {
		ch.mu.Unlock()
		return
	}
	ch.nextID++
	cid := ch.nextID
	ch.mu.Unlock()
	// Nobody waits for the cancel's own answer (readLoop skips it), and the
	// caller must not wait for the write either: it is sent in the
	// background and fails once the stream closes.
	go func() { _ = ch.w.Write(agentproto.Request{ID: cid, Op: agentproto.OpCancel, Args: raw}) }()
}

// close tears the channel down.
func (ch *channel) close() { ch.reset(errors.New("channel closed")) }
