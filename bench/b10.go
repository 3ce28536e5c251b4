package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
)

// stampCommand prints a wall-clock timestamp with microseconds (busybox
// ts, stamped as it reads the line, written when it exits right after),
// then keeps the command running so the line must travel as a streamed
// chunk, not with the final result. Container and host share the kernel's
// CLOCK_REALTIME, so the stamp and the client's receive time compare.
const stampCommand = "echo | ts %.s; sleep 0.02"

// parseStamp reads "<sec>.<usec> " into Unix microseconds.
func parseStamp(b []byte) (int64, error) {
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("no timestamp in %q", b)
	}
	sec, frac, ok := strings.Cut(f[0], ".")
	s, err1 := strconv.ParseInt(sec, 10, 64)
	u, err2 := strconv.ParseInt((frac + "000000")[:6], 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad timestamp %q", f[0])
	}
	return s*1_000_000 + u, nil
}

// runB10 measures ExecuteStream: how long the first output line takes to
// reach the client after the process stamped it, against the same command
// through an Engine-API exec attach; and sustained stdout throughput of
// `head -c N /dev/zero` against the same through an exec attach.
func runB10(ctx context.Context, e *env) ([]Row, error) {
	bx, err := e.newBox(ctx)
	if err != nil {
		return nil, err
	}
	defer e.dropBox(bx)
	cli := e.docker

	var ours, base, ttfb samples
	oursFirst := func(ctx context.Context) (time.Duration, time.Duration, error) {
		var first []byte
		var at time.Time
		t0 := time.Now()
		res, err := bx.b.ExecuteStream(ctx, backend.ExecuteRequest{Command: stampCommand}, func(b []byte) error {
			if first == nil {
				at = time.Now()
				first = append([]byte(nil), b...)
			}
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
		if res.ExitCode == nil || *res.ExitCode != 0 || first == nil {
			return 0, 0, fmt.Errorf("stamp command: exit %v, output %q", res.ExitCode, res.Output)
		}
		stamp, err := parseStamp(first)
		if err != nil {
			return 0, 0, err
		}
		return time.Duration(at.UnixMicro()-stamp) * time.Microsecond, at.Sub(t0), nil
	}
	baseFirst := func(ctx context.Context) (time.Duration, error) {
		r, err := engineExec(ctx, cli, bx.cid, "sh", "-c", stampCommand)
		if err != nil {
			return 0, err
		}
		if r.exitCode != 0 || r.firstByte.IsZero() {
			return 0, fmt.Errorf("stamp command through exec: exit %d, stderr %q", r.exitCode, r.stderr)
		}
		stamp, err := parseStamp(r.stdout)
		if err != nil {
			return 0, err
		}
		return time.Duration(r.firstByte.UnixMicro()-stamp) * time.Microsecond, nil
	}
	n, warm := e.scale(100, 30), 5
	for i := range n + warm {
		d, t, err := oursFirst(ctx)
		if err != nil {
			return nil, fmt.Errorf("first byte: %w", err)
		}
		b, err := baseFirst(ctx)
		if err != nil {
			return nil, fmt.Errorf("first byte (baseline): %w", err)
		}
		if i >= warm {
			ours, base, ttfb = append(ours, d), append(base, b), append(ttfb, t)
		}
	}
	first := latencyRow("B10", "ExecuteStream first byte after the process wrote it", unitMs, ours)
	first.OpsPerSec = 0
	first.vsLatency("exec attach of the same command", latencyRow("", "", unitMs, base))
	first.Target = "p99 ≤ 10 ms"
	first.judge(first.P99 <= 10)
	first.note("stamp = busybox ts' wall clock when it read the line (written at its exit, so this slightly overstates); receive = when the backend client's onOutput got the chunk; "+
		"request start → first chunk p50 %.2f ms (includes sh and process start-up)", float64(ttfb.p50())/float64(time.Millisecond))

	size := int64(e.scale(200, 50)) << 20
	cmd := fmt.Sprintf("head -c %d /dev/zero", size)
	reps := e.scale(3, 1)
	var tO, tB []float64
	for i := range reps + 1 {
		var got int64
		t0 := time.Now()
		res, err := bx.b.ExecuteStream(ctx, backend.ExecuteRequest{Command: cmd}, func(b []byte) error {
			got += int64(len(b))
			return nil
		})
		d := time.Since(t0)
		if err != nil {
			return []Row{first}, fmt.Errorf("stream throughput: %w", err)
		}
		if got != size || res.ExitCode == nil || *res.ExitCode != 0 {
			return []Row{first}, fmt.Errorf("streamed %d of %d bytes, exit %v", got, size, res.ExitCode)
		}
		var cw countWriter
		t0 = time.Now()
		r, err := engineExecTo(ctx, cli, bx.cid, &cw, "sh", "-c", cmd)
		db := time.Since(t0)
		if err != nil {
			return []Row{first}, fmt.Errorf("stream throughput (baseline): %w", err)
		}
		if cw.n != size || r.exitCode != 0 {
			return []Row{first}, fmt.Errorf("baseline streamed %d of %d bytes, exit %d", cw.n, size, r.exitCode)
		}
		if i > 0 { // the first round is the warm-up
			tO, tB = append(tO, mb(size, d)), append(tB, mb(size, db))
		}
	}
	thr := summarize("B10", fmt.Sprintf("ExecuteStream stdout throughput (%d MiB)", size>>20), unitMBps, tO, true)
	ratio := thr.vsThroughput("exec attach of the same command", summarize("", "", unitMBps, tB, true))
	thr.Target = "≥ 100 MB/s; ≥ 1.0× exec attach"
	thr.judge(thr.P50 >= 100 && ratio >= 1)
	thr.note("`%s`, bytes counted as the backend client receives them; p95/p99 are the slowest runs", cmd)
	return []Row{first, thr}, nil
}
