package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/cli/render"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

const agentUsage = `Usage:
  agentctl run [--agent NAME] [--thread ID] [--model KEY] [--label k=v]... [--file PATH=LOCALFILE]...
               [--max-iterations N] [--run-timeout D] [--detach] [--abandon-interrupt] [--webhook-url URL] [--json]
               [--on-busy reject|enqueue|interrupt|rollback|steer]
               [--approve-all | --reject-all[=MESSAGE] | --decisions FILE]
               [--client-tool NAME=COMMAND [--client-tool-spec NAME=FILE]]... [--client-tool-timeout D] PROMPT|-
  agentctl resume --thread ID [--interrupt ID] [--detach] [--json]
               [--approve-all | --reject-all[=MESSAGE] | --decisions FILE]
               [--client-tool NAME=COMMAND]... [--client-tool-timeout D]
  agentctl attach ID [--after N] [--json]
  agentctl cancel ID
  agentctl threads ls [--label k=v]... [--status idle|running|interrupted] [--limit N] [--json]
  agentctl threads show ID [--full] [--json]
  agentctl threads rm ID [--force]
  agentctl threads checkpoints ID [--json]
  agentctl threads fork ID [--checkpoint N] [--label k=v]... [--json]
  agentctl agents [--json]
  agentctl runs ls [--thread ID] [--status queued|running|interrupted|completed|failed|...] [--limit N] [--json]
  agentctl runs get RUN_ID [--thread ID] [--json]
  agentctl runs wait RUN_ID [--wait D] [--json]
  agentctl runs cancel RUN_ID [--json]
  agentctl preview create --thread ID --port N [--ttl D] [--json]
  agentctl preview ls --thread ID [--json]
  agentctl preview rm PREVIEW_ID...
  agentctl schedules create (--cron EXPR [--tz ZONE] | --every D) [--catch-up fire_once|skip] [--paused]
               [--thread ID] [--agent NAME] [--model KEY] [--label k=v]... [--max-iterations N]
               [--run-timeout D] [--json] PROMPT
  agentctl schedules update ID (same flags as create: every field is replaced) PROMPT
  agentctl schedules ls|show ID|pause ID|resume ID|rm ID... [--json]
  agentctl schedules fires ID [--limit N] [--json]
  agentctl egress pending THREAD_ID [--json]
  agentctl egress decide THREAD_ID REQUEST_ID approve|reject [--scope run|thread|agent] [--reason TEXT] [--json]
  agentctl egress grants (--thread ID | --agent NAME) [--limit N] [--json]
  agentctl egress revoke THREAD_ID REQUEST_ID
  agentctl webhooks rotate-key [--grace D] [--json]
  agentctl webhooks deliveries [--thread ID] [--run ID] [--status S] [--limit N] [--page-token T] [--json]

A run that stops for decisions asks for each call when stdin is a terminal;
otherwise it needs --approve-all, --reject-all or --decisions FILE (a JSON
list of {"tool_call_id", "agent_path", "type": approve|edit|reject|respond,
"args", "message", "is_error"}; an entry without tool_call_id answers every
call no other entry names), or it exits 3 and leaves the thread for
agentctl resume. Edits open $EDITOR when it is set.

--client-tool NAME=COMMAND declares tool NAME for the run and answers each
call by running COMMAND here, with the call's JSON arguments on stdin:
stdout (first 64 KiB) is the result; a non-zero exit or a timeout is an
error result with stderr (first 8 KiB). COMMAND is split into words like a
shell would (quotes and backslashes) but no shell runs it: write
sh -c '...' for pipes or variables. --client-tool-spec NAME=FILE gives the
tool's description and JSON Schema: {"description": "...", "parameters": {...}}.
`

// runAgent runs the AgentService commands.
func runAgent(ctx context.Context, ep endpoint, timeout time.Duration, cmd string, args []string, sio stdio) error {
	conn, err := ep.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	a := &agentCmd{c: plumbv1.NewAgentServiceClient(conn), timeout: timeout, sio: sio}
	err = a.dispatch(ctx, cmd, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(sio.out, agentUsage)
	}
	return err
}

func (a *agentCmd) dispatch(ctx context.Context, cmd string, args []string) error {
	switch cmd {
	case "run":
		return a.run(ctx, args)
	case "resume":
		return a.resume(ctx, args)
	case "attach":
		return a.attach(ctx, args)
	case "cancel":
		return a.cancel(ctx, args)
	case "threads":
		return a.threads(ctx, args)
	case "agents":
		return a.agents(ctx, args)
	case "secrets":
		return a.secrets(ctx, args)
	case "skills":
		return a.skills(ctx, args)
	case "preview":
		return a.preview(ctx, args)
	case "schedules":
		return a.schedules(ctx, args)
	case "runs":
		return a.runs(ctx, args)
	case "egress":
		return a.egress(ctx, args)
	case "webhooks":
		return a.webhooks(ctx, args)
	case "usage":
		return a.usage(ctx, args)
	}
	return fmt.Errorf("unknown command %q", cmd)
}

// agentCmd holds what every AgentService command needs.
type agentCmd struct {
	c       plumbv1.AgentServiceClient
	timeout time.Duration // for unary calls
	sio     stdio
}

// unary bounds a unary call by --timeout.
func (a *agentCmd) unary(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.timeout)
}

// newFlags returns a command's flag set; errors and help go to the caller.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("agentctl "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseArgs parses flags wherever they appear among the positional
// arguments ("agentctl threads show ID --full"); everything after "--" is
// positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// optString is a flag usable bare (--reject-all) or with a value
// (--reject-all=MESSAGE).
type optString struct {
	set   bool
	value string
}

func (o *optString) String() string { return o.value }

func (o *optString) Set(s string) error {
	o.set = true
	if s != "true" {
		o.value = s
	}
	return nil
}

// IsBoolFlag lets the flag package accept the bare form.
func (o *optString) IsBoolFlag() bool { return true }

// files is a repeatable --file PATH=LOCALFILE flag; it reads each local
// file when the flag is parsed.
type files map[string]string

func (f files) String() string { return "" }

func (f files) Set(s string) error {
	path, local, ok := strings.Cut(s, "=")
	if !ok || path == "" || local == "" {
		return fmt.Errorf("want PATH=LOCALFILE, got %q", s)
	}
	data, err := os.ReadFile(local)
	if err != nil {
		return err
	}
	f[path] = string(data)
	return nil
}

// decisionFlags are the non-interactive answers shared by run and resume.
type decisionFlags struct {
	approveAll bool
	rejectAll  optString
	file       string
}

func (d *decisionFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&d.approveAll, "approve-all", false, "approve every call that waits for a decision")
	fs.Var(&d.rejectAll, "reject-all", "reject every call that waits for a decision, with an optional reason")
	fs.StringVar(&d.file, "decisions", "", "answer interrupts from a JSON file (- for stdin)")
}

// decider picks how interrupts get answered: the flags, else a human at
// the terminal, else nobody (nil). stdinUsed says the prompt came from
// stdin, so stdin holds no answers.
func (d *decisionFlags) decider(sio stdio, term io.Writer, stdinUsed bool) (decider, error) {
	n := 0
	for _, set := range []bool{d.approveAll, d.rejectAll.set, d.file != ""} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return nil, errors.New("use only one of --approve-all, --reject-all and --decisions")
	case d.approveAll:
		return blanket{typ: plumbv1.DecisionType_DECISION_TYPE_APPROVE}, nil
	case d.rejectAll.set:
		return blanket{typ: plumbv1.DecisionType_DECISION_TYPE_REJECT, message: d.rejectAll.value}, nil
	case d.file != "":
		if d.file == "-" && stdinUsed {
			return nil, errors.New("the prompt and the decisions cannot both come from stdin")
		}
		return loadDecisions(d.file, sio.in)
	case sio.terminal && !stdinUsed:
		return &prompter{lines: newLineReader(sio.in), out: term, editor: sio.getenv("EDITOR"), edit: sio.edit}, nil
	}
	return nil, nil
}

// runOptions is a parsed run command line.
type runOptions struct {
	req       *plumbv1.RunRequest
	json      bool
	decisions decisionFlags
	stdinUsed bool
	tools     *clientTools
}

// parseRun turns run's command line into a RunRequest, reading the
// prompt from stdin when it is "-".
func parseRun(args []string, stdin io.Reader) (*runOptions, error) {
	fs := newFlags("run")
	o := &runOptions{req: &plumbv1.RunRequest{}, tools: newClientTools()}
	labels, fls := multi{}, files{}
	fs.StringVar(&o.req.Agent, "agent", "", "agent profile")
	fs.StringVar(&o.req.ThreadId, "thread", "", "thread to continue (default: a new one)")
	fs.StringVar(&o.req.Model, "model", "", "model key")
	fs.Var(labels, "label", "thread label k=v (repeatable)")
	fs.Var(fls, "file", "seed a State file PATH=LOCALFILE (repeatable)")
	maxIter := fs.Int("max-iterations", 0, "lower cap on model calls")
	runTimeout := fs.Duration("run-timeout", 0, "lower wall-clock cap of the run")
	fs.BoolVar(&o.req.Detach, "detach", false, "keep the run going when agentctl stops")
	fs.BoolVar(&o.req.AbandonInterrupt, "abandon-interrupt", false, "drop the thread's pending interrupt")
	fs.StringVar(&o.req.WebhookUrl, "webhook-url", "", "URL told when the run ends or pauses (docs/webhooks.md)")
	fs.BoolVar(&o.json, "json", false, "print each event as one protojson line")
	onBusy := fs.String("on-busy", "", "when the thread is busy: reject, enqueue, interrupt, rollback or steer (default: the agent's)")
	o.decisions.register(fs)
	o.tools.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if err := o.tools.resolve(); err != nil {
		return nil, err
	}
	o.req.ClientTools = o.tools.declare()
	if len(pos) == 0 {
		return nil, errors.New("run: missing prompt (- reads it from stdin)")
	}
	prompt := strings.Join(pos, " ")
	if len(pos) == 1 && pos[0] == "-" {
		data, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("read prompt: %w", err)
		}
		prompt, o.stdinUsed = string(data), true
	}
	if strings.TrimSpace(prompt) == "" {
		return nil, errors.New("run: the prompt is empty")
	}
	if *maxIter < 0 || *runTimeout < 0 {
		return nil, errors.New("run: limits must not be negative")
	}
	if o.req.OnBusy, err = onBusyFlag(*onBusy); err != nil {
		return nil, err
	}
	o.req.Input = []*plumbv1.InputMessage{{Content: prompt}}
	o.req.MaxIterations = int32(*maxIter)
	if *runTimeout > 0 {
		o.req.Timeout = durationpb.New(*runTimeout)
	}
	if len(labels) > 0 {
		o.req.Metadata = labels
	}
	if len(fls) > 0 {
		o.req.Files = fls
	}
	return o, nil
}

func (a *agentCmd) run(ctx context.Context, args []string) error {
	o, err := parseRun(args, a.sio.in)
	if err != nil {
		return err
	}
	v := newView(a.sio, o.json)
	dec, err := o.decisions.decider(a.sio, v.term, o.stdinUsed)
	if err != nil {
		return err
	}
	s := &session{c: a.c, v: v, dec: o.tools.decider(dec), detach: o.req.Detach}
	var queued *plumbv1.Event
	err = s.drive(ctx, func(ctx context.Context) (recvFunc, error) {
		st, err := a.c.Run(ctx, o.req)
		if err != nil {
			return nil, err
		}
		recv := events(st)
		return func() (*plumbv1.Event, error) {
			ev, err := recv()
			if err == nil && ev.GetRunQueued() != nil {
				// The run waits behind the thread's current one: its
				// stream has nothing more.
				queued = ev
				return nil, io.EOF
			}
			return ev, err
		}, nil
	})
	if queued == nil {
		return err
	}
	if o.json {
		return printJSON(a.sio.out, queued)
	}
	r := queued.GetRunQueued().GetRun()
	fmt.Fprintf(a.sio.out, "run %s queued on thread %s behind its current run; follow it with\n  agentctl runs wait %s\n", r.GetRunId(), r.GetThreadId(), r.GetRunId())
	return nil
}

func (a *agentCmd) resume(ctx context.Context, args []string) error {
	fs := newFlags("resume")
	thread := fs.String("thread", "", "thread id")
	interrupt := fs.String("interrupt", "", "interrupt id (default: the pending one)")
	detach := fs.Bool("detach", false, "keep the run going when agentctl stops")
	jsonOut := fs.Bool("json", false, "print each event as one protojson line")
	var df decisionFlags
	df.register(fs)
	ct := newClientTools()
	ct.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := ct.resolve(); err != nil {
		return err
	}
	if *thread == "" && len(pos) == 1 {
		*thread, pos = pos[0], nil
	}
	if *thread == "" || len(pos) > 0 {
		return errors.New("resume: want --thread ID")
	}
	v := newView(a.sio, *jsonOut)
	dec, err := df.decider(a.sio, v.term, false)
	if err != nil {
		return err
	}
	uctx, cancel := a.unary(ctx)
	resp, err := a.c.GetThread(uctx, &plumbv1.GetThreadRequest{ThreadId: *thread})
	cancel()
	if err != nil {
		return rpcError(err)
	}
	in := resp.GetThread().GetPendingInterrupt()
	switch {
	case in == nil:
		return fmt.Errorf("thread %s has no pending interrupt", *thread)
	case *interrupt != "" && *interrupt != in.GetInterruptId():
		return fmt.Errorf("interrupt %s is not pending (current: %s)", *interrupt, in.GetInterruptId())
	}
	s := &session{c: a.c, v: v, dec: ct.decider(dec), detach: *detach}
	open, err := s.answer(ctx, *thread, in)
	if err != nil {
		return err
	}
	return s.drive(ctx, open)
}

func (a *agentCmd) attach(ctx context.Context, args []string) error {
	fs := newFlags("attach")
	after := fs.Uint64("after", 0, "replay events after this sequence number")
	jsonOut := fs.Bool("json", false, "print each event as one protojson line")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("attach: want one thread id")
	}
	s := &session{c: a.c, v: newView(a.sio, *jsonOut), detach: true}
	return s.drive(ctx, func(ctx context.Context) (recvFunc, error) {
		st, err := a.c.Attach(ctx, &plumbv1.AttachRequest{ThreadId: pos[0], AfterSequence: *after})
		if err != nil {
			return nil, err
		}
		return events(st), nil
	})
}

func (a *agentCmd) cancel(ctx context.Context, args []string) error {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		return errors.New("cancel: want one thread id")
	}
	uctx, cancel := a.unary(ctx)
	defer cancel()
	resp, err := a.c.Cancel(uctx, &plumbv1.CancelRequest{ThreadId: args[0]})
	if err != nil {
		return rpcError(err)
	}
	a.cancelledQueue(resp)
	if !resp.GetWasRunning() {
		fmt.Fprintf(a.sio.out, "thread %s has no active run\n", args[0])
		return nil
	}
	fmt.Fprintf(a.sio.out, "cancelled run %s\n", resp.GetRunId())
	return nil
}

// cancelledQueue prints the queued runs a Cancel ended.
func (a *agentCmd) cancelledQueue(resp *plumbv1.CancelResponse) {
	for _, id := range resp.GetCancelledQueuedRunIds() {
		fmt.Fprintf(a.sio.out, "cancelled queued run %s\n", id)
	}
}

func (a *agentCmd) threads(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(a.sio.out, agentUsage)
		return errors.New("no threads command given")
	}
	cmd, args := args[0], args[1:]
	fs := newFlags("threads " + cmd)
	jsonOut := fs.Bool("json", false, "print protojson")
	switch cmd {
	case "ls":
		labels := multi{}
		fs.Var(labels, "label", "label filter k=v (repeatable)")
		st := fs.String("status", "", "idle, running or interrupted")
		limit := fs.Int("limit", 50, "most threads to list (0 = all)")
		pos, err := parseArgs(fs, args)
		if err != nil {
			return err
		}
		if len(pos) > 0 {
			return fmt.Errorf("threads ls: unexpected %q", pos[0])
		}
		req, err := listRequest(labels, *st, *limit)
		if err != nil {
			return err
		}
		threads, err := a.listThreads(ctx, req, *limit)
		if err != nil {
			return err
		}
		if *jsonOut {
			return printJSON(a.sio.out, &plumbv1.ListThreadsResponse{Threads: threads})
		}
		return render.Threads(a.sio.out, threads, time.Local)
	case "show":
		full := fs.Bool("full", false, "add the message log, State files and checkpoints")
		pos, err := parseArgs(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return errors.New("threads show: want one thread id")
		}
		req := &plumbv1.GetThreadRequest{ThreadId: pos[0], View: plumbv1.ThreadView_THREAD_VIEW_BASIC}
		if *full {
			req.View = plumbv1.ThreadView_THREAD_VIEW_FULL
		}
		uctx, cancel := a.unary(ctx)
		defer cancel()
		resp, err := a.c.GetThread(uctx, req)
		if err != nil {
			return rpcError(err)
		}
		if *full {
			if err := a.restOfThread(ctx, resp.GetThread()); err != nil {
				return err
			}
		}
		if *jsonOut {
			return printJSON(a.sio.out, resp.GetThread())
		}
		return render.Thread(a.sio.out, resp.GetThread(), time.Local, 0)
	case "rm":
		force := fs.Bool("force", false, "cancel an active run first")
		pos, err := parseArgs(fs, args)
		if err != nil {
			return err
		}
		if len(pos) == 0 {
			return errors.New("threads rm: missing thread id")
		}
		for _, id := range pos {
			uctx, cancel := a.unary(ctx)
			_, err := a.c.DeleteThread(uctx, &plumbv1.DeleteThreadRequest{ThreadId: id, Force: *force})
			cancel()
			if err != nil {
				return fmt.Errorf("rm %s: %w", id, rpcError(err))
			}
			fmt.Fprintln(a.sio.out, id)
		}
		return nil
	case "checkpoints":
		pos, err := parseArgs(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return errors.New("threads checkpoints: want one thread id")
		}
		cps, err := pageRest(ctx, a, nil, "-", func(ctx context.Context, tok string) ([]*plumbv1.Checkpoint, string, error) {
			if tok == "-" {
				tok = ""
			}
			resp, err := a.c.ListCheckpoints(ctx, &plumbv1.ListCheckpointsRequest{ThreadId: pos[0], PageSize: 500, PageToken: tok})
			return resp.GetCheckpoints(), resp.GetNextPageToken(), err
		})
		if err != nil {
			return err
		}
		if *jsonOut {
			return printJSON(a.sio.out, &plumbv1.ListCheckpointsResponse{Checkpoints: cps})
		}
		for _, c := range cps {
			fmt.Fprintln(a.sio.out, render.CheckpointLine(c, time.Local))
		}
		return nil
	case "fork":
		checkpoint := fs.Int64("checkpoint", 0, "checkpoint id to fork at (0 = the latest)")
		labels := multi{}
		fs.Var(labels, "label", "label of the fork k=v, added to the thread's (repeatable)")
		pos, err := parseArgs(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return errors.New("threads fork: want one thread id")
		}
		uctx, cancel := a.unary(ctx)
		defer cancel()
		req := &plumbv1.ForkThreadRequest{ThreadId: pos[0], CheckpointId: *checkpoint}
		if len(labels) > 0 {
			req.Metadata = labels
		}
		resp, err := a.c.ForkThread(uctx, req)
		if err != nil {
			return rpcError(err)
		}
		if *jsonOut {
			return printJSON(a.sio.out, resp)
		}
		fmt.Fprintln(a.sio.out, resp.GetThread().GetId())
		if resp.GetSnapshotId() != "" {
			fmt.Fprintf(a.sio.err, "forked at checkpoint %d; its sandbox starts from snapshot %s (checkpoint %d)\n",
				resp.GetCheckpointId(), resp.GetSnapshotId(), resp.GetSnapshotCheckpointId())
		} else {
			fmt.Fprintf(a.sio.err, "forked at checkpoint %d; no workspace snapshot was taken by then: its sandbox starts empty\n", resp.GetCheckpointId())
		}
		return nil
	default:
		fmt.Fprint(a.sio.out, agentUsage)
		return fmt.Errorf("unknown threads command %q", cmd)
	}
}

// listRequest builds the first ListThreads request.
func listRequest(labels map[string]string, st string, limit int) (*plumbv1.ListThreadsRequest, error) {
	if limit < 0 {
		return nil, errors.New("--limit must not be negative")
	}
	req := &plumbv1.ListThreadsRequest{PageSize: 500}
	if limit > 0 && limit < 500 {
		req.PageSize = int32(limit)
	}
	if len(labels) > 0 {
		req.Labels = labels
	}
	if st != "" {
		v, ok := plumbv1.ThreadStatus_value["THREAD_STATUS_"+strings.ToUpper(st)]
		if !ok || v == 0 {
			return nil, fmt.Errorf("--status %q: want idle, running or interrupted", st)
		}
		req.Status = plumbv1.ThreadStatus(v)
	}
	return req, nil
}

// listThreads pages through ListThreads until limit threads (0 = all).
func (a *agentCmd) listThreads(ctx context.Context, req *plumbv1.ListThreadsRequest, limit int) ([]*plumbv1.Thread, error) {
	var out []*plumbv1.Thread
	for {
		uctx, cancel := a.unary(ctx)
		resp, err := a.c.ListThreads(uctx, req)
		cancel()
		if err != nil {
			return nil, rpcError(err)
		}
		out = append(out, resp.GetThreads()...)
		if limit > 0 && len(out) >= limit {
			return out[:limit], nil
		}
		if resp.GetNextPageToken() == "" {
			return out, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// restOfThread completes a FULL view whose lists stopped at the
// response's size budget: it pages through the rest of the message log,
// the State files and the checkpoints, and clears the page tokens.
func (a *agentCmd) restOfThread(ctx context.Context, th *plumbv1.Thread) error {
	id := th.GetId()
	var err error
	th.Messages, err = pageRest(ctx, a, th.Messages, th.GetMessagesNextPageToken(), func(ctx context.Context, tok string) ([]*plumbv1.ThreadMessage, string, error) {
		resp, err := a.c.ListMessages(ctx, &plumbv1.ListMessagesRequest{ThreadId: id, PageSize: 500, PageToken: tok})
		return resp.GetMessages(), resp.GetNextPageToken(), err
	})
	if err != nil {
		return fmt.Errorf("messages: %w", err)
	}
	th.Files, err = pageRest(ctx, a, th.Files, th.GetFilesNextPageToken(), func(ctx context.Context, tok string) ([]*plumbv1.StateFile, string, error) {
		resp, err := a.c.ListStateFiles(ctx, &plumbv1.ListStateFilesRequest{ThreadId: id, PageSize: 500, PageToken: tok})
		return resp.GetFiles(), resp.GetNextPageToken(), err
	})
	if err != nil {
		return fmt.Errorf("state files: %w", err)
	}
	th.Checkpoints, err = pageRest(ctx, a, th.Checkpoints, th.GetCheckpointsNextPageToken(), func(ctx context.Context, tok string) ([]*plumbv1.Checkpoint, string, error) {
		resp, err := a.c.ListCheckpoints(ctx, &plumbv1.ListCheckpointsRequest{ThreadId: id, PageSize: 500, PageToken: tok})
		return resp.GetCheckpoints(), resp.GetNextPageToken(), err
	})
	if err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	th.MessagesNextPageToken, th.FilesNextPageToken, th.CheckpointsNextPageToken = "", "", ""
	return nil
}

// pageRest appends to have the pages of a list from token tok on.
func pageRest[T any](ctx context.Context, a *agentCmd, have []T, tok string, list func(context.Context, string) ([]T, string, error)) ([]T, error) {
	for tok != "" {
		uctx, cancel := a.unary(ctx)
		page, next, err := list(uctx, tok)
		cancel()
		if err != nil {
			return nil, rpcError(err)
		}
		have, tok = append(have, page...), next
	}
	return have, nil
}

func (a *agentCmd) agents(ctx context.Context, args []string) error {
	fs := newFlags("agents")
	jsonOut := fs.Bool("json", false, "print protojson")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("agents: unexpected %q", pos[0])
	}
	uctx, cancel := a.unary(ctx)
	defer cancel()
	resp, err := a.c.ListAgents(uctx, &plumbv1.ListAgentsRequest{})
	if err != nil {
		return rpcError(err)
	}
	if *jsonOut {
		return printJSON(a.sio.out, resp)
	}
	return render.Agents(a.sio.out, resp.GetAgents(), 0)
}

func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// rpcError turns a gRPC status into a readable error, with a hint where
// agentctl knows the way out.
func rpcError(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.OK {
		return err
	}
	msg := fmt.Sprintf("%s (%s)", st.Message(), st.Code())
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok {
			continue
		}
		switch info.GetReason() {
		case "PENDING_INTERRUPT":
			msg += "; answer it with agentctl resume, or pass --abandon-interrupt to drop it"
		case "REPLAY_OUT_OF_RANGE":
			if n, err := strconv.ParseUint(info.GetMetadata()["oldest_sequence"], 10, 64); err == nil && n > 0 {
				msg += fmt.Sprintf("; agentctl attach --after %d follows the rest of the run", n-1)
			}
		}
	}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				msg += fmt.Sprintf("\n  %s: %s", v.GetField(), v.GetDescription())
			}
		}
	}
	return errors.New(msg)
}
