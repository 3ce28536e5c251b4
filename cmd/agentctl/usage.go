package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// usageGroups are the --by values of `agentctl usage`.
var usageGroups = map[string]plumbv1.UsageGroupBy{
	"": plumbv1.UsageGroupBy_USAGE_GROUP_BY_UNSPECIFIED, "thread": plumbv1.UsageGroupBy_USAGE_GROUP_BY_THREAD,
	"run": plumbv1.UsageGroupBy_USAGE_GROUP_BY_RUN, "day": plumbv1.UsageGroupBy_USAGE_GROUP_BY_DAY,
}

// usage runs `agentctl usage [--since D | --from T] [--to T] [--by thread|run|day]`.
func (a *agentCmd) usage(ctx context.Context, args []string) error {
	fs := newFlags("usage")
	jsonOut := fs.Bool("json", false, "print protojson")
	since := fs.Duration("since", 24*time.Hour, "the range starts this long ago (unless --from)")
	from := fs.String("from", "", "start of the range (RFC 3339)")
	to := fs.String("to", "", "end of the range (RFC 3339; default now)")
	by := fs.String("by", "", "group by thread, run or day (default: one total)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return errors.New("usage: takes flags only")
	}
	g, ok := usageGroups[*by]
	if !ok {
		return fmt.Errorf("usage: unknown --by %q: want thread, run or day", *by)
	}
	req := &plumbv1.GetUsageRequest{GroupBy: g, From: timestamppb.New(time.Now().Add(-*since))}
	if *from != "" {
		t, err := time.Parse(time.RFC3339, *from)
		if err != nil {
			return fmt.Errorf("usage: --from: %w", err)
		}
		req.From = timestamppb.New(t)
	}
	if *to != "" {
		t, err := time.Parse(time.RFC3339, *to)
		if err != nil {
			return fmt.Errorf("usage: --to: %w", err)
		}
		req.To = timestamppb.New(t)
	}
	uctx, cancel := a.unary(ctx)
	defer cancel()
	resp, err := a.c.GetUsage(uctx, req)
	if err != nil {
		return rpcError(err)
	}
	if *jsonOut {
		return printJSON(a.sio.out, resp)
	}
	tw := tabwriter.NewWriter(a.sio.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tCALLS\tPROMPT\tCOMPLETION\tCACHED\tREASONING\tTOTAL")
	for _, r := range resp.GetRows() {
		u := r.GetUsage()
		key := r.GetKey()
		if key == "" {
			key = "total"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", key, r.GetModelCalls(), u.GetPromptTokens(), u.GetCompletionTokens(),
			u.GetCachedTokens(), u.GetReasoningTokens(), u.GetTotalTokens())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if secs := resp.GetSandboxSeconds(); secs > 0 {
		fmt.Fprintf(a.sio.out, "sandbox seconds: %.0f\n", secs)
	}
	if b := resp.GetStored(); b != nil {
		fmt.Fprintf(a.sio.out, "stored now: %d threads, %d bytes (messages %d, state %d, files %d, runs %d)\n", b.GetThreads(),
			b.GetMessages()+b.GetState()+b.GetFiles()+b.GetRuns(), b.GetMessages(), b.GetState(), b.GetFiles(), b.GetRuns())
	}
	return nil
}
