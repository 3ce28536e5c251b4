package daemon

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime/debug"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/plumbhq/plumb/internal/httpapi"
)

// DefaultMaxMessageBytes bounds gRPC messages in both directions. The file
// contract needs at least 8 MiB (a 5 MiB media read in base64).
const DefaultMaxMessageBytes = 16 << 20

// Options configures Serve.
type Options struct {
	// Name of the daemon, used in logs and metrics.
	Name string
	// GRPCAddr is the gRPC listen address (host:port; port 0 picks one).
	GRPCAddr string
	// HTTPAddr is the metrics/pprof listen address.
	HTTPAddr string
	// ShutdownGrace is how long in-flight calls may run after shutdown
	// starts before they are cancelled.
	ShutdownGrace time.Duration
	// MaxMessageBytes bounds gRPC messages sent, and those received by
	// BulkMethods (0 = DefaultMaxMessageBytes).
	MaxMessageBytes int
	// MaxRecvBytes bounds a message received by any other method (0 =
	// DefaultMaxRecvBytes; at most MaxMessageBytes).
	MaxRecvBytes int
	// BulkMethods are the full method names ("/plumb.v1.SandboxService/
	// Write") whose requests carry file contents or stdin and may be
	// MaxMessageBytes long.
	BulkMethods []string
	// MaxStreamsPerConn bounds concurrent calls on one connection (0 =
	// DefaultMaxStreamsPerConn).
	MaxStreamsPerConn int
	// MaxConns bounds open gRPC connections (0 = DefaultMaxConns), and
	// MaxConnsPerPeer those from one remote IP address (0 =
	// DefaultMaxConnsPerPeer); a connection over either is closed at
	// once.
	MaxConns, MaxConnsPerPeer int
	// Logger receives server logs (nil = no logs).
	Logger *zap.Logger
	// Registry receives the server's metrics and is served on /metrics
	// (nil = a new registry with Go and process collectors).
	Registry *prometheus.Registry
	// Register registers the daemon's gRPC services.
	Register func(*grpc.Server)
	// Ready, if set, is called once both listeners are bound, with their
	// actual addresses.
	Ready func(grpcAddr, httpAddr net.Addr)
	// Token, if set, is a bearer token every call may carry (tenant
	// "default"; a forwarder when TokenForwards is set). Credentials
	// holds any further ones.
	Token string
	// TokenForwards makes Token a trusted forwarder (sandboxd: agentd's
	// token may name the tenant it calls for).
	TokenForwards bool
	// Credentials, if set, are the bearer tokens calls must carry
	// (health checks excepted); Serve watches their file for changes.
	Credentials *Credentials
	// TLS, if set, serves gRPC over TLS (grpccreds.ServerTLS); ClientCertRequired
	// says whether it verifies client certificates (mTLS).
	TLS *tls.Config
	// ClientCertRequired reports that TLS requires client certificates.
	ClientCertRequired bool
	// Insecure allows a gRPC address beyond loopback without any
	// credentials (no token, no client certificates).
	Insecure bool
	// PprofAddr, if set, serves /debug/pprof on a listener of its own
	// (a bare ":port" binds loopback). It is never served on HTTPAddr
	// or the gRPC port.
	PprofAddr string
	// ReloadInterval is how often the credentials file is checked for
	// changes (default 2 s; SIGHUP checks at once).
	ReloadInterval time.Duration
	// ServerOptions are added to the gRPC server's options (tracing's
	// stats handler).
	ServerOptions []grpc.ServerOption
	// BeforeStop, if set, runs when shutdown starts, with a context that
	// ends after ShutdownGrace: the daemon's own draining (agentd stops
	// accepting runs, and at the deadline cancels what is left or, with
	// replicas, hands it to the others).
	BeforeStop func(ctx context.Context) error
	// Servers are further HTTP servers of the daemon (agentd's preview
	// listener), each on a listener the caller bound (so that it knows
	// the address first). Serve serves them, shuts them down with the
	// others and closes their listeners, also when it fails to start.
	Servers []HTTPServer
	// API, if set, serves the daemon's services as HTTP/JSON on HTTPAddr
	// (internal/httpapi, docs/http.md), through an in-process gRPC server
	// with the same interceptors, credentials and message limits as the
	// gRPC port.
	API *httpapi.Service
}

// HTTPServer is an HTTP handler on a listener of its own.
type HTTPServer struct {
	// Name is used in logs.
	Name string
	// Listener is the bound listener.
	Listener net.Listener
	// Handler serves it.
	Handler http.Handler
}

// Serve binds both listeners, serves until ctx is done, then shuts down:
// health turns NOT_SERVING, new calls are refused, in-flight calls get
// ShutdownGrace to finish and are then cancelled. A listener that cannot be
// bound is an error before anything is served. Serve returns nil after a
// clean shutdown.
func Serve(ctx context.Context, o Options) error {
	var extra []*http.Server
	defer func() {
		for _, x := range o.Servers {
			x.Listener.Close()
		}
	}()
	lg := o.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	maxMsg := cmp.Or(o.MaxMessageBytes, DefaultMaxMessageBytes)
	maxRecv := cmp.Or(o.MaxRecvBytes, DefaultMaxRecvBytes)

	creds := o.Credentials
	if creds == nil && o.Token != "" {
		creds, _ = LoadCredentials("", o.Token, o.TokenForwards)
	} else if creds != nil && o.Token != "" {
		creds.fixed = []Credential{{Tenant: "default", Token: o.Token, Forwarder: o.TokenForwards}}
	}
	if creds == nil && !o.ClientCertRequired && !IsLoopback(o.GRPCAddr) {
		if !o.Insecure {
			return fmt.Errorf("refusing to serve gRPC on %s without credentials: give --token-file, --credentials-file or --tls-client-ca, listen on loopback, or pass --insecure", o.GRPCAddr)
		}
		lg.Warn("INSECURE: serving gRPC beyond loopback without credentials (--insecure); anyone who reaches the port can use it", zap.String("grpc-addr", o.GRPCAddr))
	}
	pprofAddr := o.PprofAddr
	if pprofAddr != "" {
		if h, p, err := net.SplitHostPort(pprofAddr); err == nil && h == "" {
			pprofAddr = net.JoinHostPort("127.0.0.1", p)
		}
	}

	glis, err := listen("gRPC", o.GRPCAddr)
	if err != nil {
		return err
	}
	hlis, err := listen("HTTP", o.HTTPAddr)
	if err != nil {
		glis.Close()
		return err
	}
	var plis net.Listener
	if pprofAddr != "" {
		if plis, err = listen("pprof", pprofAddr); err != nil {
			glis.Close()
			hlis.Close()
			return err
		}
	}

	metrics := newGRPCMetrics(reg)
	glis = newLimitListener(glis, cmp.Or(o.MaxConns, DefaultMaxConns), cmp.Or(o.MaxConnsPerPeer, DefaultMaxConnsPerPeer),
		func(reason string) { metrics.refused.WithLabelValues(reason + "_connections").Inc() })
	unary := []grpc.UnaryServerInterceptor{metrics.unary, recoverUnary(lg), authUnary(creds)}
	stream := []grpc.StreamServerInterceptor{metrics.stream, recoverStream(lg), authStream(creds)}
	sopts := []grpc.ServerOption{
		// Calls are authenticated from their headers, before the server
		// reads (and buffers) a message: see authTap.
		grpc.InTapHandle(authTap(creds, metrics.refusedCall)),
		grpc.MaxConcurrentStreams(uint32(cmp.Or(o.MaxStreamsPerConn, DefaultMaxStreamsPerConn))),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}
	sopts = append(sopts, MessageLimits(maxMsg, maxRecv, o.BulkMethods)...)
	sopts = append(sopts, o.ServerOptions...)
	// The HTTP API's in-process server: the same options but transport
	// security (the connection never leaves the process).
	isopts := append(slices.Clone(sopts),
		grpc.MaxConcurrentStreams(uint32(cmp.Or(o.MaxConns, DefaultMaxConns)*cmp.Or(o.MaxStreamsPerConn, DefaultMaxStreamsPerConn))))
	if o.TLS != nil {
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(o.TLS)))
	}
	srv := grpc.NewServer(sopts...)
	if o.Register != nil {
		o.Register(srv)
	}
	var (
		api  *inprocAPI
		root http.Handler = httpMux(reg, nil)
	)
	if o.API != nil {
		api, err = newInprocAPI(ctx, o, isopts, creds, maxMsg, maxRecv, lg)
		if err != nil {
			glis.Close()
			hlis.Close()
			if plis != nil {
				plis.Close()
			}
			return err
		}
		defer api.conn.Close()
		root = httpMux(reg, api.handler)
	}
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	for name := range srv.GetServiceInfo() {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)

	hsrv := &http.Server{Handler: root, ReadHeaderTimeout: 10 * time.Second}
	var psrv *http.Server

	errc := make(chan error, 4+len(o.Servers)) // gRPC, in-process gRPC, HTTP, pprof, the others
	go func() { errc <- srv.Serve(glis) }()
	if api != nil {
		go func() { errc <- api.srv.Serve(api.lis) }()
	}
	go func() { errc <- hsrv.Serve(hlis) }()
	if plis != nil {
		psrv = &http.Server{Handler: pprofMux(), ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- psrv.Serve(plis) }()
		lg.Info("serving pprof", zap.String("pprof-addr", plis.Addr().String()))
	}
	for _, x := range o.Servers {
		xs := &http.Server{Handler: x.Handler, ReadHeaderTimeout: 10 * time.Second}
		extra = append(extra, xs)
		go func() { errc <- xs.Serve(x.Listener) }()
		lg.Info("serving "+x.Name, zap.String("addr", x.Listener.Addr().String()))
	}
	wctx, stopWatch := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		creds.Watch(wctx, lg, cmp.Or(o.ReloadInterval, 2*time.Second))
	}()
	defer func() { stopWatch(); <-watched }()
	lg.Info("serving", zap.String("grpc-addr", glis.Addr().String()), zap.String("http-addr", hlis.Addr().String()),
		zap.Bool("tls", o.TLS != nil), zap.Bool("client-certs", o.ClientCertRequired), zap.Bool("tokens", creds != nil))
	if o.Ready != nil {
		o.Ready(glis.Addr(), hlis.Addr())
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		if errors.Is(serveErr, http.ErrServerClosed) || errors.Is(serveErr, grpc.ErrServerStopped) {
			serveErr = nil
		}
	}

	lg.Info("shutting down", zap.Duration("grace", o.ShutdownGrace))
	hs.Shutdown()
	// One grace period covers the daemon's own draining and the server's.
	deadline := time.Now().Add(o.ShutdownGrace)
	if o.BeforeStop != nil {
		bctx, cancel := context.WithDeadline(context.Background(), deadline)
		if err := o.BeforeStop(bctx); err != nil {
			lg.Warn("shutdown grace over", zap.Error(err))
		}
		cancel()
	}
	servers := []*grpc.Server{srv}
	if api != nil {
		servers = append(servers, api.srv)
	}
	stopped := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, s := range servers {
			wg.Go(s.GracefulStop)
		}
		wg.Wait()
		close(stopped)
	}()
	// Streams the drain ended still need a moment to close.
	timer := time.NewTimer(max(time.Until(deadline), time.Second))
	select {
	case <-stopped:
		timer.Stop()
	case <-timer.C:
		lg.Warn("grace period over, cancelling in-flight calls")
		for _, s := range servers {
			s.Stop()
		}
		<-stopped
	}
	hctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := hsrv.Shutdown(hctx); err != nil {
		hsrv.Close()
	}
	if psrv != nil {
		if err := psrv.Shutdown(hctx); err != nil {
			psrv.Close()
		}
	}
	for _, xs := range extra {
		// Hijacked connections (WebSockets) are not Shutdown's: Close
		// does not end them either, their handlers' contexts do.
		if err := xs.Shutdown(hctx); err != nil {
			xs.Close()
		}
	}
	lg.Info("stopped")
	return serveErr
}

// IsLoopback reports whether the listen address addr binds loopback only
// ("localhost", 127.0.0.0/8 or ::1); an empty host (every interface) is
// not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func listen(what, addr string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err == nil {
		return lis, nil
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s address %s is already in use", what, addr)
	}
	return nil, fmt.Errorf("%s address %s: %w", what, addr, err)
}

// httpMux serves /metrics and /healthz, and api (if set) at every other
// path.
func httpMux(reg *prometheus.Registry, api http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	if api != nil {
		mux.Handle("/", api)
	}
	return mux
}

// inprocAPI is the HTTP API of a daemon: its handler, and the in-process
// gRPC server and connection it calls the services through.
type inprocAPI struct {
	handler *httpapi.Handler
	srv     *grpc.Server
	lis     *bufconn.Listener
	conn    *grpc.ClientConn
}

// newInprocAPI builds the HTTP API: a gRPC server with the options of the
// gRPC port (interceptors, tap handle, message limits) on an in-process
// listener, a connection to it, and the handler over that connection. The
// handler checks a token with the same credential check as a gRPC call.
func newInprocAPI(ctx context.Context, o Options, sopts []grpc.ServerOption, creds *Credentials, maxMsg, maxRecv int, lg *zap.Logger) (*inprocAPI, error) {
	srv := grpc.NewServer(sopts...)
	if o.Register != nil {
		o.Register(srv)
	}
	lis := bufconn.Listen(1 << 20)
	conn, err := grpc.NewClient("passthrough:///"+cmp.Or(o.Name, "daemon"),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg)))
	if err != nil {
		return nil, fmt.Errorf("HTTP API: %w", err)
	}
	bulk := map[string]bool{}
	for _, m := range o.BulkMethods {
		bulk[m] = true
	}
	cfg := httpapi.Config{
		Service: *o.API,
		Conn:    conn,
		Check: func(tok string) error {
			md := metadata.MD{}
			if tok != "" {
				md.Set("authorization", "Bearer "+tok)
			}
			_, _, err := callerTenant(md, creds)
			return err
		},
		// A body carries the message in JSON: bytes fields in base64
		// (4/3), plus room for JSON's own syntax.
		BodyLimit: func(full string) int64 {
			n := maxRecv
			if bulk[full] {
				n = maxMsg
			}
			return int64(n)*4/3 + 64<<10
		},
		Logger: lg,
	}
	switch {
	case creds == nil && o.ClientCertRequired:
		cfg.Refuse = "this daemon authenticates gRPC callers by client certificate, which the HTTP port cannot check: give it bearer tokens (--token-file or --credentials-file) to use the HTTP API"
	case creds == nil && !IsLoopback(o.HTTPAddr) && !o.Insecure:
		cfg.Refuse = "no credentials are configured and the HTTP address is beyond loopback: give --token-file or --credentials-file (or pass --insecure) to use the HTTP API"
	}
	cfg.LoopbackHosts = creds == nil && cfg.Refuse == "" && IsLoopback(o.HTTPAddr)
	if cfg.Refuse != "" {
		lg.Warn("HTTP API refuses every call", zap.String("reason", cfg.Refuse))
	}
	h, err := httpapi.New(ctx, cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &inprocAPI{handler: h, srv: srv, lis: lis, conn: conn}, nil
}

// pprofMux serves the profiles, on the pprof listener only.
func pprofMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// recoverUnary turns a handler panic into INTERNAL; the stack goes to logs.
func recoverUnary(lg *zap.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				lg.Error("panic in handler", zap.String("method", info.FullMethod), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
				err = status.Error(codes.Internal, "internal error")
			}
		}()
		return h(ctx, req)
	}
}

// recoverStream is recoverUnary for streaming handlers.
func recoverStream(lg *zap.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				lg.Error("panic in handler", zap.String("method", info.FullMethod), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
				err = status.Error(codes.Internal, "internal error")
			}
		}()
		return h(srv, ss)
	}
}
