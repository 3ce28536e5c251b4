package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/egress"
)

// Egress approved by a human (docs/security.md): sandboxd attaches to an
// egress box's proxy container (its stdin and stdout, JSON lines; the box
// cannot reach them) while someone watches the box's egress requests or
// decides one. While at least one watcher is there the proxy asks (holds a
// connection to a destination that is only off the allow-list); when the
// last one leaves it stops asking and rejects what is pending.

// Bounds of asking.
const (
	// MinEgressAskTimeout and MaxEgressAskTimeout bound a watcher's ask
	// timeout.
	MinEgressAskTimeout = time.Second
	MaxEgressAskTimeout = 24 * time.Hour
	// egressWatchQueue bounds the events queued for one watcher; a watcher
	// further behind is ended (CodeSlowConsumer) and may watch again.
	egressWatchQueue = 4 * egress.DefaultMaxPendingAsks
	// egressWriteTimeout bounds a write to the proxy.
	egressWriteTimeout = 10 * time.Second
	// egressAttachRetry is the pause between attaches to the proxy.
	egressAttachRetry = time.Second
)

// EgressRequest is a box's connection waiting for a decision, or (Closed)
// the end of one.
type EgressRequest struct {
	// ID names the request (unique per proxy, also across re-creations).
	ID   string
	Host string
	Port uint16
	// Since is when this worker learnt of it.
	Since time.Time
	// Closed marks the event that ends the request: Allowed and Reason say
	// how (approved, rejected, timed out, nobody watching).
	Closed  bool
	Allowed bool
	Reason  string
}

// EgressDecision decides one request (RequestID), or every request for
// Host:Port. With Allow and Remember the destination is admitted for the
// rest of the box's life (a host:port alone, nothing pending, only adds
// that grant).
type EgressDecision struct {
	RequestID string
	Host      string
	Port      uint16
	Allow     bool
	Remember  bool
	// Reason is appended to a rejection's 403.
	Reason string
	// By names who decided (logged for the audit).
	By string
}

// egressCtls are the attached controllers, by sandbox id.
type egressCtls struct {
	mu   sync.Mutex
	byID map[string]*egressCtl
}

// egressCtl is sandboxd's end of one proxy's control channel.
type egressCtl struct {
	m    *Manager
	id   string
	refs int // guarded by m.ectls.mu

	stop context.CancelFunc
	done chan struct{}

	mu       sync.Mutex
	conn     net.Conn // nil while detached
	attached chan struct{}
	pending  map[string]EgressRequest
	subs     map[*egressSub]struct{}
	asking   time.Duration // the timeout last sent
	err      error         // why the controller ended
}

type egressSub struct {
	timeout time.Duration
	ch      chan EgressRequest
	lagged  bool
}

// acquireEgress returns sandbox id's controller, attaching it when new.
// sub, when set, is a watcher registered before a new controller attaches
// (its first config then carries the watcher's timeout: a config of none
// would make the proxy reject what is pending, the asks a restarted worker
// is about to be re-sent) and given what is pending when the controller
// was already attached.
func (m *Manager) acquireEgress(id string, sub *egressSub) (*egressCtl, error) {
	sb, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	if m.snapshot(sb).Settings.Network != NetworkEgress {
		return nil, invalidField("sandbox_id", "sandbox %s has no egress network: nothing to approve", id)
	}
	m.ectls.mu.Lock()
	defer m.ectls.mu.Unlock()
	if m.isClosing() {
		return nil, errorf(CodeShuttingDown, "worker %s is shutting down", m.cfg.Worker)
	}
	if m.ectls.byID == nil {
		m.ectls.byID = map[string]*egressCtl{}
	}
	c := m.ectls.byID[id]
	var start func()
	if c == nil {
		ctx, stop := context.WithCancel(context.Background())
		c = &egressCtl{m: m, id: id, stop: stop, done: make(chan struct{}), attached: make(chan struct{}),
			pending: map[string]EgressRequest{}, subs: map[*egressSub]struct{}{}}
		m.ectls.byID[id] = c
		m.bg.Add(1)
		start = func() {
			go func() {
				defer m.bg.Done()
				defer close(c.done)
				c.run(ctx)
			}()
		}
	}
	c.refs++
	if sub != nil {
		c.mu.Lock()
		if c.subs != nil {
			c.subs[sub] = struct{}{}
			for _, r := range c.pending {
				sub.ch <- r // pending is bounded below the queue
			}
			c.configureLocked()
		}
		c.mu.Unlock()
	}
	if start != nil {
		start()
	}
	return c, nil
}

// release drops a reference; the last one turns asking off and detaches.
func (c *egressCtl) release() {
	c.m.ectls.mu.Lock()
	c.refs--
	last := c.refs == 0
	if last {
		delete(c.m.ectls.byID, c.id)
	}
	c.m.ectls.mu.Unlock()
	if !last {
		return
	}
	c.mu.Lock()
	if c.asking > 0 && c.conn != nil {
		_ = c.writeLocked(egress.Frame{Type: egress.FrameConfig})
	}
	c.mu.Unlock()
	c.stop()
	<-c.done
}

// stopEgress ends every controller (Close).
func (m *Manager) stopEgress() {
	m.ectls.mu.Lock()
	cs := slices.Collect(maps.Values(m.ectls.byID))
	m.ectls.mu.Unlock()
	for _, c := range cs {
		c.stop()
		<-c.done
	}
}

// run attaches to the proxy until stopped or the proxy is gone.
func (c *egressCtl) run(ctx context.Context) {
	defer func() {
		c.mu.Lock()
		if c.err == nil {
			c.err = errorf(CodeUnavailable, "the egress control channel of sandbox %s closed", c.id)
		}
		for s := range c.subs {
			close(s.ch)
		}
		c.subs = nil
		c.mu.Unlock()
	}()
	for ctx.Err() == nil {
		att, err := c.m.api.ContainerAttach(ctx, egressProxyName(c.id), client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true})
		if err != nil {
			if cerrdefs.IsNotFound(err) {
				c.mu.Lock()
				c.err = errorf(CodeNotFound, "sandbox %s has no egress proxy", c.id)
				c.mu.Unlock()
				return
			}
			c.m.lg.Warn("attach to egress proxy", zap.String("sandbox-id", c.id), zap.Error(err))
		} else {
			c.serve(ctx, att.HijackedResponse)
		}
		select {
		case <-ctx.Done():
		case <-time.After(egressAttachRetry):
		}
	}
}

// serve runs one attach: it sends the asking config and a sync, then reads
// the proxy's frames until the attach ends.
func (c *egressCtl) serve(ctx context.Context, att client.HijackedResponse) {
	stopClose := context.AfterFunc(ctx, att.Close)
	defer stopClose()
	defer att.Close()
	c.mu.Lock()
	c.conn = att.Conn
	c.asking = c.timeoutLocked()
	err := c.writeLocked(egress.Frame{Type: egress.FrameConfig, TimeoutMS: c.asking.Milliseconds()})
	if err == nil {
		err = c.writeLocked(egress.Frame{Type: egress.FrameSync})
	}
	close(c.attached)
	c.mu.Unlock()
	if err == nil {
		sc := bufio.NewScanner(newDemuxReader(att.Reader, io.Discard))
		sc.Buffer(make([]byte, 0, 512), egress.MaxFrameBytes)
		for sc.Scan() {
			var f egress.Frame
			if json.Unmarshal(sc.Bytes(), &f) != nil {
				continue
			}
			c.handle(f)
		}
	}
	// Detached: what was pending is re-sent on the next attach's sync;
	// watchers see it end now and come again then.
	c.mu.Lock()
	c.conn = nil
	c.attached = make(chan struct{})
	for _, r := range c.pending {
		c.broadcastLocked(EgressRequest{ID: r.ID, Host: r.Host, Port: r.Port, Since: r.Since, Closed: true, Reason: "the worker lost its control channel to the box's proxy"})
	}
	clear(c.pending)
	c.mu.Unlock()
}

// handle applies a frame of the proxy's.
func (c *egressCtl) handle(f egress.Frame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch f.Type {
	case egress.FrameAsk:
		if _, ok := c.pending[f.ID]; ok || f.ID == "" || len(c.pending) >= egress.DefaultMaxPendingAsks {
			return
		}
		r := EgressRequest{ID: f.ID, Host: f.Host, Port: f.Port, Since: c.m.now()}
		c.pending[f.ID] = r
		c.broadcastLocked(r)
	case egress.FrameClosed:
		r, ok := c.pending[f.ID]
		if !ok {
			return
		}
		delete(c.pending, f.ID)
		r.Closed, r.Allowed, r.Reason = true, f.Allow, f.Reason
		c.broadcastLocked(r)
	}
}

func (c *egressCtl) broadcastLocked(r EgressRequest) {
	for s := range c.subs {
		select {
		case s.ch <- r:
		default:
			s.lagged = true
			close(s.ch)
			delete(c.subs, s)
		}
	}
}

// timeoutLocked is the ask timeout the watchers want (the longest), 0
// without watchers.
func (c *egressCtl) timeoutLocked() time.Duration {
	var t time.Duration
	for s := range c.subs {
		t = max(t, s.timeout)
	}
	return t
}

// writeLocked sends f to the proxy.
func (c *egressCtl) writeLocked(f egress.Frame) error {
	if c.conn == nil {
		return errorf(CodeUnavailable, "the egress control channel of sandbox %s is not attached", c.id)
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(egressWriteTimeout))
	if _, err := c.conn.Write(append(b, '\n')); err != nil {
		c.conn.Close() // the read loop ends and re-attaches
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("write to the egress proxy of sandbox %s", c.id), Err: err}
	}
	return nil
}

// configure re-sends the asking timeout when the watchers changed it.
func (c *egressCtl) configureLocked() {
	if t := c.timeoutLocked(); t != c.asking && c.conn != nil {
		if c.writeLocked(egress.Frame{Type: egress.FrameConfig, TimeoutMS: t.Milliseconds()}) == nil {
			c.asking = t
		}
	}
}

// WatchEgress makes sandbox id's proxy ask, with timeout, about
// destinations that are only off its allow-list, and calls send with every
// pending request and every change until ctx ends or send fails. When the
// last watcher of a box leaves, its proxy stops asking and rejects what is
// pending. ready, if set, is called once the proxy has been told to ask
// (from then on a connection off the allow-list waits for a decision).
func (m *Manager) WatchEgress(ctx context.Context, id string, timeout time.Duration, ready func(), send func(EgressRequest) error) error {
	if timeout < MinEgressAskTimeout || timeout > MaxEgressAskTimeout {
		return invalidField("timeout", "ask timeout %s out of range %s..%s", timeout, MinEgressAskTimeout, MaxEgressAskTimeout)
	}
	s := &egressSub{timeout: timeout, ch: make(chan EgressRequest, egressWatchQueue)}
	c, err := m.acquireEgress(id, s)
	if err != nil {
		return err
	}
	defer c.release()
	c.mu.Lock()
	if c.subs == nil { // the controller ended (s is then not served)
		err := c.err
		c.mu.Unlock()
		return err
	}
	attached := c.attached
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if _, ok := c.subs[s]; ok {
			delete(c.subs, s)
			c.configureLocked()
		}
		c.mu.Unlock()
	}()
	for {
		select {
		case <-attached:
			attached = nil
			if ready != nil {
				ready()
			}
		case <-ctx.Done():
			return ctx.Err()
		case r, ok := <-s.ch:
			if !ok {
				c.mu.Lock()
				defer c.mu.Unlock()
				if s.lagged {
					return errorf(CodeSlowConsumer, "the egress watch of sandbox %s fell behind; watch again", id)
				}
				return c.err
			}
			if err := send(r); err != nil {
				return err
			}
		}
	}
}

// DecideEgress decides a pending request of sandbox id's, or (Host:Port)
// every request for that destination; with Allow and Remember it also
// admits the destination for the box's life. A RequestID that is not
// pending is CodeNotFound.
func (m *Manager) DecideEgress(ctx context.Context, id string, d EgressDecision) error {
	f := egress.Frame{Type: egress.FrameDecide, ID: d.RequestID, Allow: d.Allow, Remember: d.Remember, Reason: d.Reason}
	switch {
	case d.RequestID != "" && d.Host != "":
		return invalidField("request_id", "name a request or a host:port, not both")
	case d.RequestID == "":
		g, err := egress.ParseGrant(egress.Grant{Host: d.Host, Port: d.Port}.String())
		if err != nil {
			return invalidField("host", "%v", err)
		}
		f.Host, f.Port = g.Host, g.Port
	case len(d.RequestID) > 64:
		return invalidField("request_id", "request id too long")
	}
	if len(d.Reason) > 1024 {
		return invalidField("reason", "reason longer than 1024 bytes")
	}
	c, err := m.acquireEgress(id, nil)
	if err != nil {
		return err
	}
	defer c.release()
	c.mu.Lock()
	attached := c.attached
	c.mu.Unlock()
	select {
	case <-attached:
	case <-c.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subs == nil {
		return c.err
	}
	if d.RequestID != "" {
		r, ok := c.pending[d.RequestID]
		if !ok {
			return errorf(CodeNotFound, "sandbox %s has no pending egress request %s", id, d.RequestID)
		}
		f.Host, f.Port = r.Host, r.Port
	}
	if err := c.writeLocked(f); err != nil {
		return err
	}
	m.lg.Info("egress decided", zap.String("sandbox-id", id), zap.String("request-id", d.RequestID), zap.String("host", f.Host),
		zap.Uint16("port", f.Port), zap.Bool("allow", d.Allow), zap.Bool("remember", d.Remember), zap.String("by", d.By))
	return nil
}
