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

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*call
	err     error // set once the channel is reset
	done    chan struct{}
}

type call struct {
	events chan agentproto.Response
	final  chan agentproto.Response
	gone   chan struct{} // closed when the caller stops waiting
}

func newChannel(s stream, lg *zap.Logger) *channel {
	ch := &channel{
		lg:      lg,
		w:       agentproto.NewWriter(s.w),
		c:       s.c,
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
		if resp.Done {
			c.final <- resp
			continue
		}
		select {
		case c.events <- resp:
		case <-c.gone:
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
// request. Operation failures come back as *backend.Error.
func (ch *channel) call(ctx context.Context, op agentproto.Op, args any, onEvent func(agentproto.Response) error) (json.RawMessage, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, backend.Errorf(backend.CodeInternal, "", "encode %s arguments: %v", op, err)
	}
	c := &call{events: make(chan agentproto.Response, 64), final: make(chan agentproto.Response, 1), gone: make(chan struct{})}
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
		ch.forget(id, c)
		if errors.Is(err, agentproto.ErrFrameTooLarge) {
			return nil, backend.Errorf(backend.CodeTooLarge, "", "%s request exceeds the %d-byte agent frame limit", op, agentproto.MaxFrameBytes)
		}
		ch.reset(fmt.Errorf("write request: %w", err))
		return nil, ch.unavailable()
	}
	for {
		select {
		case ev := <-c.events:
			if onEvent != nil {
				if err := onEvent(ev); err != nil {
					ch.cancel(id, c)
					return nil, err
				}
			}
		case resp := <-c.final:
			close(c.gone)
			// Drain events that arrived before the final response.
			for len(c.events) > 0 {
				ev := <-c.events
				if onEvent != nil {
					if err := onEvent(ev); err != nil {
						return nil, err
					}
				}
			}
			if resp.Error != nil {
				return nil, resp.Error
			}
			return resp.Result, nil
		case <-ch.done:
			close(c.gone)
			return nil, ch.unavailable()
		case <-ctx.Done():
			ch.cancel(id, c)
			return nil, backend.FromOS(string(op), "", ctx.Err())
		}
	}
}

// forget drops a pending request without telling the agent.
func (ch *channel) forget(id uint64, c *call) {
	ch.mu.Lock()
	delete(ch.pending, id)
	ch.mu.Unlock()
	close(c.gone)
}

// cancel drops a pending request and asks the agent to stop it.
func (ch *channel) cancel(id uint64, c *call) {
	ch.forget(id, c)
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
