package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Units of a row's figures.
const (
	unitMs     = "ms"
	unitUs     = "µs"
	unitMBps   = "MB/s"
	unitMiB    = "MiB"
	unitCount  = "count"
	unitNoData = ""
)

// Verdicts of a row: the target was met or missed, the scenario errored,
// the row has no target, or the feature does not exist yet.
const (
	verdictPass    = "pass"
	verdictMiss    = "miss"
	verdictFail    = "FAIL"
	verdictInfo    = "info"
	verdictNotImpl = "not implemented"
	// verdictFloor: the target is missed, and the same run's floor of the
	// row (what it cannot avoid on this engine and machine) misses it too.
	verdictFloor = "floor"
)

// Baseline is one baseline a row is compared with.
type Baseline struct {
	// Name says what the baseline does.
	Name string `json:"name"`
	// P50 is the baseline's median, in the row's unit.
	P50 float64 `json:"p50"`
	// Ratio is how many times better than this baseline the row is (> 1
	// means plumb is faster).
	Ratio float64 `json:"ratio"`
}

// Row is one line of the report.
type Row struct {
	// Scenario is the docs/benchmarks.md id, for example "B1".
	Scenario string `json:"scenario"`
	// Name says what was measured.
	Name string `json:"name"`
	// Unit is the unit of P50…Max ("ms", "µs", "MB/s", "MiB", "count").
	Unit string `json:"unit"`
	// N is the number of timed samples (after warm-up).
	N int `json:"n"`
	// P50, P95, P99 and Max summarize the samples (for a throughput row,
	// Max is the best sample and P95/P99 are the worst tails).
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
	// OpsPerSec is sequential operations per second (1 / mean latency),
	// 0 when it does not apply.
	OpsPerSec float64 `json:"ops_per_sec"`
	// Baselines are the comparisons; the first is the primary one.
	Baselines []Baseline `json:"baselines,omitempty"`
	// Target is this row's target in docs/benchmarks.md.
	Target string `json:"target"`
	// Verdict is pass, miss, FAIL, info, not implemented or not run.
	Verdict string `json:"verdict"`
	// Notes qualify the figures (scale, what exactly was timed).
	Notes string `json:"notes,omitempty"`
	// Error is set when the scenario errored.
	Error string `json:"error,omitempty"`
}

// Report is the JSON document of one run.
type Report struct {
	// Started and Finished bound the run; Seconds is the difference.
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Seconds  float64   `json:"seconds"`
	// Command is how the harness was invoked.
	Command string `json:"command"`
	// Quick is set for a -quick run.
	Quick bool `json:"quick"`
	// Machine is where it ran.
	Machine Machine `json:"machine"`
	// Rows are the results in report order.
	Rows []Row `json:"rows"`
	// Leftovers lists containers and volumes labelled with this run that
	// remained after cleanup; it must be empty.
	Leftovers []string `json:"leftovers"`
	// OK is false when a scenario errored or something was left behind.
	OK bool `json:"ok"`
}

// Machine describes where the run happened.
type Machine struct {
	// Cores is the number of logical CPUs.
	Cores int `json:"cores"`
	// CPU is the model name from /proc/cpuinfo.
	CPU string `json:"cpu"`
	// MemoryMiB is MemTotal.
	MemoryMiB int64 `json:"memory_mib"`
	// Kernel is the kernel release.
	Kernel string `json:"kernel"`
	// GoVersion is the toolchain that built the harness.
	GoVersion string `json:"go_version"`
	// EngineVersion and EngineAPI identify the Docker Engine (empty when
	// no scenario needed it).
	EngineVersion string `json:"engine_version,omitempty"`
	EngineAPI     string `json:"engine_api,omitempty"`
	// LoadAvg is /proc/loadavg when the run started: the machines are
	// shared, and this says how busy it already was.
	LoadAvg string `json:"load_avg,omitempty"`
}

// samples are timed observations of one series.
type samples []time.Duration

// latencyRow summarizes latencies in unit (unitMs or unitUs).
func latencyRow(scenario, name, unit string, s samples) Row {
	div := float64(time.Millisecond)
	if unit == unitUs {
		div = float64(time.Microsecond)
	}
	v := make([]float64, len(s))
	var sum time.Duration
	for i, d := range s {
		v[i] = float64(d) / div
		sum += d
	}
	r := summarize(scenario, name, unit, v, false)
	if sum > 0 {
		r.OpsPerSec = float64(len(s)) / sum.Seconds()
	}
	return r
}

// summarize fills the percentiles of values; for a throughput (higher is
// better), the tails are the low end.
func summarize(scenario, name, unit string, values []float64, higherIsBetter bool) Row {
	r := Row{Scenario: scenario, Name: name, Unit: unit, N: len(values)}
	if len(values) == 0 {
		return r
	}
	v := slices.Clone(values)
	slices.Sort(v)
	if higherIsBetter {
		slices.Reverse(v)
	}
	r.P50 = pct(v, 50)
	r.P95 = pct(v, 95)
	r.P99 = pct(v, 99)
	r.Max = v[len(v)-1]
	if higherIsBetter {
		r.Max = v[0]
	}
	return r
}

// pct is the nearest-rank percentile of sorted values.
func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// p50 is the median of s.
func (s samples) p50() time.Duration {
	if len(s) == 0 {
		return 0
	}
	v := slices.Clone(s)
	slices.Sort(v)
	return v[int(math.Ceil(0.5*float64(len(v))))-1]
}

// vsLatency adds a latency baseline (same unit as the row) and returns
// the ratio baseline/ours.
func (r *Row) vsLatency(name string, base Row) float64 {
	ratio := 0.0
	if r.P50 > 0 {
		ratio = base.P50 / r.P50
	}
	r.Baselines = append(r.Baselines, Baseline{Name: name, P50: base.P50, Ratio: ratio})
	return ratio
}

// vsThroughput adds a throughput baseline and returns ours/baseline.
func (r *Row) vsThroughput(name string, base Row) float64 {
	ratio := 0.0
	if base.P50 > 0 {
		ratio = r.P50 / base.P50
	}
	r.Baselines = append(r.Baselines, Baseline{Name: name, P50: base.P50, Ratio: ratio})
	return ratio
}

// judge sets the verdict from ok.
func (r *Row) judge(ok bool) {
	if ok {
		r.Verdict = verdictPass
	} else {
		r.Verdict = verdictMiss
	}
}

// note appends a note.
func (r *Row) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if r.Notes == "" {
		r.Notes = s
	} else {
		r.Notes += "; " + s
	}
}

// fmtVal formats v in unit with three significant digits.
func fmtVal(v float64, unit string) string {
	if unit == unitNoData {
		return "—"
	}
	var s string
	switch {
	case v == 0:
		s = "0"
	case math.Abs(v) >= 100:
		s = fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		s = fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1:
		s = fmt.Sprintf("%.2f", v)
	default:
		s = fmt.Sprintf("%.3f", v)
	}
	if unit == unitCount {
		return s
	}
	return s + " " + unit
}

func fmtRatio(x float64) string {
	switch {
	case x == 0:
		return "—"
	case x >= 100:
		return fmt.Sprintf("%.0f×", x)
	case x >= 10:
		return fmt.Sprintf("%.1f×", x)
	default:
		return fmt.Sprintf("%.2f×", x)
	}
}

// writeTable prints the rows as a markdown table, then the notes.
func writeTable(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| # | scenario | n | p50 | p95 | p99 | max | ops/s | baseline | baseline p50 | ratio | target | result |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		cells := []string{r.Scenario, esc(r.Name), "—", "—", "—", "—", "—", "—", "—", "—", "—", esc(r.Target), r.Verdict}
		if r.N > 0 {
			cells[2] = fmt.Sprint(r.N)
			cells[3], cells[4], cells[5], cells[6] = fmtVal(r.P50, r.Unit), fmtVal(r.P95, r.Unit), fmtVal(r.P99, r.Unit), fmtVal(r.Max, r.Unit)
			if r.OpsPerSec > 0 {
				cells[7] = fmt.Sprintf("%.0f", r.OpsPerSec)
				if r.OpsPerSec < 10 {
					cells[7] = fmt.Sprintf("%.1f", r.OpsPerSec)
				}
			}
		}
		if len(r.Baselines) > 0 {
			var names, p50s, ratios []string
			for _, b := range r.Baselines {
				names = append(names, esc(b.Name))
				p50s = append(p50s, fmtVal(b.P50, r.Unit))
				ratios = append(ratios, fmtRatio(b.Ratio))
			}
			cells[8], cells[9], cells[10] = strings.Join(names, "<br>"), strings.Join(p50s, "<br>"), strings.Join(ratios, "<br>")
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		if r.Notes == "" && r.Error == "" {
			continue
		}
		fmt.Fprintf(w, "- **%s %s**:", r.Scenario, r.Name)
		if r.Error != "" {
			fmt.Fprintf(w, " error: %s.", r.Error)
		}
		if r.Notes != "" {
			fmt.Fprintf(w, " %s.", r.Notes)
		}
		fmt.Fprintln(w)
	}
}

func esc(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// writeJSON writes rep into dir as <timestamp>.json and returns the path.
func writeJSON(dir string, rep *Report) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// JSON has no NaN or infinity; a figure that came out that way is
	// written as 0 rather than losing the whole document.
	for i := range rep.Rows {
		r := &rep.Rows[i]
		for _, f := range []*float64{&r.P50, &r.P95, &r.P99, &r.Max, &r.OpsPerSec} {
			if math.IsNaN(*f) || math.IsInf(*f, 0) {
				*f = 0
			}
		}
		for j := range r.Baselines {
			if b := &r.Baselines[j]; math.IsNaN(b.Ratio) || math.IsInf(b.Ratio, 0) {
				b.Ratio = 0
			}
		}
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, rep.Started.UTC().Format("20060102T150405Z")+".json")
	return p, os.WriteFile(p, append(b, '\n'), 0o644)
}
