package egress

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Asking a human (docs/security.md, "Egress approved by a human"): a
// destination refused only because it is not on the allow-list is held
// and asked about over the control channel; the connection proceeds when
// the ask is granted and gets its 403 when it is rejected or times out.

// Defaults of asking.
const (
	// DefaultMaxPendingAsks bounds the destinations awaiting a decision.
	DefaultMaxPendingAsks = 16
	// DefaultAskRate and DefaultAskBurst bound new asks (a token bucket,
	// per second).
	DefaultAskRate  = 1.0
	DefaultAskBurst = 10
	// MaxGrants bounds the rules grants may add to one proxy.
	MaxGrants = 256
	// MaxFrameBytes bounds one control frame (a JSON line).
	MaxFrameBytes = 4 << 10
	// outQueue bounds the frames waiting to be written to the controller.
	outQueue = 256
)

// Frame types of the control channel.
const (
	// FrameAsk (proxy → controller): a destination awaits a decision.
	FrameAsk = "ask"
	// FrameClosed (proxy → controller): an ask ended (decided, or timed
	// out: Reason says which).
	FrameClosed = "closed"
	// FrameSync (controller → proxy): re-send every pending ask (sent on
	// every attach).
	FrameSync = "sync"
	// FrameDecide (controller → proxy): decide the ask ID, or every ask
	// for Host:Port; with Allow and Remember the destination is also
	// granted for the proxy's life.
	FrameDecide = "decide"
	// FrameGrant (controller → proxy): admit Host:Port from now on.
	FrameGrant = "grant"
	// FrameConfig (controller → proxy): ask with a timeout of TimeoutMS
	// from now on; 0 stops asking and rejects every pending ask.
	FrameConfig = "config"
)

// Frame is one line of the control channel.
type Frame struct {
	Type     string `json:"type"`
	ID       string `json:"id,omitempty"`
	Host     string `json:"host,omitempty"`
	Port     uint16 `json:"port,omitempty"`
	Allow    bool   `json:"allow,omitempty"`
	Remember bool   `json:"remember,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// TimeoutMS is FrameConfig's ask timeout in milliseconds.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// AskConfig configures asking before refusing a destination that is not
// on the allow-list.
type AskConfig struct {
	// Timeout is how long a destination waits for a decision; 0 refuses
	// at once (no asking). A controller can change it (FrameConfig).
	Timeout time.Duration
	// MaxPending bounds the destinations awaiting a decision
	// (DefaultMaxPendingAsks when 0).
	MaxPending int
	// Rate and Burst bound new asks per second (DefaultAskRate and
	// DefaultAskBurst when 0).
	Rate  float64
	Burst int
	// Grants are destinations admitted from the start (grants made
	// before the proxy started).
	Grants []Grant
}

// Grant admits one destination as a host pattern of the allow-list would:
// the proxy still resolves it and refuses inside addresses.
type Grant struct {
	Host string
	Port uint16
}

func (g Grant) String() string { return netJoin(g.Host, g.Port) }

func netJoin(host string, port uint16) string {
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
		return "[" + host + "]:" + strconv.Itoa(int(port))
	}
	return host + ":" + strconv.Itoa(int(port))
}

// ParseGrant parses host:port ([v6]:port for an IPv6 address); the host is
// a name (no wildcard) or an address literal, the port 1..65535.
func ParseGrant(s string) (Grant, error) {
	r, err := ParseRule(s)
	if err != nil {
		return Grant{}, err
	}
	if r.Port == 0 {
		return Grant{}, fmt.Errorf("egress grant %q: want host:port", s)
	}
	if r.Host == "" {
		if r.Prefix.Bits() != r.Prefix.Addr().BitLen() {
			return Grant{}, fmt.Errorf("egress grant %q: want one address, not a prefix", s)
		}
		return Grant{Host: r.Prefix.Addr().String(), Port: r.Port}, nil
	}
	if r.Host[0] == '*' {
		return Grant{}, fmt.Errorf("egress grant %q: a grant names one host", s)
	}
	return Grant{Host: r.Host, Port: r.Port}, nil
}

// canonicalHost is host as asks and grants carry it: lower case without a
// trailing dot, an address in its canonical form; ok is false for
// anything else.
func canonicalHost(host string) (string, bool) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", false
		}
		return a.Unmap().String(), true
	}
	if len(host) > 0 && host[0] == '*' || !validHostPattern(host) {
		return "", false
	}
	return host, true
}

// asker holds a proxy's pending asks and grants.
type asker struct {
	cfg AskConfig
	lg  *zap.Logger
	out chan Frame

	mu      sync.Mutex
	timeout time.Duration
	prefix  string // of ask ids: ids of a re-created proxy do not repeat
	next    uint64
	pending map[string]*pendingAsk // by host:port
	byID    map[string]*pendingAsk
	granted []Rule
	bucket  tokens
}

type pendingAsk struct {
	id    string
	host  string
	port  uint16
	timer *time.Timer
	done  chan struct{}
	allow bool
	why   string
}

// tokens is a token bucket.
type tokens struct {
	rate, burst, have float64
	last              time.Time
}

func (b *tokens) take(now time.Time) bool {
	if !b.last.IsZero() {
		b.have = min(b.burst, b.have+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.have < 1 {
		return false
	}
	b.have--
	return true
}

func newAsker(cfg AskConfig, lg *zap.Logger) *asker {
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultMaxPendingAsks
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultAskRate
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultAskBurst
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	a := &asker{cfg: cfg, timeout: cfg.Timeout, prefix: hex.EncodeToString(b) + "-", lg: lg, out: make(chan Frame, outQueue), pending: map[string]*pendingAsk{}, byID: map[string]*pendingAsk{},
		bucket: tokens{rate: cfg.Rate, burst: float64(cfg.Burst), have: float64(cfg.Burst)}}
	for _, g := range cfg.Grants {
		a.grant(g.Host, g.Port)
	}
	return a
}

// rules returns the rules grants added.
func (a *asker) rules() []Rule {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.granted
}

// grant adds a rule for host:port (a copy-on-write slice: rules() callers
// keep theirs).
func (a *asker) grant(host string, port uint16) {
	host, ok := canonicalHost(host)
	if !ok || port == 0 {
		a.lg.Warn("egress grant ignored: not host:port", zap.String("host", host), zap.Uint16("port", port))
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.granted {
		if r.Host == host && r.Port == port {
			return
		}
	}
	if len(a.granted) >= MaxGrants {
		a.lg.Warn("egress grant ignored: too many grants", zap.String("host", host), zap.Uint16("port", port))
		return
	}
	a.granted = append(a.granted[:len(a.granted):len(a.granted)], Rule{Host: host, Port: port})
	a.lg.Info("egress granted", zap.String("host", host), zap.Uint16("port", port))
}

// active reports whether the proxy asks.
func (a *asker) active() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.timeout > 0
}

// ask waits for a decision on host:port; nil means granted.
func (a *asker) ask(ctx context.Context, host string, port uint16) error {
	refuse := func(reason string) error { return &Refusal{Host: host, Port: port, Reason: reason} }
	key := netJoin(host, port)
	a.mu.Lock()
	p := a.pending[key]
	if p == nil && a.timeout <= 0 {
		a.mu.Unlock()
		return offList(host, port)
	}
	if p == nil {
		if len(a.pending) >= a.cfg.MaxPending {
			a.mu.Unlock()
			return refuse(fmt.Sprintf("the destination is not on this worker's egress allow-list, and too many destinations (%d) await approval", a.cfg.MaxPending))
		}
		if !a.bucket.take(time.Now()) {
			a.mu.Unlock()
			return refuse("the destination is not on this worker's egress allow-list, and this box is asking for approval too fast")
		}
		a.next++
		p = &pendingAsk{id: a.prefix + strconv.FormatUint(a.next, 10), host: host, port: port, done: make(chan struct{})}
		a.pending[key] = p
		a.byID[p.id] = p
		timeout := a.timeout
		p.timer = time.AfterFunc(timeout, func() {
			a.decide(p, false, fmt.Sprintf("nobody approved it within %s", timeout))
		})
		a.send(Frame{Type: FrameAsk, ID: p.id, Host: host, Port: port})
		a.lg.Info("egress ask", zap.String("id", p.id), zap.String("host", host), zap.Uint16("port", port))
	}
	a.mu.Unlock()
	select {
	case <-p.done:
		if p.allow {
			return nil
		}
		return refuse("the destination is not on this worker's egress allow-list, and " + p.why)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// decide ends p (once).
func (a *asker) decide(p *pendingAsk, allow bool, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.decideLocked(p, allow, why)
}

func (a *asker) decideLocked(p *pendingAsk, allow bool, why string) {
	if a.byID[p.id] != p {
		return
	}
	delete(a.byID, p.id)
	delete(a.pending, netJoin(p.host, p.port))
	p.timer.Stop()
	p.allow, p.why = allow, why
	close(p.done)
	a.send(Frame{Type: FrameClosed, ID: p.id, Host: p.host, Port: p.port, Allow: allow, Reason: why})
	a.lg.Info("egress ask closed", zap.String("id", p.id), zap.String("host", p.host), zap.Uint16("port", p.port),
		zap.Bool("allow", allow), zap.String("reason", why))
}

// send queues f for the controller; when the queue is full (nobody
// reads) it is dropped: the controller syncs when it attaches.
func (a *asker) send(f Frame) {
	select {
	case a.out <- f:
	default:
		a.lg.Warn("egress control frame dropped: the controller does not read", zap.String("type", f.Type), zap.String("id", f.ID))
	}
}

// handle applies one frame from the controller.
func (a *asker) handle(f Frame) {
	switch f.Type {
	case FrameSync:
		a.mu.Lock()
		for _, p := range a.byID {
			a.send(Frame{Type: FrameAsk, ID: p.id, Host: p.host, Port: p.port})
		}
		a.mu.Unlock()
	case FrameGrant:
		a.grant(f.Host, f.Port)
	case FrameConfig:
		a.mu.Lock()
		a.timeout = time.Duration(max(f.TimeoutMS, 0)) * time.Millisecond
		if a.timeout == 0 {
			for _, p := range a.byID {
				a.decideLocked(p, false, "nobody is there to approve it")
			}
		}
		a.mu.Unlock()
		a.lg.Info("egress asking", zap.Duration("timeout", a.timeout))
	case FrameDecide:
		why := "the request was rejected"
		if f.Reason != "" {
			why = "the request was rejected: " + f.Reason
		}
		if f.Allow {
			why = "approved"
		}
		var ps []*pendingAsk
		a.mu.Lock()
		if f.ID != "" {
			if p := a.byID[f.ID]; p != nil {
				ps = append(ps, p)
			}
		} else if h, ok := canonicalHost(f.Host); ok {
			if p := a.pending[netJoin(h, f.Port)]; p != nil {
				ps = append(ps, p)
			}
		}
		a.mu.Unlock()
		if f.Allow && f.Remember {
			host, port := f.Host, f.Port
			if len(ps) > 0 {
				host, port = ps[0].host, ps[0].port
			}
			a.grant(host, port)
		}
		for _, p := range ps {
			a.decide(p, f.Allow, why)
		}
	default:
		a.lg.Warn("egress control frame ignored", zap.String("type", f.Type))
	}
}

// Control serves the control channel: it reads frames from r and writes
// asks to w until r ends, ctx ends or a write fails. Only one Control runs
// at a time per proxy. It returns when ctx ends even if a read from r is
// blocked (that read ends when r does).
func (p *Proxy) Control(ctx context.Context, r io.Reader, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	werr := make(chan error, 1)
	go func() {
		enc := json.NewEncoder(w)
		for {
			select {
			case f := <-p.asks.out:
				if err := enc.Encode(f); err != nil {
					werr <- err
					return
				}
			case <-ctx.Done():
				werr <- nil
				return
			}
		}
	}()
	rerr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 512), MaxFrameBytes)
		for sc.Scan() {
			var f Frame
			if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
				p.lg.Warn("egress control frame ignored: not JSON", zap.Error(err))
				continue
			}
			p.asks.handle(f)
		}
		rerr <- sc.Err()
	}()
	select {
	case err := <-rerr:
		cancel()
		<-werr
		if err == nil {
			err = io.EOF
		}
		return err
	case err := <-werr:
		// The reader stays blocked in r until r ends (stdin outlives us).
		return err
	case <-ctx.Done():
		<-werr
		return ctx.Err()
	}
}
