// Command agentctl is plumb's command-line client: it talks to agentd and
// sandboxd over gRPC.
//
// Exit codes: 0 on success (a run that completed or hit its iteration
// limit); 1 on any failure, a run's error event included; 3 when a run
// waits for decisions that agentctl may not ask for (see agentctl resume);
// 4 when the run was cancelled; 5 when it passed its deadline; 130 when
// agentctl itself was interrupted (Ctrl-C).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/plumbhq/plumb/internal/grpccreds"
	"github.com/plumbhq/plumb/internal/version"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

const usage = `agentctl is plumb's command-line client.

Usage:
  agentctl [--agentd ADDR] [--sandboxd ADDR] <command>

Commands:
  run        run an agent on a prompt and follow it live (agentd)
  resume     answer a thread's pending interrupt and follow the run
  attach     follow a thread's current or recent run
  cancel     cancel a thread's active run
  threads    list, show, remove and fork threads, and list their checkpoints
  agents     list the agents a run may name
  secrets    put (value on stdin), list and delete the tenant's secrets
  skills     put (a folder with a SKILL.md), list, get and delete the tenant's skills
  preview    make a port of a thread's sandbox reachable at a URL; list and revoke
  schedules  runs on a cron schedule or an interval: create, update, list, pause, resume, remove, fires
  egress     decide a thread's connections waiting for approval; list and revoke grants
  webhooks   rotate the tenant's webhook signing key; list webhook deliveries
  usage      the tenant's token usage over a time range, by thread, run or day
  health     check that agentd and sandboxd answer SERVING
  sandbox    create, list, exec in, copy to/from and remove sandboxes (sandboxd)
  version    print the version

agentctl <command> --help shows a command's flags.

Flags:
  --agentd ADDR     agentd address (default 127.0.0.1:7070) [$AGENTCTL_AGENTD]
  --sandboxd ADDR   sandboxd address (default 127.0.0.1:7071) [$AGENTCTL_SANDBOXD]
  --timeout D       per-call timeout of unary calls (default 5s)
  --token T         bearer token for daemons started with --token-file or --credentials-file [$AGENTCTL_TOKEN]
  --tls-ca FILE     dial over TLS, verifying the daemons with this PEM CA bundle [$AGENTCTL_TLS_CA]
  --tls-cert FILE   PEM client certificate for daemons started with --tls-client-ca [$AGENTCTL_TLS_CERT]
  --tls-key FILE    PEM private key of --tls-cert [$AGENTCTL_TLS_KEY]

Exit codes: 0 ok; 1 failure (a run's error event included); 3 decisions
pending (see agentctl resume); 4 run cancelled; 5 run deadline exceeded;
130 interrupted by Ctrl-C.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], osStdio())
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	var ee exitError
	if errors.As(err, &ee) {
		os.Exit(ee.code)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentctl: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, sio stdio) error {
	stdout := sio.out
	fs := flag.NewFlagSet("agentctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	agentd := fs.String("agentd", envOr("AGENTCTL_AGENTD", "127.0.0.1:7070"), "")
	sandboxd := fs.String("sandboxd", envOr("AGENTCTL_SANDBOXD", "127.0.0.1:7071"), "")
	timeout := fs.Duration("timeout", 5*time.Second, "")
	token := fs.String("token", envOr("AGENTCTL_TOKEN", ""), "")
	var tf grpccreds.TLSFiles
	fs.StringVar(&tf.CA, "tls-ca", envOr("AGENTCTL_TLS_CA", ""), "")
	fs.StringVar(&tf.Cert, "tls-cert", envOr("AGENTCTL_TLS_CERT", ""), "")
	fs.StringVar(&tf.Key, "tls-key", envOr("AGENTCTL_TLS_KEY", ""), "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
		}
		return err
	}
	var tc *tls.Config
	if tf != (grpccreds.TLSFiles{}) {
		var err error
		if tc, err = grpccreds.ClientTLS(tf, nil); err != nil {
			return err
		}
	}
	switch cmd := fs.Arg(0); cmd {
	case "version":
		fmt.Fprintln(stdout, version.String("agentctl"))
		return nil
	case "health":
		var failed bool
		for _, t := range []struct{ name, addr string }{{"agentd", *agentd}, {"sandboxd", *sandboxd}} {
			st, err := checkHealth(ctx, endpoint{t.addr, *token, tc}, *timeout)
			if err != nil {
				failed = true
				fmt.Fprintf(stdout, "%-9s %-22s %v\n", t.name, t.addr, err)
				continue
			}
			fmt.Fprintf(stdout, "%-9s %-22s %s\n", t.name, t.addr, st)
		}
		if failed {
			return errors.New("not every daemon is healthy")
		}
		return nil
	case "sandbox":
		return runSandbox(ctx, endpoint{*sandboxd, *token, tc}, fs.Args()[1:], sio)
	case "run", "resume", "attach", "cancel", "threads", "agents", "secrets", "skills", "preview", "schedules", "runs", "egress", "webhooks", "usage":
		return runAgent(ctx, endpoint{*agentd, *token, tc}, *timeout, cmd, fs.Args()[1:], sio)
	case "":
		fmt.Fprint(stdout, usage)
		return errors.New("no command given")
	default:
		return fmt.Errorf("unknown command %q (see agentctl --help)", cmd)
	}
}

// endpoint is a daemon's address, the bearer token to send it ("" =
// none) and the TLS client config (nil = plaintext).
type endpoint struct {
	addr, token string
	tls         *tls.Config
}

// dial connects to the endpoint (messages up to 64 MiB).
func (e endpoint) dial() (*grpc.ClientConn, error) {
	tc := insecure.NewCredentials()
	if e.tls != nil {
		tc = credentials.NewTLS(e.tls)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(tc),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
	}
	if e.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(grpccreds.BearerToken(e.token)))
	}
	return grpc.NewClient(e.addr, opts...)
}

func checkHealth(ctx context.Context, ep endpoint, timeout time.Duration) (healthpb.HealthCheckResponse_ServingStatus, error) {
	conn, err := ep.dial()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return 0, err
	}
	return resp.GetStatus(), nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
