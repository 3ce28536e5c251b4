// Command plumb-egress is the filtering forward proxy of one egress
// sandbox (pkg/egress). sandboxd runs it as PID 1 of the box's proxy
// container, which sits on the box's internal network and on a bridge with
// a route out; the box reaches nothing else. It logs JSON lines to stderr,
// every refusal with the box's sandbox id. With --control it can hold a
// destination that is only off the allow-list and ask sandboxd, over stdin
// (decisions) and stdout (asks) as JSON lines (pkg/egress Control).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/plumbhq/plumb/pkg/egress"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// list is a repeatable flag; each value may also hold comma-separated
// entries.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }

func (l *list) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// run parses flags, serves until ctx ends and returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plumb-egress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var allow, deny, clients, grants list
	listen := fs.String("listen", ":3128", "address to serve the proxy on")
	sandbox := fs.String("sandbox", "", "id of the sandbox this proxy serves (logged with refusals)")
	fs.Var(&allow, "allow", "allow-list entry (repeatable; see pkg/egress.Rule); none = every public destination")
	fs.Var(&deny, "deny", "address or prefix refused unless an address allow rule names it (repeatable): the host's own addresses")
	fs.Var(&clients, "clients", "prefix clients must come from (repeatable; none = any)")
	maxConns := fs.Int("max-conns", egress.DefaultMaxConns, "client connections served at once")
	idle := fs.Duration("idle-timeout", egress.DefaultIdleTimeout, "close connections and tunnels idle this long")
	dial := fs.Duration("dial-timeout", egress.DefaultDialTimeout, "bound on resolving and connecting to a destination")
	control := fs.Bool("control", false, "serve the control channel on stdin (decisions, grants) and stdout (asks), JSON lines")
	askTimeout := fs.Duration("ask-timeout", 0, "with --control: hold a destination that is only off the allow-list this long and ask; 0 refuses at once until the controller sets one")
	fs.Var(&grants, "grant", "host:port admitted as a host pattern would be (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	lg := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.Lock(zapcore.AddSync(stderr)), zap.InfoLevel))
	defer func() { _ = lg.Sync() }()
	cfg, err := config(*sandbox, allow, deny, clients)
	if err != nil {
		fmt.Fprintf(stderr, "plumb-egress: %v\n", err)
		return 2
	}
	cfg.MaxConns, cfg.IdleTimeout, cfg.DialTimeout = *maxConns, *idle, *dial
	if *control {
		cfg.Ask.Timeout = *askTimeout
	}
	for _, g := range grants {
		gr, err := egress.ParseGrant(g)
		if err != nil {
			fmt.Fprintf(stderr, "plumb-egress: --grant: %v\n", err)
			return 2
		}
		cfg.Ask.Grants = append(cfg.Ask.Grants, gr)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "plumb-egress: %v\n", err)
		return 1
	}
	p := egress.New(cfg, lg)
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	ctlDone := make(chan struct{})
	ctlCtx, ctlStop := context.WithCancel(ctx)
	go func() {
		defer close(ctlDone)
		if *control {
			// The control channel: sandboxd attaches to this container's
			// stdin and stdout (a detach does not close stdin).
			err := p.Control(ctlCtx, stdin, stdout)
			lg.Warn("egress control channel ended", zap.Error(err))
		}
	}()
	defer func() { ctlStop(); <-ctlDone }()
	lg.Info("egress proxy serving", zap.String("sandbox-id", *sandbox), zap.String("addr", ln.Addr().String()),
		zap.Strings("allow", allow), zap.Int("deny", len(cfg.Policy.Deny)))
	select {
	case <-ctx.Done():
	case err = <-done:
	}
	p.Close()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		fmt.Fprintf(stderr, "plumb-egress: %v\n", err)
		return 1
	}
	return 0
}

// config builds the proxy's configuration; the deny list also gets every
// address of the proxy's own interfaces.
func config(sandbox string, allow, deny, clients []string) (egress.Config, error) {
	cfg := egress.Config{Sandbox: sandbox}
	rules, err := egress.ParseRules(allow)
	if err != nil {
		return cfg, err
	}
	cfg.Policy.Allow = rules
	for _, d := range deny {
		p, err := parsePrefix(d)
		if err != nil {
			return cfg, fmt.Errorf("--deny %q: %w", d, err)
		}
		cfg.Policy.Deny = append(cfg.Policy.Deny, p)
	}
	for _, c := range clients {
		p, err := parsePrefix(c)
		if err != nil {
			return cfg, fmt.Errorf("--clients %q: %w", c, err)
		}
		cfg.Clients = append(cfg.Clients, p)
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				cfg.Policy.Deny = append(cfg.Policy.Deny, p.Masked())
			}
		}
	}
	return cfg, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	return p.Masked(), err
}
