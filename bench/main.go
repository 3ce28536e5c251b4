package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// scenario is one self-contained measurement. run returns its rows; an
// error makes the scenario FAIL (rows it returned are kept), unless it is
// the harness' own deadline: slowness is reported, never a failure.
type scenario struct {
	ids []string
	// runtime is the OCI runtime its sandboxes use ("" = the engine's
	// default); see -runtimes.
	runtime string
	// unhardened runs it against unhardened sandboxes (rows B1-unhardened
	// etc.); see -unhardened.
	unhardened bool
	// budget is the time the scenario should take in full and quick mode.
	// Over it, the scenario is reported as slow (with its time); it is
	// stopped only at hardStop × budget (or the run's limit), and then
	// reported as slow too, with the rows it has.
	budget, quickBudget time.Duration
	// extra: the scenario's budget adds to the run's limit (B13-B19, the
	// durable-workspace, webhook and schedule rows, came after the 4 min
	// 30 s of the original scenarios).
	extra bool
	run   func(ctx context.Context, e *env) ([]Row, error)
}

// scenarios in report order.
var scenarios = []scenario{
	{ids: []string{"B1"}, budget: 75 * time.Second, quickBudget: 40 * time.Second, run: runB1},
	{ids: []string{"B2"}, budget: 30 * time.Second, quickBudget: 20 * time.Second, run: runB2},
	{ids: []string{"B3", "B4"}, budget: 60 * time.Second, quickBudget: 30 * time.Second, run: runB3},
	{ids: []string{"B7"}, budget: 60 * time.Second, quickBudget: 30 * time.Second, run: runB7},
	{ids: []string{"B8"}, budget: 75 * time.Second, quickBudget: 30 * time.Second, run: runB8},
	{ids: []string{"B10"}, budget: 40 * time.Second, quickBudget: 20 * time.Second, run: runB10},
	{ids: []string{"B11"}, budget: 60 * time.Second, quickBudget: 40 * time.Second, run: runB11},
	{ids: []string{"B12"}, budget: 90 * time.Second, quickBudget: 45 * time.Second, run: runB12},
	{ids: []string{"B13"}, budget: 90 * time.Second, quickBudget: 40 * time.Second, run: runB13, extra: true},
	{ids: []string{"B14"}, budget: 60 * time.Second, quickBudget: 30 * time.Second, run: runB14, extra: true},
	{ids: []string{"B15"}, budget: 90 * time.Second, quickBudget: 45 * time.Second, run: runB15, extra: true},
	{ids: []string{"B16"}, budget: 120 * time.Second, quickBudget: 60 * time.Second, run: runB16, extra: true},
	{ids: []string{"B17"}, budget: 90 * time.Second, quickBudget: 30 * time.Second, run: runB17, extra: true},
	{ids: []string{"B18"}, budget: 60 * time.Second, quickBudget: 20 * time.Second, run: runB18, extra: true},
	{ids: []string{"B19"}, budget: 30 * time.Second, quickBudget: 15 * time.Second, run: runB19, extra: true},
	{ids: []string{"B20"}, budget: 180 * time.Second, quickBudget: 90 * time.Second, run: runB20, extra: true},
	{ids: []string{"B5", "B6"}, budget: 90 * time.Second, quickBudget: 30 * time.Second, run: runB5B6},
	{ids: []string{"B9"}, budget: 110 * time.Second, quickBudget: 20 * time.Second, run: runB9},
}

// hardStop × a scenario's budget is when the harness stops it.
const hardStop = 3

// verdictSlow marks a scenario that took longer than its budget: the
// machine was loaded, which is not an error.
const verdictSlow = "slow"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the harness and returns the exit code: 0 when every selected
// scenario ran (targets may be missed) and nothing was left behind, 1
// otherwise, 2 for bad flags.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "smoke run (~1 minute): fewer samples, smaller data")
	only := fs.String("only", "", "comma-separated scenarios to run, e.g. B1,B2 (default all)")
	out := fs.String("out", "bench/results", "directory for the JSON results")
	verbose := fs.Bool("v", false, "log the worker and agent core at info level to stderr")
	runtimes := fs.String("runtimes", "auto", "comma-separated OCI runtimes to measure B1, B2 and B3 under, e.g. runc,runsc; rows of a runtime other than runc are named B1-runsc etc. and run right after the runc B1-B3, before the other scenarios; auto: runc, and runsc when the engine has it")
	unhardened := fs.Bool("unhardened", true, "also run B1 and B2 against unhardened sandboxes (no capability drop, no-new-privileges, seccomp, read-only root, ulimits or sandbox user), right after the hardened ones under each runtime: rows B1-unhardened etc., whose ratio is hardened ÷ unhardened p50, the cost of the hardening")
	noBudget := fs.Bool("no-budget", false, "run every scenario to its end, with no time budget (tests: a loaded machine is slow, not wrong)")
	cpuprofile := fs.String("cpuprofile", "", "write one CPU profile per scenario into this directory, as <scenario>.pprof (B1.pprof, B3.pprof, B1-unhardened.pprof…); the worker runs in this process, so a profile covers the worker, its gRPC server and the harness' client, not dockerd or the sandbox agent")
	channel := fs.String("channel", "", "the workers' sandbox channel: stdio (the default: the agent is PID 1 on the container's stdio, one process per box) or exec (init as PID 1, the agent started by docker exec)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch *channel {
	case "", sandbox.ChannelExec, sandbox.ChannelStdio:
	default:
		fmt.Fprintf(stderr, "bench: -channel %q: want %s or %s\n", *channel, sandbox.ChannelExec, sandbox.ChannelStdio)
		return 2
	}
	if *cpuprofile != "" {
		if err := os.MkdirAll(*cpuprofile, 0o755); err != nil {
			fmt.Fprintln(stderr, "bench: -cpuprofile:", err)
			return 2
		}
	}
	picked, err := pick(*only)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	if *runtimes == "auto" {
		*runtimes = autoRuntimes(ctx)
	}
	picked, err = withRuntimes(picked, *runtimes)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	if *unhardened {
		picked = withUnhardened(picked)
	}

	lg := zap.NewNop()
	if *verbose {
		cfg := zap.NewDevelopmentConfig()
		cfg.Level = zap.NewAtomicLevelAt(zapcore.InfoLevel)
		if l, err := cfg.Build(); err == nil {
			lg = l
		}
	}
	e := newEnv(*quick, lg, stderr)
	e.channel = *channel
	rep := &Report{Started: time.Now(), Command: strings.TrimSpace("go run ./bench " + strings.Join(args, " ")), Quick: *quick, OK: true}
	// The whole run stays under the 5 minutes of docs/benchmarks.md even if a scenario
	// hangs.
	limit := 4*time.Minute + 30*time.Second
	if *quick {
		limit = 2 * time.Minute
	}
	// Each extra runtime adds its B1-B3 budgets, and each unhardened
	// scenario its own.
	for _, sc := range picked {
		if sc.unhardened || sc.extra || (sc.runtime != "" && sc.runtime != "runc") {
			limit += map[bool]time.Duration{true: sc.quickBudget, false: sc.budget}[*quick]
		}
	}
	if *noBudget {
		limit = 0
	}
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}

	for _, sc := range picked {
		budget := sc.budget
		switch {
		case *noBudget:
			budget = 0
		case *quick:
			budget = sc.quickBudget
		}
		e.log("%s: start", strings.Join(sc.ids, "/")+suffix(sc))
		sctx, scancel := context.WithCancel(ctx)
		if budget > 0 {
			sctx, scancel = context.WithTimeout(ctx, hardStop*budget)
		}
		began := time.Now()
		e.runtime, e.unhardened = sc.runtime, sc.unhardened
		stopProfile, perr := startProfile(*cpuprofile, sc)
		if perr != nil {
			e.log("%v", perr)
			rep.OK = false
		}
		rows, err := safeRun(sctx, e, sc)
		took := time.Since(began)
		if perr := stopProfile(); perr != nil {
			e.log("%v", perr)
			rep.OK = false
		}
		stopped := errors.Is(sctx.Err(), context.DeadlineExceeded)
		scancel()
		for i := range rows {
			rows[i].Scenario += suffix(sc)
		}
		switch {
		case err != nil && stopped:
			// The harness' own deadline (the scenario's hard stop or the
			// run's limit) ended it: slow, not wrong.
			rows = append(rows, Row{Scenario: sc.ids[0] + suffix(sc), Name: "scenario slow", Verdict: verdictSlow,
				Notes: fmt.Sprintf("stopped after %v (budget %v, hard stop %v); the machine is loaded, rerun for the missing rows (cause: %v)",
					took.Round(time.Second), budget, hardStop*budget, err)})
		case err != nil:
			rep.OK = false
			rows = append(rows, Row{Scenario: sc.ids[0] + suffix(sc), Name: "scenario errored", Verdict: verdictFail, Error: err.Error()})
		case budget > 0 && took > budget:
			rows = append(rows, Row{Scenario: sc.ids[0] + suffix(sc), Name: "scenario slow", Verdict: verdictSlow,
				Notes: fmt.Sprintf("took %v, over its %v budget; the figures are complete", took.Round(time.Second), budget)})
		}
		if sc.unhardened {
			hardeningCost(rep.Rows, rows)
		}
		for _, r := range rows {
			e.log("%s %s: p50 %s %s", r.Scenario, r.Name, fmtVal(r.P50, r.Unit), r.Verdict)
		}
		rep.Rows = append(rep.Rows, rows...)
	}

	e.log("cleanup")
	rep.Leftovers = e.close()
	if len(rep.Leftovers) > 0 {
		rep.OK = false
		rep.Rows = append(rep.Rows, Row{Scenario: "cleanup", Name: "leftovers by label " + runLabel, Verdict: verdictFail,
			Error: fmt.Sprintf("%d left behind: %s", len(rep.Leftovers), strings.Join(rep.Leftovers, ", "))})
	} else if e.docker != nil {
		rep.Rows = append(rep.Rows, Row{Scenario: "cleanup", Name: "leftovers by label " + runLabel,
			Target: "0 containers, 0 volumes, 0 image tags of its workers", Verdict: verdictPass})
	}
	rep.Machine = e.machine()
	rep.Finished = time.Now()
	rep.Seconds = rep.Finished.Sub(rep.Started).Seconds()

	m := rep.Machine
	fmt.Fprintf(stdout, "## plumb benchmarks (%s)\n\n", map[bool]string{true: "quick", false: "full"}[*quick])
	engine := "Docker Engine not used"
	if m.EngineVersion != "" {
		engine = fmt.Sprintf("Docker Engine %s (API %s)", m.EngineVersion, m.EngineAPI)
	}
	fmt.Fprintf(stdout, "`%s` — %s, %d cores (%s), %d MiB, kernel %s, %s, %s, load average at start %s, %.0f s.\n\n",
		rep.Command, rep.Started.UTC().Format("2006-01-02 15:04 UTC"), m.Cores, m.CPU, m.MemoryMiB, m.Kernel, engine, m.GoVersion, m.LoadAvg, rep.Seconds)
	writeTable(stdout, rep.Rows)
	if p, err := writeJSON(*out, rep); err != nil {
		fmt.Fprintln(stderr, "bench: write results:", err)
		rep.OK = false
	} else {
		fmt.Fprintf(stdout, "\nJSON: %s\n", p)
	}
	if !rep.OK {
		return 1
	}
	return 0
}

// safeRun runs a scenario, turning a panic into an error.
func safeRun(ctx context.Context, e *env, sc scenario) (rows []Row, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return sc.run(ctx, e)
}

// startProfile starts a CPU profile of scenario sc into dir (nothing when
// dir is empty) and returns what stops it and writes the file.
func startProfile(dir string, sc scenario) (stop func() error, err error) {
	nop := func() error { return nil }
	if dir == "" {
		return nop, nil
	}
	p := filepath.Join(dir, sc.ids[0]+suffix(sc)+".pprof")
	f, err := os.Create(p)
	if err != nil {
		return nop, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(p)
		return nop, fmt.Errorf("cpu profile %s: %w", p, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("cpu profile %s: %w", p, err)
		}
		return nil
	}, nil
}

// pick selects the scenarios named in only (all when empty).
func pick(only string) ([]scenario, error) {
	if strings.TrimSpace(only) == "" {
		return scenarios, nil
	}
	var out []scenario
	want := map[string]bool{}
	for _, id := range strings.Split(only, ",") {
		id = strings.ToUpper(strings.TrimSpace(id))
		if id == "" {
			continue
		}
		found := false
		for _, sc := range scenarios {
			if slices.Contains(sc.ids, id) {
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown scenario %q (known: B1…B19)", id)
		}
		want[id] = true
	}
	for _, sc := range scenarios {
		for _, id := range sc.ids {
			if want[id] {
				out = append(out, sc)
				break
			}
		}
	}
	return out, nil
}

// autoRuntimes is runc, plus runsc when the local engine has it registered
// (an unreachable engine gets runc: its scenarios report the error).
func autoRuntimes(ctx context.Context) string {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return "runc"
	}
	defer cli.Close()
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := cli.Info(ictx, client.InfoOptions{})
	if err != nil {
		return "runc"
	}
	if _, ok := info.Info.Runtimes["runsc"]; ok {
		return "runc,runsc"
	}
	return "runc"
}

// perRuntime are the scenarios -runtimes repeats under each runtime.
var perRuntime = map[string]bool{"B1": true, "B2": true, "B3": true}

// withRuntimes runs the picked B1-B3 scenarios under runc (in their
// usual place) and then once more under each other runtime listed, right
// after the last of them: before the scenarios that load the engine and
// leave it cleaning up (B9's hundreds of boxes, B12's forks, the
// hibernations), which would otherwise slow every runtime but runc's.
func withRuntimes(picked []scenario, runtimes string) ([]scenario, error) {
	at := 0 // where the other runtimes' scenarios go
	for i, sc := range picked {
		if perRuntime[sc.ids[0]] {
			at = i + 1
		}
	}
	var extra []scenario
	for _, rt := range strings.Split(runtimes, ",") {
		rt = strings.TrimSpace(rt)
		switch {
		case rt == "":
			return nil, fmt.Errorf("-runtimes: empty runtime name in %q", runtimes)
		case rt == "runc":
			continue
		}
		for _, sc := range picked {
			if perRuntime[sc.ids[0]] {
				sc.runtime = rt
				extra = append(extra, sc)
			}
		}
	}
	return slices.Concat(picked[:at], extra, picked[at:]), nil
}

// suffix is what a scenario's rows add to their id: its runtime other
// than runc, then "-unhardened".
func suffix(sc scenario) string {
	n := ""
	if sc.runtime != "" && sc.runtime != "runc" {
		n += "-" + sc.runtime
	}
	if sc.unhardened {
		n += "-unhardened"
	}
	return n
}

// hardenedVsUnhardened are the scenarios -unhardened repeats against
// unhardened sandboxes.
var hardenedVsUnhardened = map[string]bool{"B1": true, "B2": true}

// withUnhardened follows each picked B1 and B2 scenario (under each
// runtime) with the same scenario against unhardened sandboxes.
func withUnhardened(picked []scenario) []scenario {
	var out []scenario
	for _, sc := range picked {
		out = append(out, sc)
		if hardenedVsUnhardened[sc.ids[0]] {
			sc.unhardened = true
			out = append(out, sc)
		}
	}
	return out
}

// hardeningCost gives each measured unhardened row the earlier hardened
// row of the same scenario, runtime and name as its first baseline, so
// that its ratio is hardened ÷ unhardened p50: how many times slower the
// hardening makes the operation (1.00× = free). Unhardened rows have no
// target.
func hardeningCost(earlier, rows []Row) {
	hardened := map[[2]string]Row{}
	for _, r := range earlier {
		if r.N > 0 && !strings.HasSuffix(r.Scenario, "-unhardened") {
			hardened[[2]string{r.Scenario, r.Name}] = r
		}
	}
	for i := range rows {
		r := &rows[i]
		base, ok := strings.CutSuffix(r.Scenario, "-unhardened")
		if !ok || r.N == 0 {
			continue
		}
		r.Target, r.Verdict = "— (ratio = hardening cost)", verdictInfo
		h, ok := hardened[[2]string{base, r.Name}]
		if !ok {
			r.note("no hardened row to compare with in this run")
			continue
		}
		ratio := 0.0
		if r.P50 > 0 {
			ratio = h.P50 / r.P50
		}
		r.Baselines = append([]Baseline{{Name: "hardened " + base + " (same run): ratio = hardened ÷ unhardened", P50: h.P50, Ratio: ratio}}, r.Baselines...)
	}
}
