package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// scheduleFlags are the flags of "schedules create" and "schedules
// update" (an update replaces every field).
type scheduleFlags struct {
	cron, tz, catchUp, agent, thread, model string
	every, runTimeout                       time.Duration
	maxIter                                 int
	paused                                  bool
	labels                                  multi
}

func (f *scheduleFlags) register(fs *flag.FlagSet) {
	f.labels = multi{}
	fs.StringVar(&f.cron, "cron", "", "five-field cron expression (or @daily, @hourly, ...)")
	fs.StringVar(&f.tz, "tz", "", "IANA time zone of --cron (default UTC)")
	fs.DurationVar(&f.every, "every", 0, "fixed interval instead of --cron (at least 1s)")
	fs.StringVar(&f.catchUp, "catch-up", "", "missed ticks after downtime: fire_once (default) or skip")
	fs.BoolVar(&f.paused, "paused", false, "create (or leave) it paused")
	fs.StringVar(&f.agent, "agent", "", "agent profile")
	fs.StringVar(&f.thread, "thread", "", "thread each fire runs on (default: a new thread per fire)")
	fs.StringVar(&f.model, "model", "", "model key")
	fs.Var(f.labels, "label", "thread label k=v (repeatable)")
	fs.IntVar(&f.maxIter, "max-iterations", 0, "lower cap on model calls")
	fs.DurationVar(&f.runTimeout, "run-timeout", 0, "lower wall-clock cap of each run")
}

// request returns the timing, policy and run of the flags and prompt.
func (f *scheduleFlags) request(prompt string) (string, string, *durationpb.Duration, plumbv1.ScheduleCatchUp, *plumbv1.RunRequest, error) {
	var catchUp plumbv1.ScheduleCatchUp
	switch f.catchUp {
	case "":
	case "fire_once":
		catchUp = plumbv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_FIRE_ONCE
	case "skip":
		catchUp = plumbv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_SKIP
	default:
		return "", "", nil, 0, nil, fmt.Errorf("--catch-up %q: want fire_once or skip", f.catchUp)
	}
	var every *durationpb.Duration
	if f.every != 0 {
		every = durationpb.New(f.every)
	}
	run := &plumbv1.RunRequest{
		ThreadId: f.thread, Agent: f.agent, Model: f.model, Input: []*plumbv1.InputMessage{{Content: prompt}},
		MaxIterations: int32(min(max(f.maxIter, -1), 1<<30)), //nolint:gosec // clamped; the server checks the range
	}
	if len(f.labels) > 0 {
		run.Metadata = f.labels
	}
	if f.runTimeout != 0 {
		run.Timeout = durationpb.New(f.runTimeout)
	}
	return f.cron, f.tz, every, catchUp, run, nil
}

// schedules runs "schedules create|update|ls|show|pause|resume|rm|fires"
// (AgentService schedule RPCs).
func (a *agentCmd) schedules(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(a.sio.out, agentUsage)
		return errors.New("no schedules command given")
	}
	cmd, args := args[0], args[1:]
	fs := newFlags("schedules " + cmd)
	jsonOut := fs.Bool("json", false, "print protojson")
	uctx, cancel := a.unary(ctx)
	defer cancel()
	switch cmd {
	case "create", "update":
		var f scheduleFlags
		f.register(fs)
		pos, err := parseArgs(fs, args)
		if err != nil {
			return err
		}
		id := ""
		if cmd == "update" {
			if len(pos) == 0 {
				return errors.New("schedules update: missing schedule id")
			}
			id, pos = pos[0], pos[1:]
		}
		prompt := strings.Join(pos, " ")
		if strings.TrimSpace(prompt) == "" {
			return fmt.Errorf("schedules %s: missing prompt", cmd)
		}
		cron, tz, every, catchUp, run, err := f.request(prompt)
		if err != nil {
			return err
		}
		var sc *plumbv1.Schedule
		if cmd == "create" {
			resp, err := a.c.CreateSchedule(uctx, &plumbv1.CreateScheduleRequest{Cron: cron, TimeZone: tz, Interval: every, CatchUp: catchUp, Run: run, Paused: f.paused})
			if err != nil {
				return rpcError(err)
			}
			sc = resp.GetSchedule()
		} else {
			resp, err := a.c.UpdateSchedule(uctx, &plumbv1.UpdateScheduleRequest{ScheduleId: id, Cron: cron, TimeZone: tz, Interval: every, CatchUp: catchUp, Run: run, Paused: f.paused})
			if err != nil {
				return rpcError(err)
			}
			sc = resp.GetSchedule()
		}
		return a.printSchedule(sc, *jsonOut)
	case "ls":
		if pos, err := parseArgs(fs, args); err != nil || len(pos) > 0 {
			return errors.Join(err, unexpected("schedules ls", pos))
		}
		tw := tabwriter.NewWriter(a.sio.out, 0, 4, 2, ' ', 0)
		if !*jsonOut {
			fmt.Fprintln(tw, "ID\tWHEN\tNEXT FIRE\tTHREAD\tLAST RUN\tLAST ERROR")
		}
		tok := ""
		for {
			resp, err := a.c.ListSchedules(uctx, &plumbv1.ListSchedulesRequest{PageToken: tok})
			if err != nil {
				return rpcError(err)
			}
			if *jsonOut {
				if err := printJSON(a.sio.out, resp); err != nil {
					return err
				}
			}
			for _, sc := range resp.GetSchedules() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sc.GetId(), timing(sc), nextFire(sc), orDash(sc.GetRun().GetThreadId()),
					orDash(sc.GetLastRunId()), orDash(sc.GetLastError()))
			}
			if tok = resp.GetNextPageToken(); tok == "" {
				break
			}
		}
		if *jsonOut {
			return nil
		}
		return tw.Flush()
	case "show", "pause", "resume":
		pos, err := parseArgs(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return fmt.Errorf("schedules %s: want one schedule id", cmd)
		}
		var sc *plumbv1.Schedule
		switch cmd {
		case "show":
			resp, err := a.c.GetSchedule(uctx, &plumbv1.GetScheduleRequest{ScheduleId: pos[0]})
			if err != nil {
				return rpcError(err)
			}
			sc = resp.GetSchedule()
		case "pause":
			resp, err := a.c.PauseSchedule(uctx, &plumbv1.PauseScheduleRequest{ScheduleId: pos[0]})
			if err != nil {
				return rpcError(err)
			}
			sc = resp.GetSchedule()
		default:
			resp, err := a.c.ResumeSchedule(uctx, &plumbv1.ResumeScheduleRequest{ScheduleId: pos[0]})
			if err != nil {
				return rpcError(err)
			}
			sc = resp.GetSchedule()
		}
		return a.printSchedule(sc, *jsonOut)
	case "fires":
		limit := fs.Int("limit", 20, "how many of the newest fires")
		pos, err := parseArgs(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return errors.New("schedules fires: want one schedule id")
		}
		resp, err := a.c.ListScheduleFires(uctx, &plumbv1.ListScheduleFiresRequest{ScheduleId: pos[0], PageSize: int32(min(max(*limit, 0), 500))}) //nolint:gosec // clamped
		if err != nil {
			return rpcError(err)
		}
		if *jsonOut {
			return printJSON(a.sio.out, resp)
		}
		tw := tabwriter.NewWriter(a.sio.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TICK\tSTATUS\tREPLICA\tRUN\tTHREAD\tMISSED\tREASON")
		for _, f := range resp.GetFires() {
			status := strings.ToLower(strings.TrimPrefix(f.GetStatus().String(), "SCHEDULE_FIRE_STATUS_"))
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", localTime(f.GetTick()), status, f.GetReplica(), orDash(f.GetRunId()),
				orDash(f.GetThreadId()), f.GetMissed(), orDash(f.GetReason()))
		}
		return tw.Flush()
	case "rm":
		pos, err := parseArgs(fs, args)
		if err != nil {
			return err
		}
		if len(pos) == 0 {
			return errors.New("schedules rm: missing schedule id")
		}
		for _, id := range pos {
			if _, err := a.c.DeleteSchedule(uctx, &plumbv1.DeleteScheduleRequest{ScheduleId: id}); err != nil {
				return fmt.Errorf("rm %s: %w", id, rpcError(err))
			}
			fmt.Fprintln(a.sio.out, id)
		}
		return nil
	default:
		fmt.Fprint(a.sio.out, agentUsage)
		return fmt.Errorf("unknown schedules command %q", cmd)
	}
}

func (a *agentCmd) printSchedule(sc *plumbv1.Schedule, asJSON bool) error {
	if asJSON {
		return printJSON(a.sio.out, sc)
	}
	tw := tabwriter.NewWriter(a.sio.out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\n", sc.GetId())
	fmt.Fprintf(tw, "when\t%s\n", timing(sc))
	fmt.Fprintf(tw, "catch-up\t%s\n", strings.ToLower(strings.TrimPrefix(sc.GetCatchUp().String(), "SCHEDULE_CATCH_UP_")))
	fmt.Fprintf(tw, "next fire\t%s\n", nextFire(sc))
	fmt.Fprintf(tw, "thread\t%s\n", cmpOr(sc.GetRun().GetThreadId(), "(a new thread per fire)"))
	if sc.GetLastFireTime() != nil {
		fmt.Fprintf(tw, "last fire\t%s\n", localTime(sc.GetLastFireTime()))
		fmt.Fprintf(tw, "last run\t%s on %s\n", orDash(sc.GetLastRunId()), orDash(sc.GetLastThreadId()))
	}
	if sc.GetLastError() != "" {
		fmt.Fprintf(tw, "last error\t%s\n", sc.GetLastError())
	}
	return tw.Flush()
}

func timing(sc *plumbv1.Schedule) string {
	if sc.GetInterval() != nil {
		return "every " + sc.GetInterval().AsDuration().String()
	}
	return sc.GetCron() + " (" + cmpOr(sc.GetTimeZone(), "UTC") + ")"
}

func nextFire(sc *plumbv1.Schedule) string {
	if sc.GetPaused() {
		return "paused"
	}
	return localTime(sc.GetNextFireTime())
}

// localTime is how agentctl tables show a time: local, to the second, "-"
// when not set.
func localTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().Local().Format(time.DateTime)
}

func orDash(s string) string { return cmpOr(s, "-") }

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
