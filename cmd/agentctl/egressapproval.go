package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

// egress runs "egress pending|decide|grants|revoke" (AgentService egress
// approval RPCs).
func (a *agentCmd) egress(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(a.sio.out, agentUsage)
		return errors.New("no egress command given")
	}
	cmd, args := args[0], args[1:]
	fs := newFlags("egress " + cmd)
	jsonOut := fs.Bool("json", false, "print protojson")
	uctx, cancel := a.unary(ctx)
	defer cancel()
	switch cmd {
	case "pending":
		pos, err := parseArgs(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return errors.New("egress pending: want THREAD_ID")
		}
		resp, err := a.c.GetThread(uctx, &plumbv1.GetThreadRequest{ThreadId: pos[0]})
		if err != nil {
			return rpcError(err)
		}
		if *jsonOut {
			return printJSON(a.sio.out, &plumbv1.Thread{Id: resp.GetThread().GetId(), PendingEgress: resp.GetThread().GetPendingEgress()})
		}
		tw := tabwriter.NewWriter(a.sio.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "REQUEST\tDESTINATION\tTOOL CALL\tAGENT PATH\tSINCE")
		for _, p := range resp.GetThread().GetPendingEgress() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.GetRequestId(), hostPort(p.GetHost(), p.GetPort()), p.GetToolCallId(), p.GetAgentPath(),
				p.GetCreateTime().AsTime().Local().Format(time.DateTime))
		}
		return tw.Flush()
	case "decide":
		scope := fs.String("scope", "run", "how far an approval reaches: run, thread or agent")
		reason := fs.String("reason", "", "told to the box with a rejection")
		pos, err := parseArgs(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 3 {
			return errors.New("egress decide: want THREAD_ID REQUEST_ID approve|reject")
		}
		req := &plumbv1.DecideThreadEgressRequest{ThreadId: pos[0], RequestId: pos[1], Reason: *reason}
		switch pos[2] {
		case "approve":
			req.Decision = plumbv1.EgressDecisionType_EGRESS_DECISION_TYPE_APPROVE
			v, ok := plumbv1.EgressGrantScope_value["EGRESS_GRANT_SCOPE_"+strings.ToUpper(*scope)]
			if !ok || v == 0 {
				return fmt.Errorf("egress decide: --scope %q: want run, thread or agent", *scope)
			}
			req.Scope = plumbv1.EgressGrantScope(v)
		case "reject":
			req.Decision = plumbv1.EgressDecisionType_EGRESS_DECISION_TYPE_REJECT
		default:
			return fmt.Errorf("egress decide: %q: want approve or reject", pos[2])
		}
		resp, err := a.c.DecideThreadEgress(uctx, req)
		if err != nil {
			return rpcError(err)
		}
		if *jsonOut {
			return printJSON(a.sio.out, resp)
		}
		if g := resp.GetGrant(); g != nil {
			fmt.Fprintf(a.sio.out, "approved %s for the %s (request %s)\n", hostPort(g.GetHost(), g.GetPort()), strings.ToLower(*scope), g.GetRequestId())
			return nil
		}
		fmt.Fprintf(a.sio.out, "rejected request %s\n", pos[1])
		return nil
	case "grants":
		thread := fs.String("thread", "", "the thread's approvals")
		agentName := fs.String("agent", "", "the agent's approvals (any thread)")
		limit := fs.Int("limit", 0, "at most this many (default: all)")
		if pos, err := parseArgs(fs, args); err != nil || len(pos) > 0 {
			return errors.Join(err, unexpected("egress grants", pos))
		}
		req := &plumbv1.ListEgressGrantsRequest{ThreadId: *thread, Agent: *agentName}
		var all []*plumbv1.EgressGrant
		for {
			resp, err := a.c.ListEgressGrants(uctx, req)
			if err != nil {
				return rpcError(err)
			}
			all = append(all, resp.GetGrants()...)
			if resp.GetNextPageToken() == "" || (*limit > 0 && len(all) >= *limit) {
				break
			}
			req.PageToken = resp.GetNextPageToken()
		}
		if *limit > 0 && len(all) > *limit {
			all = all[:*limit]
		}
		if *jsonOut {
			return printJSON(a.sio.out, &plumbv1.ListEgressGrantsResponse{Grants: all})
		}
		tw := tabwriter.NewWriter(a.sio.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "THREAD\tREQUEST\tDESTINATION\tSCOPE\tAPPROVED BY\tTOOL CALL\tAPPROVED\tREVOKED")
		for _, g := range all {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%v\n", g.GetThreadId(), g.GetRequestId(), hostPort(g.GetHost(), g.GetPort()),
				strings.ToLower(strings.TrimPrefix(g.GetScope().String(), "EGRESS_GRANT_SCOPE_")), g.GetApprovedBy(), g.GetToolCallId(),
				g.GetApproveTime().AsTime().Local().Format(time.DateTime), g.GetRevoked())
		}
		return tw.Flush()
	case "revoke":
		pos, err := parseArgs(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 2 {
			return errors.New("egress revoke: want THREAD_ID REQUEST_ID")
		}
		if _, err := a.c.RevokeEgressGrant(uctx, &plumbv1.RevokeEgressGrantRequest{ThreadId: pos[0], RequestId: pos[1]}); err != nil {
			return rpcError(err)
		}
		fmt.Fprintln(a.sio.out, pos[1])
		return nil
	default:
		fmt.Fprint(a.sio.out, agentUsage)
		return fmt.Errorf("unknown egress command %q", cmd)
	}
}

func hostPort(host string, port uint32) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}
