package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

// egressWatch prints an egress sandbox's connections awaiting approval,
// one line each when they come and when they end, until ctx ends.
func egressWatch(ctx context.Context, c plumbv1.SandboxServiceClient, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("egress-watch: missing sandbox id")
	}
	id := args[0]
	timeout := fs.Duration("timeout", 10*time.Minute, "how long a connection waits for a decision")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	s, err := c.WatchEgressRequests(ctx, &plumbv1.WatchEgressRequestsRequest{SandboxId: id, Timeout: durationpb.New(*timeout)})
	if err != nil {
		return err
	}
	for {
		resp, err := s.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		r := resp.GetRequest()
		state := "pending"
		switch {
		case r.GetClosed() && r.GetAllowed():
			state = "allowed"
		case r.GetClosed():
			state = "refused"
		}
		fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\n", r.GetId(), net.JoinHostPort(r.GetHost(), strconv.Itoa(int(r.GetPort()))), state, r.GetReason())
	}
}

// egressDecide approves or rejects a request (REQUEST_ID) or a destination
// (--host HOST:PORT).
func egressDecide(ctx context.Context, c plumbv1.SandboxServiceClient, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("egress-decide: missing sandbox id")
	}
	id := args[0]
	hostport := fs.String("host", "", "decide every request for HOST:PORT (instead of a request id)")
	allow := fs.Bool("allow", false, "approve")
	reject := fs.Bool("reject", false, "reject")
	scope := fs.String("scope", "once", "once or sandbox (also admit the destination for the sandbox's life)")
	reason := fs.String("reason", "", "reason given with a rejection")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *allow == *reject {
		return errors.New("egress-decide: give exactly one of --allow and --reject")
	}
	req := &plumbv1.DecideEgressRequest{SandboxId: id, Allow: *allow, Reason: *reason}
	switch *scope {
	case "once":
		req.Scope = plumbv1.EgressScope_EGRESS_SCOPE_ONCE
	case "sandbox":
		req.Scope = plumbv1.EgressScope_EGRESS_SCOPE_SANDBOX
	default:
		return fmt.Errorf("--scope %q: want once or sandbox", *scope)
	}
	switch rest := fs.Args(); {
	case *hostport != "" && len(rest) == 0:
		host, port, err := net.SplitHostPort(*hostport)
		if err != nil {
			return fmt.Errorf("--host %q: %w", *hostport, err)
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return fmt.Errorf("--host %q: port: %w", *hostport, err)
		}
		req.Host, req.Port = host, uint32(n)
	case *hostport == "" && len(rest) == 1:
		req.RequestId = rest[0]
	default:
		return errors.New("egress-decide: give a request id or --host HOST:PORT")
	}
	if _, err := c.DecideEgress(ctx, req); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "ok")
	return nil
}
