package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/moby/moby/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// Floors (issue 22): what one B1 or B2 call cannot avoid on this engine
// and machine, measured in the same run, interleaved with the row. A row
// that misses its target is judged against its floor: when the floor
// misses the same target, the target is beyond what the engine allows
// here and the verdict is verdictFloor; otherwise the miss is plumb's own.
//
// The parts, each the cheapest form of a step every call takes:
//   - rpc: one loopback gRPC call to the worker that it answers at once
//     (GetSandbox of an unknown id: a map lookup, NotFound);
//   - echo: one round trip over the engine's stdio attach to a process in a
//     box, the way the agent's channel is attached: a container of the
//     same image, runtime and hardening whose PID 1 is busybox cat, 64
//     bytes out and the same 64 bytes back;
//   - spawn (B2): starting /bin/sh -c true inside the sandbox itself, timed
//     by the box's shell as a loop of spawns minus the same loop empty;
//   - file (B1): the operation's own system calls in the sandbox itself
//     and on its workspace volume, with nothing around them, made by a
//     small static program the harness uploads into the box
//     (bench/boxfloor: read is fstatat, openat, fstat, read, close;
//     write fstatat and a plain atomic write of 4 KiB; edit both; ls and
//     glob a getdents of the directory and an fstatat of each entry
//     reported). Under gVisor each of these calls is served by the
//     sentry, so this part is what the runtime charges for the file work,
//     which the host's file system alone would not show.
type callFloor struct {
	rpc, echo *probe
	spawn     *spawnProbe // B2 only
	file      *fileProbe  // B1 only
	stop      func()
}

// spawnLoop is how many /bin/sh -c true one spawn sample starts.
const spawnLoop = 50

// spawnProbe times spawns in a box: each call runs the loop of spawnLoop
// spawns and the empty loop through Execute, and records their difference
// per spawn in per.
type spawnProbe struct {
	*probe
	per samples
}

// newCallFloor starts the floor's probes for calls to box bx: B1's
// (b2 false) with the write part, B2's with the spawn part. stop removes
// the echo container and the write part's directory.
func (e *env) newCallFloor(ctx context.Context, bx *box, b2 bool) (*callFloor, error) {
	rpc := &probe{name: "loopback gRPC call answered at once", warm: 20, n: e.scale(300, 60), f: func(ctx context.Context) error {
		_, err := bx.w.c.GetSandbox(ctx, &plumbv1.GetSandboxRequest{SandboxId: "sb-bench-floor-none"})
		if status.Code(err) != codes.NotFound {
			return fmt.Errorf("GetSandbox of an unknown id: %v, want NotFound", err)
		}
		return nil
	}}
	echo, stop, err := e.echoProbe(ctx)
	if err != nil {
		return nil, err
	}
	f := &callFloor{rpc: rpc, echo: echo, stop: stop}
	if b2 {
		f.spawn = e.spawnFloor(bx)
		return f, nil
	}
	file, err := e.fileFloor(ctx, bx)
	if err != nil {
		stop()
		return nil, err
	}
	f.file = file
	return f, nil
}

// probes are the floor's probes, to interleave with the row's.
func (f *callFloor) probes() []*probe {
	ps := []*probe{f.rpc, f.echo}
	if f.spawn != nil {
		ps = append(ps, f.spawn.probe)
	}
	if f.file != nil {
		ps = append(ps, f.file.probe)
	}
	return ps
}

// p50 is the floor of a call in milliseconds, the sum of its parts'
// medians: for B1, with the file part of op (a boxfloor operation).
func (f *callFloor) p50(op string) float64 {
	ms := func(s samples) float64 { return float64(s.p50()) / float64(time.Millisecond) }
	sum := ms(f.rpc.got) + ms(f.echo.got)
	if f.spawn != nil {
		sum += ms(f.spawn.per)
	}
	if f.file != nil {
		sum += ms(f.file.per[op])
	}
	return sum
}

// rows are the floor's parts as info rows of scenario id.
func (f *callFloor) rows(id string) []Row {
	part := func(name string, s samples) Row {
		r := latencyRow(id, "floor part: "+name, unitMs, s)
		r.Target, r.Verdict = "— (what every call pays; see the judged rows)", verdictInfo
		return r
	}
	rows := []Row{
		part("loopback gRPC call the worker answers at once", f.rpc.got),
		part("engine stdio round trip to a box's PID 1 (busybox cat, 64 B)", f.echo.got),
	}
	if f.spawn != nil {
		r := part("start /bin/sh -c true in the box (its shell's loop of spawns)", f.spawn.per)
		r.OpsPerSec = 0
		r.note("each sample: Execute of a loop of %d `/bin/sh -c true` minus Execute of the same loop empty, divided by %d", spawnLoop, spawnLoop)
		rows = append(rows, r)
	}
	if f.file != nil {
		for _, op := range boxfloorOps {
			r := part("the "+op+" operation's own system calls in the box (bench/boxfloor)", f.file.per[op])
			r.OpsPerSec = 0
			r.note("each sample: the median of a loop of %d, timed inside the box", fileLoop)
			rows = append(rows, r)
		}
	}
	return rows
}

// judgeAtFloor sets r's verdict: pass when met(r's p50, its ratio) holds,
// verdictFloor when it does not and the floor fl (ms) would not meet it
// either, miss otherwise. The floor is added as a baseline (ratio = floor
// ÷ plumb: how close plumb is to it) and its verdict explained.
func (r *Row) judgeAtFloor(fl, baseline float64, met func(p50, ratio float64) bool) {
	r.vsLatency("floor (same run): the sum of its parts' p50 below", Row{P50: fl})
	ratio := 0.0
	if r.P50 > 0 {
		ratio = baseline / r.P50
	}
	switch {
	case met(r.P50, ratio):
		r.Verdict = verdictPass
	case fl > 0 && !met(fl, baseline/fl):
		r.Verdict = verdictFloor
		over := "plumb adds " + fmtVal(r.P50-fl, unitMs) + " over its floor"
		if r.P50 <= fl {
			over = "plumb is at its floor (within the noise)"
		}
		r.note("target missed, but the floor misses it too (floor %s, %s the baseline): beyond what this engine allows on this machine; %s",
			fmtVal(fl, unitMs), fmtRatio(baseline/fl), over)
	default:
		r.Verdict = verdictMiss
		r.note("the floor (%s) meets the target: the miss is plumb's own %s over it", fmtVal(fl, unitMs), fmtVal(r.P50-fl, unitMs))
	}
}

// spawnFloor is the spawn part of B2's floor in box bx.
func (e *env) spawnFloor(bx *box) *spawnProbe {
	loop := func(n int) string {
		return fmt.Sprintf("i=0; while [ $i -lt %d ]; do /bin/sh -c true; i=$((i+1)); done", n)
	}
	run := func(ctx context.Context, cmd string) (time.Duration, error) {
		t0 := time.Now()
		r, err := bx.b.Execute(ctx, backend.ExecuteRequest{Command: cmd})
		d := time.Since(t0)
		if err == nil && (r.ExitCode == nil || *r.ExitCode != 0) {
			err = fmt.Errorf("%q exited %v: %s", cmd, r.ExitCode, r.Output)
		}
		return d, err
	}
	p := &spawnProbe{probe: &probe{name: "spawns in the box", warm: 1, n: e.scale(10, 3)}}
	p.f = func(ctx context.Context) error {
		empty, err := run(ctx, loop(0))
		if err != nil {
			return err
		}
		full, err := run(ctx, loop(spawnLoop))
		if err != nil {
			return err
		}
		p.per = append(p.per, max(full-empty, 0)/spawnLoop)
		return nil
	}
	return p
}

// echoProbe starts the echo part's container, attached before its start
// as the agent's stdio channel is, and returns the probe of one round trip
// and what removes the container.
func (e *env) echoProbe(ctx context.Context) (*probe, func(), error) {
	cli := e.docker
	cid, err := engineCreateCmd(ctx, cli, e.image, e.runtime, e.labels(), nil, true, "cat")
	remove := func() {
		if cid == "" {
			return
		}
		ctx, cancel := cleanupCtx()
		defer cancel()
		e.removeContainer(ctx, cid)
	}
	if err != nil {
		return nil, remove, err
	}
	att, err := cli.ContainerAttach(ctx, cid, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		remove()
		return nil, nil, fmt.Errorf("attach the echo box: %w", err)
	}
	stop := func() { att.Close(); remove() }
	if _, err := cli.ContainerStart(ctx, cid, client.ContainerStartOptions{}); err != nil {
		stop()
		return nil, nil, fmt.Errorf("start the echo box: %w", err)
	}
	line := append(bytes.Repeat([]byte("x"), 63), '\n')
	got := make([]byte, len(line))
	p := &probe{name: "engine stdio round trip", warm: 20, n: e.scale(300, 60), f: func(context.Context) error {
		if _, err := att.Conn.Write(line); err != nil {
			return err
		}
		if err := readStdout(att.Reader, got); err != nil {
			return fmt.Errorf("echo: %w", err)
		}
		if !bytes.Equal(got, line) {
			return fmt.Errorf("echo returned %q", got)
		}
		return nil
	}}
	return p, stop, nil
}

// readStdout fills buf from the stdout frames of a multiplexed attach
// stream (8-byte headers: stream, 3 zero bytes, big-endian length); any
// other stream's frame is an error here, since cat writes only stdout.
func readStdout(r io.Reader, buf []byte) error {
	var hdr [8]byte
	for len(buf) > 0 {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[4:]))
		if hdr[0] != 1 || n > len(buf) {
			return fmt.Errorf("unexpected frame: stream %d, %d bytes, %d wanted", hdr[0], n, len(buf))
		}
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return err
		}
		buf = buf[n:]
	}
	return nil
}

// boxfloorOps are the operations bench/boxfloor times, in its order.
var boxfloorOps = []string{"read", "write", "edit", "ls", "glob"}

// fileLoop is how many of each operation one file sample runs.
const fileLoop = 20

// boxfloorDir is where the file part's program and fixture live in the box.
const boxfloorDir = sandbox.DefaultWorkingDir + "/.bench-floor"

// fileProbe runs bench/boxfloor in a box: each call records one sample
// per operation in per (the median of fileLoop, as the box timed it).
type fileProbe struct {
	*probe
	per map[string]samples
}

// fileFloor builds bench/boxfloor, uploads it into bx's workspace and
// returns the file part's probe. The fixture stays in the workspace with
// the box, which the caller drops.
func (e *env) fileFloor(ctx context.Context, bx *box) (*fileProbe, error) {
	bin, err := buildStatic(ctx, "github.com/plumbhq/plumb/bench/boxfloor")
	if err != nil {
		return nil, err
	}
	prog := boxfloorDir + "/boxfloor"
	res, err := bx.b.Upload(ctx, []backend.UploadItem{{Path: prog, Content: bin}})
	if err == nil && res[0].Err != nil {
		err = res[0].Err
	}
	if err != nil {
		return nil, fmt.Errorf("upload boxfloor: %w", err)
	}
	if r, err := bx.b.Execute(ctx, backend.ExecuteRequest{Command: "chmod 0755 " + prog}); err != nil || r.ExitCode == nil || *r.ExitCode != 0 {
		return nil, fmt.Errorf("chmod boxfloor: %v %s", err, r.Output)
	}
	// No warm-up call: boxfloor warms each operation up itself.
	p := &fileProbe{probe: &probe{name: "file calls in the box", n: e.scale(15, 5)}, per: map[string]samples{}}
	cmd := fmt.Sprintf("%s %s/data %d", prog, boxfloorDir, fileLoop)
	p.f = func(ctx context.Context) error {
		r, err := bx.b.Execute(ctx, backend.ExecuteRequest{Command: cmd})
		if err != nil {
			return err
		}
		if r.ExitCode == nil || *r.ExitCode != 0 {
			return fmt.Errorf("boxfloor exited %v: %s", r.ExitCode, r.Output)
		}
		got := map[string]time.Duration{}
		for _, line := range strings.Split(strings.TrimSpace(r.Output), "\n") {
			var op string
			var ns int64
			if _, err := fmt.Sscanf(line, "%s %d", &op, &ns); err != nil {
				return fmt.Errorf("boxfloor printed %q: %v", line, err)
			}
			got[op] = time.Duration(ns)
		}
		for _, op := range boxfloorOps {
			d, ok := got[op]
			if !ok {
				return fmt.Errorf("boxfloor printed no %s: %q", op, r.Output)
			}
			p.per[op] = append(p.per[op], d)
		}
		return nil
	}
	return p, nil
}
