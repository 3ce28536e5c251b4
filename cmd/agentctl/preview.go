package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// preview runs "preview create|ls|rm" (AgentService preview RPCs).
func (a *agentCmd) preview(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(a.sio.out, agentUsage)
		return errors.New("no preview command given")
	}
	cmd, args := args[0], args[1:]
	fs := newFlags("preview " + cmd)
	jsonOut := fs.Bool("json", false, "print protojson")
	thread := fs.String("thread", "", "thread id")
	uctx, cancel := a.unary(ctx)
	defer cancel()
	switch cmd {
	case "create":
		port := fs.Int("port", 0, "port in the sandbox (1-65535)")
		ttl := fs.Duration("ttl", 0, "how long the URL works (default 1h, at most 24h)")
		if pos, err := parseArgs(fs, args); err != nil || len(pos) > 0 {
			return errors.Join(err, unexpected("preview create", pos))
		}
		req := &plumbv1.CreatePreviewRequest{ThreadId: *thread, Port: int32(min(max(*port, -1), 1<<16))} //nolint:gosec // clamped; the server checks the range
		if *ttl != 0 {
			req.Ttl = durationpb.New(*ttl)
		}
		resp, err := a.c.CreatePreview(uctx, req)
		if err != nil {
			return rpcError(err)
		}
		if *jsonOut {
			return printJSON(a.sio.out, resp)
		}
		fmt.Fprintf(a.sio.out, "%s\n(preview %s of port %d, until %s; anyone with the URL reaches the port)\n",
			resp.GetUrl(), resp.GetPreview().GetId(), resp.GetPreview().GetPort(), resp.GetPreview().GetExpireTime().AsTime().Local().Format(time.DateTime))
		return nil
	case "ls":
		if pos, err := parseArgs(fs, args); err != nil || len(pos) > 0 {
			return errors.Join(err, unexpected("preview ls", pos))
		}
		resp, err := a.c.ListPreviews(uctx, &plumbv1.ListPreviewsRequest{ThreadId: *thread})
		if err != nil {
			return rpcError(err)
		}
		if *jsonOut {
			return printJSON(a.sio.out, resp)
		}
		tw := tabwriter.NewWriter(a.sio.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tPORT\tEXPIRES\tREVOKED")
		for _, p := range resp.GetPreviews() {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%v\n", p.GetId(), p.GetPort(), p.GetExpireTime().AsTime().Local().Format(time.DateTime), p.GetRevoked())
		}
		return tw.Flush()
	case "rm":
		pos, err := parseArgs(fs, args)
		if err != nil {
			return err
		}
		if len(pos) == 0 {
			return errors.New("preview rm: missing preview id")
		}
		for _, id := range pos {
			if _, err := a.c.RevokePreview(uctx, &plumbv1.RevokePreviewRequest{PreviewId: id}); err != nil {
				return fmt.Errorf("rm %s: %w", id, rpcError(err))
			}
			fmt.Fprintln(a.sio.out, id)
		}
		return nil
	default:
		fmt.Fprint(a.sio.out, agentUsage)
		return fmt.Errorf("unknown preview command %q", cmd)
	}
}

// unexpected is the error of positional arguments a command takes none
// of (nil when there are none).
func unexpected(cmd string, pos []string) error {
	if len(pos) == 0 {
		return nil
	}
	return fmt.Errorf("%s: unexpected %q", cmd, pos[0])
}
