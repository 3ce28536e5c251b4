package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"github.com/plumbhq/plumb/pkg/snapshot/s3store/weedtest"
)

// TestQuickB8 runs the harness the way `make bench` does, in quick mode
// on B8 only (the one scenario that needs no Docker Engine), and checks the
// exit code, the table and the JSON document. It runs without time budgets:
// it checks that the scenario runs and verifies its results, not its speed.
func TestQuickB8(t *testing.T) {
	out := t.TempDir()
	rep, b, stdout := runQuick(t, out, "b8")
	if !strings.Contains(stdout, "| # | scenario | n | p50 |") {
		t.Errorf("no markdown table on stdout:\n%s", stdout)
	}
	if !rep.OK || !rep.Quick || len(rep.Rows) != 5 {
		t.Fatalf("report ok=%v quick=%v with %d rows: %s", rep.OK, rep.Quick, len(rep.Rows), b)
	}
	for _, r := range rep.Rows {
		if r.N == 0 && strings.Contains(r.Notes, "not measured") && os.Getenv("CI") != "true" {
			continue // the PostgreSQL row, where PostgreSQL is not installed
		}
		if r.Scenario != "B8" || r.N == 0 || r.P50 <= 0 || r.Verdict == verdictFail {
			t.Errorf("row %+v", r)
		}
	}
	if r := rep.Rows[len(rep.Rows)-1]; r.Verdict != verdictPass {
		t.Errorf("concurrent runs: %s (%s)", r.Verdict, r.Notes)
	}
}

// TestQuickB18B19 runs the webhook and schedule rows (no Docker Engine
// needed) in quick mode: every webhook reached the real receiver with a
// signature that verifies, every schedule fired, none before its tick.
func TestQuickB18B19(t *testing.T) {
	rep, b, _ := runQuick(t, t.TempDir(), "b18,b19")
	var got []string
	for _, r := range rep.Rows {
		got = append(got, r.Scenario)
		if r.N == 0 || r.P50 <= 0 || r.Verdict != verdictInfo || len(r.Baselines) != 1 || r.Baselines[0].P50 <= 0 {
			t.Errorf("row %+v", r)
		}
	}
	if !rep.OK || strings.Join(got, ",") != "B18,B19" {
		t.Fatalf("report ok=%v with rows %v: %s", rep.OK, got, b)
	}
	if n := rep.Rows[1].N; n != 6 {
		t.Errorf("%d schedules fired, want 6", n)
	}
}

// TestQuickDurableWorkspaces runs B13-B17 in quick mode on the local
// engine, B16 against a weed server the harness starts (under CI=true a
// missing weed binary fails the test, as it fails the row), and checks
// that every row measured what it names and nothing was left behind.
func TestQuickDurableWorkspaces(t *testing.T) {
	sandboxtest.Docker(t)
	only := "b13,b14,b15,b16,b17"
	if weedtest.Binary() == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no SeaweedFS weed binary for B16 (run scripts/test-deps.sh, or set PLUMB_WEED)")
		}
		t.Log("no weed binary: B16 not run")
		only = "b13,b14,b15,b17"
	}
	rep, b, _ := runQuick(t, t.TempDir(), only)
	if !rep.OK {
		t.Fatalf("report not ok: %s", b)
	}
	rows := map[string]Row{}
	for _, r := range rep.Rows {
		rows[r.Scenario+": "+r.Name] = r
	}
	get := func(key string) Row {
		t.Helper()
		r, ok := rows[key]
		if !ok {
			t.Fatalf("no row %q in %s", key, b)
		}
		return r
	}
	if r := get("B13: bytes stored by the first snapshot"); r.N != 2 || r.P50 < 16 {
		t.Errorf("first snapshot stored %v MiB of a 16 MiB workspace: %+v", r.P50, r)
	}
	if r := get("B13: bytes stored by the unchanged second snapshot"); r.N != 2 || r.P50 <= 0 || r.Verdict != verdictPass {
		t.Errorf("unchanged second snapshot %+v", r)
	}
	if r := get(`B14: paused box → first Execute("true")`); r.N != 10 || len(r.Baselines) != 2 || r.Verdict == verdictFail {
		t.Errorf("pause row %+v", r)
	}
	// B15 is judged against issue 19's target; B16 has none (info).
	wakes := map[string][]string{`B15: hibernated (16 MiB workspace) → first Execute("true"), local store`: {verdictPass, verdictMiss}}
	if strings.Contains(only, "b16") {
		wakes[`B16: hibernated (16 MiB workspace) → first Execute("true"), S3 store (SeaweedFS weed on loopback)`] = []string{verdictInfo}
	}
	for k, verdicts := range wakes {
		if r := get(k); r.N != 2 || len(r.Baselines) != 2 || r.Baselines[1].P50 <= 0 || !slices.Contains(verdicts, r.Verdict) {
			t.Errorf("wake row %+v", r)
		}
	}
	if r := get("B17: hibernated boxes one worker holds (projected)"); r.N != 4 || r.P50 <= 0 {
		t.Errorf("capacity row %+v", r)
	}
	if r := get("B17: hibernated boxes bounded by disk only (not by max_sandboxes)"); r.Verdict != verdictPass || !strings.Contains(r.Notes, "max_sandboxes = 4") {
		t.Errorf("disk-only row (a create beside 4 hibernated boxes under max_sandboxes = 4 must succeed) %+v", r)
	}
	if r := get("cleanup: leftovers by label plumb.bench"); r.Verdict != verdictPass {
		t.Errorf("cleanup %+v", r)
	}
}

// TestQuickB20 runs the memory-checkpoint rows in quick mode: a private
// engine with checkpoints under the current gVisor (a runsc runtime on
// the local engine is required under CI=true), every hibernation of the
// memory box checked processes_kept and its process alive after each wake.
func TestQuickB20(t *testing.T) {
	cli := sandboxtest.Docker(t)
	if !slices.Contains(sandboxtest.Runtimes(t, cli), "runsc") {
		if os.Getenv("CI") == "true" {
			t.Fatal("no runsc runtime on the engine under CI=true (scripts/test-deps.sh registers it)")
		}
		t.Skip("no runsc runtime on the engine")
	}
	rep, b, _ := runQuick(t, t.TempDir(), "b20")
	if !rep.OK {
		t.Fatalf("report not ok: %s", b)
	}
	want := map[string]bool{
		"B20: gVisor box hibernated with its memory → first Execute (processes kept)":      true,
		"B20: hibernate with memory (workspace snapshot, engine checkpoint, image stored)": true,
		"B20: memory image stored per hibernation (zstd)":                                  false,
	}
	seen := 0
	for _, r := range rep.Rows {
		vs, ok := want[r.Scenario+": "+r.Name]
		if !ok {
			continue
		}
		seen++
		if r.N != 3 || r.P50 <= 0 || r.Verdict != verdictInfo || vs != (len(r.Baselines) == 1 && r.Baselines[0].P50 > 0) {
			t.Errorf("row %+v", r)
		}
	}
	if seen != len(want) {
		t.Fatalf("%d of the %d B20 rows in %s", seen, len(want), b)
	}
}

func TestPick(t *testing.T) {
	for _, tc := range []struct {
		name, only string
		want       []string // first id of each picked scenario
		err        bool
	}{
		{name: "all", only: "", want: []string{"B1", "B2", "B3", "B7", "B8", "B10", "B11", "B12", "B13", "B14", "B15", "B16", "B17", "B18", "B19", "B20", "B5", "B9"}},
		{name: "the durable-workspace rows", only: "B17,b13,B16,B14,B15", want: []string{"B13", "B14", "B15", "B16", "B17"}},
		{name: "some, in report order", only: "b2, B1", want: []string{"B1", "B2"}},
		{name: "either id of a shared scenario", only: "B6,B4", want: []string{"B3", "B5"}},
		{name: "unknown", only: "B21", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pick(tc.only)
			if (err != nil) != tc.err {
				t.Fatalf("error %v", err)
			}
			var ids []string
			for _, sc := range got {
				ids = append(ids, sc.ids[0])
			}
			if strings.Join(ids, ",") != strings.Join(tc.want, ",") {
				t.Errorf("picked %v, want %v", ids, tc.want)
			}
		})
	}
}

func TestPercentiles(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	r := summarize("X", "x", unitMs, v, false)
	if r.P50 != 5 || r.P95 != 10 || r.P99 != 10 || r.Max != 10 || r.N != 10 {
		t.Errorf("latency %+v", r)
	}
	r = summarize("X", "x", unitMBps, v, true)
	if r.P50 != 6 || r.P95 != 1 || r.Max != 10 {
		t.Errorf("throughput %+v", r)
	}
	if got, err := parseStamp([]byte("1795322993.617148 \n")); err != nil || got != 1795322993617148 {
		t.Errorf("parseStamp = %d, %v", got, err)
	}
}

// TestSlowScenarioIsNotAnError: a scenario over its budget is reported as
// slow, with its time, and the run still succeeds; one stopped at the hard
// stop keeps its rows and is slow too; a real error still fails the run.
func TestSlowScenarioIsNotAnError(t *testing.T) {
	row := Row{Scenario: "B8", Name: "partial", N: 1, P50: 1, Verdict: verdictInfo}
	tests := []struct {
		name     string
		budget   time.Duration
		run      func(ctx context.Context, e *env) ([]Row, error)
		wantCode int
		want     string // verdict of the last row
	}{
		{"over budget, finished", time.Millisecond, func(ctx context.Context, e *env) ([]Row, error) {
			time.Sleep(20 * time.Millisecond) // over the 1 ms budget, under no hard stop: the sleep ignores ctx
			return []Row{row}, nil
		}, 0, verdictSlow},
		{"stopped at the hard stop", time.Millisecond, func(ctx context.Context, e *env) ([]Row, error) {
			<-ctx.Done()
			return []Row{row}, fmt.Errorf("exec inspect: %w", ctx.Err())
		}, 0, verdictSlow},
		{"real error", time.Hour, func(ctx context.Context, e *env) ([]Row, error) {
			return []Row{row}, errors.New("downloaded bytes differ")
		}, 1, verdictFail},
	}
	saved := scenarios
	t.Cleanup(func() { scenarios = saved })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scenarios = []scenario{{ids: []string{"B8"}, budget: tt.budget, quickBudget: tt.budget, run: tt.run}}
			out := t.TempDir()
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), []string{"-quick", "-only", "b8", "-out", out}, &stdout, &stderr)
			if code != tt.wantCode {
				t.Fatalf("exit code %d, want %d\n%s\n%s", code, tt.wantCode, &stdout, &stderr)
			}
			files, _ := filepath.Glob(filepath.Join(out, "*.json"))
			b, err := os.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			var rep Report
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			if len(rep.Rows) != 2 || rep.Rows[0].Name != "partial" || rep.Rows[1].Verdict != tt.want {
				t.Fatalf("rows %+v", rep.Rows)
			}
			if tt.want == verdictSlow && !strings.Contains(rep.Rows[1].Notes, "budget") {
				t.Fatalf("slow row without its time and budget: %+v", rep.Rows[1])
			}
		})
	}
}

// TestQuickUnhardened runs B2 in quick mode with its unhardened twin (the
// default) on the local engine and checks that both rows ran and verified
// their results (the scenario itself checks that each box is hardened or
// not, as its rows say), that the twin carries the hardened row as its
// ratio, and that nothing was left behind.
func TestQuickUnhardened(t *testing.T) {
	sandboxtest.Docker(t)
	out := t.TempDir()
	rep, b, _ := runQuick(t, out, "b2")
	var got []string
	for _, r := range rep.Rows {
		got = append(got, r.Scenario)
	}
	floorRows := "B2,B2,B2,B2"
	if !rep.OK || strings.Join(got, ",") != "B2,"+floorRows+",B2-unhardened,B2-unhardened,B2-unhardened,B2-unhardened,B2-unhardened,cleanup" {
		t.Fatalf("report ok=%v with rows %v: %s", rep.OK, got, b)
	}
	h, u := rep.Rows[0], rep.Rows[5]
	if h.N == 0 || h.P50 <= 0 || !slices.Contains([]string{verdictPass, verdictMiss, verdictFloor}, h.Verdict) {
		t.Errorf("hardened row %+v", h)
	}
	checkFloor(t, h, rep.Rows[1:5])
	if u.N == 0 || u.P50 <= 0 || u.Verdict != verdictInfo || len(u.Baselines) != 3 {
		t.Fatalf("unhardened row %+v", u)
	}
	if c := u.Baselines[0]; !strings.HasPrefix(c.Name, "hardened B2") || c.P50 != h.P50 || c.Ratio != h.P50/u.P50 {
		t.Errorf("hardening cost %+v, want hardened p50 %v over %v", c, h.P50, u.P50)
	}
	if last := rep.Rows[len(rep.Rows)-1]; last.Verdict != verdictPass {
		t.Errorf("cleanup %+v", last)
	}
}

// checkFloor checks a judged row's floor: its parts were measured (info
// rows), the floor baseline is the composed part's median plus the spawn
// part's (B2), and the verdict follows from the row and the floor.
func checkFloor(t *testing.T, r Row, parts []Row) {
	t.Helper()
	floor, composed := 0.0, 0
	for _, p := range parts {
		if !strings.HasPrefix(p.Name, "floor part: ") || p.N == 0 || p.P50 <= 0 || p.Verdict != verdictInfo {
			t.Errorf("floor part %+v", p)
		}
		switch {
		case strings.Contains(p.Name, "composed"):
			floor += p.P50
			composed++
		case strings.Contains(p.Name, "/bin/sh -c true"):
			floor += p.P50
		}
	}
	fl := r.Baselines[len(r.Baselines)-1]
	if composed != 1 || !strings.HasPrefix(fl.Name, "floor") || math.Abs(fl.P50-floor) > 1e-9 || fl.Ratio != floor/r.P50 {
		t.Errorf("floor baseline %+v, want the composed part's median (plus the spawn part's) %v", fl, floor)
	}
	if !strings.Contains(r.Notes, "parts timed apart sum to") {
		t.Errorf("floor without the sum of its parts in the notes: %+v", r)
	}
	if r.Verdict == verdictFloor && !strings.Contains(r.Notes, "the floor misses it too") {
		t.Errorf("floor verdict without its note: %+v", r)
	}
}

// TestQuickB9 runs B9 in quick mode on the local engine and checks its
// rows: the sandboxes were created and answered, and the memory of the
// processes plumb runs inside each box was read (the scenario itself
// fails when a box has no sandbox-agent process to read).
func TestQuickB9(t *testing.T) {
	sandboxtest.Docker(t)
	out := t.TempDir()
	rep, b, _ := runQuick(t, out, "b9")
	var got []string
	for _, r := range rep.Rows {
		got = append(got, r.Scenario+": "+r.Name)
	}
	want := []string{
		"B9: idle sandboxes live at once on one worker (9)",
		"B9: worker heap per idle sandbox",
		"B9: in-box agent memory per box (RSS)",
		"B9: everything plumb adds per box (worker RSS growth + in-box RSS)",
		"cleanup: leftovers by label plumb.bench",
	}
	if !rep.OK || !slices.Equal(got, want) {
		t.Fatalf("report ok=%v with rows %q: %s", rep.OK, got, b)
	}
	inBox, total := rep.Rows[2], rep.Rows[3]
	if inBox.N != 8 || inBox.P50 <= 0 || inBox.Verdict != verdictInfo || !strings.Contains(inBox.Notes, "sandbox-agent") {
		t.Errorf("in-box row %+v", inBox)
	}
	if total.N != 8 || total.P50 <= 0 || (total.Verdict != verdictPass && total.Verdict != verdictMiss) {
		t.Errorf("total row %+v", total)
	}
	if rep.Rows[4].Verdict != verdictPass {
		t.Errorf("cleanup %+v", rep.Rows[4])
	}
}

func TestWithUnhardened(t *testing.T) {
	for _, tc := range []struct {
		name, only, runtimes string
		want                 []string // scenarios as their rows name them
	}{
		{name: "B1 and B2 get a twin", only: "B1,B2,B3", runtimes: "runc", want: []string{"B1", "B1-unhardened", "B2", "B2-unhardened", "B3"}},
		{name: "under each runtime", only: "B2", runtimes: "runc,runsc", want: []string{"B2", "B2-unhardened", "B2-runsc", "B2-runsc-unhardened"}},
		{name: "others get none", only: "B8", runtimes: "runc", want: []string{"B8"}},
		{name: "other runtimes before the rest", only: "B1,B3,B7,B9", runtimes: "runc,runsc",
			want: []string{"B1", "B1-unhardened", "B3", "B1-runsc", "B1-runsc-unhardened", "B3-runsc", "B7", "B9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			picked, err := pick(tc.only)
			if err == nil {
				picked, err = withRuntimes(picked, tc.runtimes)
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, sc := range withUnhardened(picked) {
				got = append(got, sc.ids[0]+suffix(sc))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestHardeningCost(t *testing.T) {
	earlier := []Row{
		{Scenario: "B2", Name: "x", N: 10, P50: 3},
		{Scenario: "B2-runsc", Name: "x", N: 10, P50: 8},
	}
	rows := []Row{
		{Scenario: "B2-unhardened", Name: "x", N: 10, P50: 2, Verdict: verdictMiss, Baselines: []Baseline{{Name: "exec", P50: 20, Ratio: 10}}},
		{Scenario: "B2-runsc-unhardened", Name: "x", N: 10, P50: 4, Verdict: verdictPass},
		{Scenario: "B2-unhardened", Name: "not in the hardened run", N: 10, P50: 1},
		{Scenario: "B2-unhardened", Name: "scenario slow", Verdict: verdictSlow},
	}
	hardeningCost(earlier, rows)
	for i, want := range []struct {
		verdict string
		ratios  []float64
	}{
		{verdictInfo, []float64{1.5, 10}},
		{verdictInfo, []float64{2}},
		{verdictInfo, nil},
		{verdictSlow, nil},
	} {
		var ratios []float64
		for _, b := range rows[i].Baselines {
			ratios = append(ratios, b.Ratio)
		}
		if rows[i].Verdict != want.verdict || !slices.Equal(ratios, want.ratios) {
			t.Errorf("row %d: %+v, want verdict %s and ratios %v", i, rows[i], want.verdict, want.ratios)
		}
	}
}

// runQuick runs the harness in quick mode without budgets on the scenarios
// only names, writing into out, and returns its report, the report's JSON
// and what it printed.
func runQuick(t *testing.T, out, only string) (Report, []byte, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"-quick", "-no-budget", "-runtimes", "runc", "-only", only, "-out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	files, err := filepath.Glob(filepath.Join(out, "*.json"))
	if err != nil || len(files) != 1 {
		t.Fatalf("results: %v %v", files, err)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep, b, stdout.String()
}

// TestStartProfile: -cpuprofile writes <scenario><suffix>.pprof, and
// nothing without the flag.
func TestStartProfile(t *testing.T) {
	dir := t.TempDir()
	stop, err := startProfile("", scenario{ids: []string{"B8"}})
	if err != nil || stop() != nil {
		t.Fatalf("no directory: %v", err)
	}
	stop, err = startProfile(dir, scenario{ids: []string{"B1"}, unhardened: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		_ = strings.Repeat("x", 100)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "B1-unhardened.pprof"))
	if err != nil || fi.Size() == 0 {
		t.Fatalf("profile: %v %v", fi, err)
	}
}

// TestJudgeAtFloor: a met target passes; a missed one is verdictFloor only
// when the floor misses it too, and a miss otherwise.
func TestJudgeAtFloor(t *testing.T) {
	met := callTarget{p50: 1.2, ratio: 40}.met
	for _, tt := range []struct {
		name          string
		p50, floor    float64
		baseline      float64
		want, inNotes string
	}{
		{"met", 1.0, 0.5, 60, verdictPass, ""},
		{"floor over the p50 target", 2.0, 1.3, 60, verdictFloor, "plumb adds 0.700 ms over its floor"},
		{"floor under the ratio target", 2.0, 1.0, 30, verdictFloor, "the floor misses it too"},
		{"plumb's own miss", 2.0, 0.8, 60, verdictMiss, "the miss is plumb's own 1.20 ms"},
		{"at the floor", 6.6, 7.1, 60, verdictFloor, "plumb is at its floor"},
	} {
		r := Row{P50: tt.p50}
		r.judgeAtFloor(tt.floor, tt.floor*0.9, tt.baseline, met)
		if r.Verdict != tt.want || !strings.Contains(r.Notes, tt.inNotes) || !strings.Contains(r.Notes, "parts timed apart sum to") ||
			len(r.Baselines) != 1 || r.Baselines[0].P50 != tt.floor {
			t.Errorf("%s: %+v, want %s with %q", tt.name, r, tt.want, tt.inNotes)
		}
	}
	if s := (callTarget{p50: 1.2, ratio: 40}).String("(a)"); s != "p50 ≤ 1.20 ms; ≥ 40× (a)" {
		t.Errorf("target %q", s)
	}
}
