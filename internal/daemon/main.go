package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/plumbhq/plumb/internal/daemon/tracing"
	"github.com/plumbhq/plumb/internal/grpccreds"
	"github.com/plumbhq/plumb/internal/version"
	"go.uber.org/zap"
)

// UsageError is a bad flag, environment variable or config value. Main
// exits with code 2 for it (1 for other errors).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Main runs a daemon's run function with a context that is cancelled on
// SIGINT or SIGTERM, prints a failure as one line on stderr, and returns
// the process exit code: 0 on success or --help, 2 for usage errors, 1
// otherwise.
func Main(binary string, run func(ctx context.Context, args []string, stdout io.Writer) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout)
	var ue *UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "%s: %v\n", binary, err)
		return 2
	default:
		fmt.Fprintf(os.Stderr, "%s: %v\n", binary, err)
		return 1
	}
}

// Common holds the flags every daemon has.
type Common struct {
	// GRPCAddr is where the gRPC services listen.
	GRPCAddr string
	// HTTPAddr is where /metrics, /healthz and the HTTP/JSON API listen.
	HTTPAddr string
	// ConfigPath is an optional YAML config file.
	ConfigPath string
	// LogFormat is json or console.
	LogFormat string
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// ShutdownGrace bounds how long in-flight calls may run at shutdown.
	ShutdownGrace time.Duration
	// Version asks for the version banner only.
	Version bool
	// TokenFile holds the bearer token clients must send (empty = none);
	// it acts for tenant "default".
	TokenFile string
	// CredentialsFile lists "TENANT TOKEN [forwarder] [operator]" lines (empty =
	// none); reloaded when it changes and on SIGHUP.
	CredentialsFile string
	// TLS is the server's certificate, key and client CA (mTLS).
	TLS grpccreds.TLSFiles
	// Insecure allows listening beyond loopback without credentials.
	Insecure bool
	// PprofAddr enables /debug/pprof on its own listener.
	PprofAddr string
	// MaxConns, MaxConnsPerPeer and MaxStreamsPerConn bound open gRPC
	// connections, those from one IP address, and calls per connection.
	MaxConns, MaxConnsPerPeer, MaxStreamsPerConn int
	// MaxRecvBytes bounds a request message of a method that takes no
	// file contents or stdin.
	MaxRecvBytes int
}

// Bind defines the common flags on f with the daemon's default addresses.
func (c *Common) Bind(f *Flags, grpcAddr, httpAddr string) {
	f.Addr(&c.GRPCAddr, "grpc-addr", grpcAddr, "gRPC listen address")
	f.Addr(&c.HTTPAddr, "http-addr", httpAddr, "HTTP listen address for /metrics, /healthz and the HTTP/JSON API (docs/http.md)")
	f.String(&c.ConfigPath, "config", "", "YAML config file")
	f.Enum(&c.LogFormat, "log-format", "json", LogFormats, "log format")
	f.Enum(&c.LogLevel, "log-level", "info", LogLevels, "log level")
	f.Duration(&c.ShutdownGrace, "shutdown-grace", 30*time.Second, "time in-flight calls get to finish at shutdown")
	f.Bool(&c.Version, "version", false, "print the version and exit")
	f.String(&c.TokenFile, "token-file", "", "file holding a bearer token clients may send, for tenant \"default\" (health checks need none)")
	f.String(&c.CredentialsFile, "credentials-file", "", "file of accepted client credentials, one \"TENANT TOKEN [forwarder] [operator]\" per line (operator: agentd's operator RPCs); reloaded when it changes or on SIGHUP")
	f.String(&c.TLS.Cert, "tls-cert", "", "PEM server certificate chain: serve gRPC over TLS (re-read when it changes)")
	f.String(&c.TLS.Key, "tls-key", "", "PEM private key of --tls-cert")
	f.String(&c.TLS.ClientCA, "tls-client-ca", "", "PEM CA bundle client certificates must chain to: require and verify client certificates (mTLS)")
	f.Bool(&c.Insecure, "insecure", false, "allow a gRPC address beyond loopback without credentials (no token, no client CA)")
	f.String(&c.PprofAddr, "pprof-addr", "", "serve /debug/pprof on this address (a bare :port binds loopback; empty = off)")
	f.Int(&c.MaxConns, "max-conns", DefaultMaxConns, "open gRPC connections at most; more are closed at once")
	f.Int(&c.MaxConnsPerPeer, "max-conns-per-peer", DefaultMaxConnsPerPeer, "open gRPC connections from one IP address at most; more are closed at once")
	f.Int(&c.MaxStreamsPerConn, "max-streams-per-conn", DefaultMaxStreamsPerConn, "concurrent calls on one gRPC connection at most; a client waits for a free one")
	f.Int(&c.MaxRecvBytes, "max-recv-bytes", DefaultMaxRecvBytes, "largest request message of a method that takes no file contents or stdin (those take up to 16 MiB)")
}

// Security loads the credentials and TLS material the flags name. A file
// that does not load is a UsageError naming it. tokenForwards makes the
// --token-file token a trusted forwarder (sandboxd).
func (c *Common) Security(tokenForwards bool, lg *zap.Logger) (Options, error) {
	token, err := ReadToken(c.TokenFile)
	if err != nil {
		return Options{}, &UsageError{Err: err}
	}
	creds, err := LoadCredentials(c.CredentialsFile, token, tokenForwards)
	if err != nil {
		return Options{}, &UsageError{Err: err}
	}
	o := Options{Credentials: creds, Insecure: c.Insecure, PprofAddr: c.PprofAddr,
		MaxConns: c.MaxConns, MaxConnsPerPeer: c.MaxConnsPerPeer, MaxStreamsPerConn: c.MaxStreamsPerConn, MaxRecvBytes: c.MaxRecvBytes}
	if c.TLS.Enabled() {
		if o.TLS, err = grpccreds.ServerTLS(c.TLS, lg); err != nil {
			return Options{}, &UsageError{Err: err}
		}
		o.ClientCertRequired = c.TLS.ClientCA != ""
	}
	if creds == nil && !o.ClientCertRequired && !IsLoopback(c.GRPCAddr) && !c.Insecure {
		return Options{}, Usagef("refusing to serve gRPC on %s without credentials: give --token-file, --credentials-file or --tls-client-ca, listen on loopback, or pass --insecure", c.GRPCAddr)
	}
	if c.PprofAddr != "" {
		if err := CheckAddr(c.PprofAddr); err != nil {
			return Options{}, Usagef("invalid --pprof-addr %q: %v", c.PprofAddr, err)
		}
	}
	for _, l := range []struct {
		flag string
		v    int
	}{{"max-conns", c.MaxConns}, {"max-conns-per-peer", c.MaxConnsPerPeer}, {"max-streams-per-conn", c.MaxStreamsPerConn}, {"max-recv-bytes", c.MaxRecvBytes}} {
		if l.v < 0 {
			return Options{}, Usagef("--%s must not be negative (0 = the default), not %d", l.flag, l.v)
		}
	}
	if c.MaxRecvBytes > DefaultMaxMessageBytes {
		return Options{}, Usagef("--max-recv-bytes must be at most %d (the bulk methods' limit), not %d", DefaultMaxMessageBytes, c.MaxRecvBytes)
	}
	return o, nil
}

// ParseArgs parses args into f. For --help it prints the usage to stdout
// and returns flag.ErrHelp; for --version (when c.Version is set) the caller
// prints the banner. Parse failures come back as UsageError.
func ParseArgs(f *Flags, args []string, stdout io.Writer, summary string) error {
	if err := f.Parse(args, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.Usage(stdout, summary)
			return err
		}
		return &UsageError{Err: err}
	}
	return nil
}

// PrintVersion writes the version banner of binary.
func PrintVersion(w io.Writer, binary string) {
	fmt.Fprintln(w, version.String(binary))
}

// ServerConfig is the "server" block both daemons' config files share.
type ServerConfig struct {
	// GRPCAddr is the gRPC listen address.
	GRPCAddr string `yaml:"grpc_addr"`
	// HTTPAddr is the metrics/pprof listen address.
	HTTPAddr string `yaml:"http_addr"`
	// ShutdownGrace bounds in-flight calls at shutdown.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
}

// Apply checks the config file's server values, then settles each with
// its flag (see Override) into c. A bad value is an error even when a flag
// overrides it.
func (c *Common) Apply(f *Flags, s ServerConfig) error {
	for _, a := range []struct{ key, val string }{{"server.grpc_addr", s.GRPCAddr}, {"server.http_addr", s.HTTPAddr}} {
		if a.val == "" {
			continue
		}
		if err := CheckAddr(a.val); err != nil {
			return Usagef("config file %s: %s %q: %v", c.ConfigPath, a.key, a.val, err)
		}
	}
	if s.ShutdownGrace < 0 {
		return Usagef("config file %s: server.shutdown_grace must not be negative", c.ConfigPath)
	}
	Override(f, "grpc-addr", c.GRPCAddr, &s.GRPCAddr)
	Override(f, "http-addr", c.HTTPAddr, &s.HTTPAddr)
	Override(f, "shutdown-grace", c.ShutdownGrace, &s.ShutdownGrace)
	c.GRPCAddr, c.HTTPAddr, c.ShutdownGrace = s.GRPCAddr, s.HTTPAddr, s.ShutdownGrace
	return nil
}

// SetupTracing sets up the daemon's OpenTelemetry tracing from the OTEL_*
// environment (see package tracing; off unless asked for) and installs it
// as the process default. A value it cannot honor is a UsageError. Defer
// FlushTraces right after.
func SetupTracing(ctx context.Context, service string, lg *zap.Logger) (*tracing.Tracing, error) {
	tr, err := tracing.Setup(ctx, service, lg)
	if errors.Is(err, tracing.ErrConfig) {
		return nil, &UsageError{Err: err}
	}
	if err != nil {
		return nil, err
	}
	tr.Install(lg)
	return tr, nil
}

// FlushTraces exports the spans still buffered, for up to five seconds,
// when the daemon exits.
func FlushTraces(tr *tracing.Tracing, lg *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		lg.Warn("traces not flushed at exit", zap.Error(err))
	}
}
