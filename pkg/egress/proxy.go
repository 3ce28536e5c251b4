package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Defaults of a Proxy's bounds.
const (
	DefaultMaxConns    = 64
	DefaultIdleTimeout = 5 * time.Minute
	DefaultDialTimeout = 15 * time.Second
	// headerTimeout bounds reading a request's header.
	headerTimeout = 30 * time.Second
)

// Resolver looks up a host's addresses (*net.Resolver implements it).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Proxy.
type Config struct {
	// Sandbox is the id of the box this proxy serves (logged with every
	// refusal).
	Sandbox string
	// Policy decides the destinations.
	Policy Policy
	// Clients are the prefixes connections may come from (the box's
	// network); a connection from elsewhere is closed unread. Empty
	// admits every client.
	Clients []netip.Prefix
	// MaxConns bounds the client connections served at once
	// (DefaultMaxConns when 0); more wait to be accepted.
	MaxConns int
	// IdleTimeout closes a connection, or a tunnel, on which nothing moved
	// for this long (DefaultIdleTimeout when 0).
	IdleTimeout time.Duration
	// DialTimeout bounds connecting to a destination (DefaultDialTimeout
	// when 0).
	DialTimeout time.Duration
	// Resolver resolves destination names (net.DefaultResolver when nil).
	Resolver Resolver
	// Ask, while its timeout is set (here or by the controller), holds a
	// destination refused only for not being on the allow-list and asks
	// the controller (Control).
	Ask AskConfig
}

// Proxy is the filtering forward proxy of one box.
type Proxy struct {
	cfg  Config
	lg   *zap.Logger
	srv  *http.Server
	tr   *http.Transport
	asks *asker

	mu      sync.Mutex
	tunnels map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// New returns a proxy; lg may be nil.
func New(cfg Config, lg *zap.Logger) *Proxy {
	if lg == nil {
		lg = zap.NewNop()
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	p := &Proxy{cfg: cfg, lg: lg.With(zap.String("sandbox-id", cfg.Sandbox)), tunnels: map[net.Conn]struct{}{}}
	p.asks = newAsker(cfg.Ask, p.lg)
	p.tr = &http.Transport{
		Proxy:                  nil,
		DialContext:            p.dial,
		DisableKeepAlives:      true,
		ResponseHeaderTimeout:  cfg.IdleTimeout,
		MaxResponseHeaderBytes: 1 << 20,
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          zap.NewStdLog(p.lg),
	}
	return p
}

// Serve accepts connections on ln until Close.
func (p *Proxy) Serve(ln net.Listener) error {
	err := p.srv.Serve(&limitListener{Listener: ln, sem: make(chan struct{}, p.cfg.MaxConns), clients: p.cfg.Clients, done: make(chan struct{})})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops serving and closes every connection and tunnel.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.tunnels {
		c.Close()
	}
	p.mu.Unlock()
	err := p.srv.Close()
	p.wg.Wait()
	p.tr.CloseIdleConnections()
	return err
}

// ServeHTTP serves CONNECT tunnels and absolute-URI HTTP requests.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		p.fail(w, r, http.StatusBadRequest, "this is a forward proxy: send absolute http:// URLs, or CONNECT host:port for anything else")
		return
	}
	// Vet first: a refusal must not depend on the transport (which reports
	// a client gone mid-dial instead of the dial's error).
	target, err := p.vet(r.Context(), canonicalAddr(r.URL))
	if err != nil {
		p.dialFailed(w, r, err)
		return
	}
	out := r.Clone(context.WithValue(r.Context(), vettedKey{}, target))
	out.RequestURI = ""
	removeHopHeaders(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "")
	}
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		p.dialFailed(w, r, err)
		return
	}
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	target, err := p.vet(r.Context(), r.Host)
	if err != nil {
		p.dialFailed(w, r, err)
		return
	}
	up, err := p.connectTo(r.Context(), target)
	if err != nil {
		p.dialFailed(w, r, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		p.fail(w, r, http.StatusInternalServerError, "cannot take over the connection")
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if !p.track(client, up) {
		client.Close()
		up.Close()
		return
	}
	defer p.untrack(client, up)
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	idle := &idleConn{Conn: client, d: p.cfg.IdleTimeout}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Bytes the client sent after its CONNECT line are in buf.
		_, _ = io.Copy(up, io.MultiReader(io.LimitReader(buf.Reader, int64(buf.Reader.Buffered())), idle))
		closeWrite(up)
	}()
	_, _ = io.Copy(idle, up)
	closeWrite(client)
	wg.Wait()
}

// track records a tunnel's connections so Close can end them.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.tunnels[c] = struct{}{}
	}
	p.wg.Add(1)
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	for _, c := range cs {
		c.Close()
		delete(p.tunnels, c)
	}
	p.mu.Unlock()
	p.wg.Done()
}

// vetted is a destination whose every address passed the policy.
type vetted struct {
	hostport string
	addrs    []netip.Addr
	port     uint16
}

type vettedKey struct{}

// canonicalAddr is u's host:port (port 80 when it names none).
func canonicalAddr(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// dial is the transport's dialer: it connects to the destination the
// handler vetted for this request, and vets anything else itself.
func (p *Proxy) dial(ctx context.Context, _, hostport string) (net.Conn, error) {
	if v, ok := ctx.Value(vettedKey{}).(*vetted); ok && v.hostport == hostport {
		return p.connectTo(ctx, v)
	}
	v, err := p.vet(ctx, hostport)
	if err != nil {
		return nil, err
	}
	return p.connectTo(ctx, v)
}

// vet resolves hostport and checks every address; a refused destination
// returns a *Refusal. A destination refused only for not being on the
// allow-list is asked about when asking is configured, and vetted again,
// with the grant, when it is granted: a grant admits what a host pattern
// would, so resolution and the address checks stay as they are.
func (p *Proxy) vet(ctx context.Context, hostport string) (*vetted, error) {
	pol := p.policy()
	v, err := p.vetWith(ctx, &pol, hostport)
	var ref *Refusal
	if !errors.As(err, &ref) || !ref.offList || !p.asks.active() {
		return v, err
	}
	host, ok := canonicalHost(ref.Host)
	if !ok {
		return v, err
	}
	pol.Granted = append(pol.Granted[:len(pol.Granted):len(pol.Granted)], Rule{Host: host, Port: ref.Port})
	if _, perr := netip.ParseAddr(host); perr == nil {
		// An address the grant would not admit either (an inside one) is
		// refused without asking, for the reason it is refused today.
		if _, gerr := p.vetWith(ctx, &pol, hostport); gerr != nil {
			return v, err
		}
	}
	if err := p.asks.ask(ctx, host, ref.Port); err != nil {
		return nil, err
	}
	return p.vetWith(ctx, &pol, hostport)
}

// policy is the configured policy with the rules grants added.
func (p *Proxy) policy() Policy {
	pol := p.cfg.Policy
	pol.Granted = p.asks.rules()
	return pol
}

func (p *Proxy) vetWith(ctx context.Context, pol *Policy, hostport string) (*vetted, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, &Refusal{Host: hostport, Reason: "the destination is not host:port"}
	}
	n, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || n == 0 {
		return nil, &Refusal{Host: host, Reason: fmt.Sprintf("port %q is not 1..65535", portStr)}
	}
	port := uint16(n)
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
		if a.Zone() == "" {
			host = a.Unmap().String() // the form grants carry
		}
	} else {
		if !validHostPattern(host) || strings.HasPrefix(host, "*.") {
			return nil, &Refusal{Host: host, Port: port, Reason: "the host is not a valid name"}
		}
		// Only a name rule can admit a name: an address rule admits
		// connections by address, so a name no name rule matches is
		// refused before it is resolved (resolving it would carry the
		// name, and whatever the box encoded in it, to DNS).
		if !pol.hostAllowed(host, port) {
			return nil, offList(host, port)
		}
		addrs, err = p.cfg.Resolver.LookupNetIP(ctx, "ip", host)
		if err != nil || len(addrs) == 0 {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
	}
	// Every address must pass: a name that also resolves to an inside
	// address is refused, whichever address a client library would pick.
	for _, a := range addrs {
		if err := pol.Check(host, port, a); err != nil {
			return nil, err
		}
	}
	return &vetted{hostport: hostport, addrs: addrs, port: port}, nil
}

// connectTo connects to the first vetted address that answers.
func (p *Proxy) connectTo(ctx context.Context, v *vetted) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	var lastErr error
	for _, a := range v.addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), v.port).String())
		if err == nil {
			return &idleConn{Conn: c, d: p.cfg.IdleTimeout}, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// dialFailed answers a request whose destination could not be dialled:
// 403 with the reason for a refusal, 502 otherwise.
func (p *Proxy) dialFailed(w http.ResponseWriter, r *http.Request, err error) {
	var ref *Refusal
	if errors.As(err, &ref) {
		p.lg.Warn("egress refused", zap.String("host", ref.Host), zap.Uint16("port", ref.Port),
			zap.String("addr", addrString(ref.Addr)), zap.String("reason", ref.Reason), zap.String("client", r.RemoteAddr))
		p.fail(w, r, http.StatusForbidden, ref.Error())
		return
	}
	p.lg.Info("egress dial failed", zap.String("target", r.Host), zap.Error(err))
	p.fail(w, r, http.StatusBadGateway, "egress to "+r.Host+" failed: "+err.Error())
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func (p *Proxy) fail(w http.ResponseWriter, _ *http.Request, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Connection", "close")
	w.Header().Set("X-Plumb-Egress", "refused")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg+"\n")
}

var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(k))
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

func closeWrite(c net.Conn) {
	if ic, ok := c.(*idleConn); ok {
		c = ic.Conn
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}

// idleConn pushes its deadline forward on every read and write, so a
// connection on which nothing moves for d is closed.
type idleConn struct {
	net.Conn
	d time.Duration
}

func (c *idleConn) Read(b []byte) (int, error) {
	_ = c.Conn.SetDeadline(time.Now().Add(c.d))
	return c.Conn.Read(b)
}

func (c *idleConn) Write(b []byte) (int, error) {
	_ = c.Conn.SetDeadline(time.Now().Add(c.d))
	return c.Conn.Write(b)
}

// limitListener serves at most cap(sem) connections at once and closes
// connections from outside clients unread.
type limitListener struct {
	net.Listener
	sem     chan struct{}
	clients []netip.Prefix
	done    chan struct{}
	once    sync.Once
}

// Close closes the listener and wakes an Accept waiting for a slot.
func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		select {
		case l.sem <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.sem
			return nil, err
		}
		if !l.admits(c.RemoteAddr()) {
			c.Close()
			<-l.sem
			continue
		}
		return &slotConn{Conn: c, release: func() { <-l.sem }}, nil
	}
}

func (l *limitListener) admits(a net.Addr) bool {
	if len(l.clients) == 0 {
		return true
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return false
	}
	for _, p := range l.clients {
		if p.Contains(ap.Addr().Unmap()) {
			return true
		}
	}
	return false
}

// slotConn gives its slot back once, when closed.
type slotConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *slotConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
