package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// runStatuses are the --status values of `runs ls`.
var runStatuses = map[string]plumbv1.RunStatus{
	"queued": plumbv1.RunStatus_RUN_STATUS_QUEUED, "running": plumbv1.RunStatus_RUN_STATUS_RUNNING,
	"interrupted": plumbv1.RunStatus_RUN_STATUS_INTERRUPTED, "completed": plumbv1.RunStatus_RUN_STATUS_COMPLETED,
	"failed": plumbv1.RunStatus_RUN_STATUS_FAILED, "cancelled": plumbv1.RunStatus_RUN_STATUS_CANCELLED,
	"max_iterations": plumbv1.RunStatus_RUN_STATUS_MAX_ITERATIONS, "deadline_exceeded": plumbv1.RunStatus_RUN_STATUS_DEADLINE_EXCEEDED,
}

// onBusyFlag parses --on-busy reject|enqueue|interrupt|rollback|steer.
func onBusyFlag(s string) (plumbv1.OnBusy, error) {
	switch s {
	case "":
		return plumbv1.OnBusy_ON_BUSY_UNSPECIFIED, nil
	case "reject":
		return plumbv1.OnBusy_ON_BUSY_REJECT, nil
	case "enqueue":
		return plumbv1.OnBusy_ON_BUSY_ENQUEUE, nil
	case "interrupt":
		return plumbv1.OnBusy_ON_BUSY_INTERRUPT, nil
	case "rollback":
		return plumbv1.OnBusy_ON_BUSY_ROLLBACK, nil
	case "steer":
		return plumbv1.OnBusy_ON_BUSY_STEER, nil
	}
	return 0, fmt.Errorf("--on-busy %q: want reject, enqueue, interrupt, rollback or steer", s)
}

// runs runs `agentctl runs get|ls|wait|cancel`.
func (a *agentCmd) runs(ctx context.Context, args []string) error {
	fs := newFlags("runs")
	jsonOut := fs.Bool("json", false, "print protojson")
	thread := fs.String("thread", "", "ls: only this thread's runs; get: the run's thread")
	status := fs.String("status", "", "ls: only runs with this status")
	limit := fs.Int("limit", 0, "ls: at most this many runs (0 = every page)")
	wait := fs.Duration("wait", 30*time.Second, "wait: how long to wait at most")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return errors.New("runs: want get RUN_ID, ls, wait RUN_ID or cancel RUN_ID")
	}
	switch verb := pos[0]; {
	case verb == "get" && len(pos) == 2:
		uctx, cancel := a.unary(ctx)
		defer cancel()
		resp, err := a.c.GetRun(uctx, &plumbv1.GetRunRequest{RunId: pos[1], ThreadId: *thread})
		if err != nil {
			return rpcError(err)
		}
		if *jsonOut {
			return printJSON(a.sio.out, resp)
		}
		printRun(a.sio.out, resp.GetRun())
		return nil
	case verb == "cancel" && len(pos) == 2:
		uctx, cancel := a.unary(ctx)
		defer cancel()
		resp, err := a.c.CancelRun(uctx, &plumbv1.CancelRunRequest{RunId: pos[1]})
		if err != nil {
			return rpcError(err)
		}
		if *jsonOut {
			return printJSON(a.sio.out, resp)
		}
		printRun(a.sio.out, resp.GetRun())
		return nil
	case verb == "wait" && len(pos) == 2:
		// The call may last as long as the wait, plus the usual timeout.
		wctx, cancel := context.WithTimeout(ctx, *wait+a.timeout)
		defer cancel()
		resp, err := a.c.WaitRun(wctx, &plumbv1.WaitRunRequest{RunId: pos[1], Timeout: durationpb.New(*wait)})
		if err != nil {
			return rpcError(err)
		}
		if *jsonOut {
			if err := printJSON(a.sio.out, resp); err != nil {
				return err
			}
		} else {
			printRun(a.sio.out, resp.GetRun())
		}
		if resp.GetTimedOut() {
			return errors.New("runs wait: the run has not ended yet")
		}
		return nil
	case verb == "ls" && len(pos) == 1:
		req := &plumbv1.ListRunsRequest{ThreadId: *thread}
		if *status != "" {
			st, ok := runStatuses[strings.ToLower(*status)]
			if !ok {
				return fmt.Errorf("runs ls: unknown --status %q", *status)
			}
			req.Status = st
		}
		var all []*plumbv1.RunRecord
		for {
			uctx, cancel := a.unary(ctx)
			resp, err := a.c.ListRuns(uctx, req)
			cancel()
			if err != nil {
				return rpcError(err)
			}
			all = append(all, resp.GetRuns()...)
			if resp.GetNextPageToken() == "" || (*limit > 0 && len(all) >= *limit) {
				break
			}
			req.PageToken = resp.GetNextPageToken()
		}
		if *limit > 0 && len(all) > *limit {
			all = all[:*limit]
		}
		if *jsonOut {
			return printJSON(a.sio.out, &plumbv1.ListRunsResponse{Runs: all})
		}
		tw := tabwriter.NewWriter(a.sio.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN\tTHREAD\tSTATUS\tCREATED\tHOLDER\tTOKENS")
		for _, r := range all {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", r.GetRunId(), r.GetThreadId(), runStatusName(r.GetStatus()),
				localTime(r.GetCreatedAt()), r.GetHolder(), r.GetUsage().GetTotalTokens())
		}
		return tw.Flush()
	}
	return fmt.Errorf("runs: unexpected %q (want get RUN_ID, ls, or wait RUN_ID)", strings.Join(pos, " "))
}

// printRun prints one run record.
func printRun(w io.Writer, r *plumbv1.RunRecord) {
	fmt.Fprintf(w, "run      %s\nthread   %s\nstatus   %s\ncreated  %s\nstarted  %s\nfinished %s\n",
		r.GetRunId(), r.GetThreadId(), runStatusName(r.GetStatus()), localTime(r.GetCreatedAt()), localTime(r.GetStartedAt()), localTime(r.GetFinishedAt()))
	if r.GetHolder() != "" {
		fmt.Fprintf(w, "holder   %s\n", r.GetHolder())
	}
	fmt.Fprintf(w, "tokens   %d\n", r.GetUsage().GetTotalTokens())
	if e := r.GetError(); e != nil {
		fmt.Fprintf(w, "error    %s: %s\n", e.GetCode(), e.GetMessage())
	}
	if r.GetFinalText() != "" {
		fmt.Fprintf(w, "\n%s\n", r.GetFinalText())
	}
}

func runStatusName(s plumbv1.RunStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "RUN_STATUS_"))
}
