package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/moby/moby/api/types/mount"
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
//   - served: one request over the engine's stdio attach to a process in
//     a box, answered after it made the operation's own system calls: a
//     container of the same image, runtime and hardening, no engine log (as
//     plumb's boxes: LogConfig none), with the
//     sandbox's workspace volume mounted, attached before its start the
//     way the agent's channel is, whose PID 1 is bench/boxfloor.
//     A request is 64 bytes out and the same 64 bytes back; B1's make the
//     operation's calls on the workspace volume in between (read, write
//     and edit open the file's directory and close it after; read is
//     fstatat, openat, fstat, read, close; write fstatat and a plain
//     atomic write of 4 KiB; edit both; ls and glob a getdents of the
//     directory and an fstatat of each entry reported), B2's none (echo).
//     Every call is raw, on one processor, as a server in C makes them.
//     Under gVisor each is served by the sentry, and a server woken by
//     its channel pays what the runtime charges a woken thread; the
//     host's file system alone would show neither;
//   - relayed: the rpc and served parts composed, timed as one call (see
//     relay): what a call that waits on its box pays for being a gRPC
//     call, which the two parts timed apart undercount;
//   - spawn (B2): starting /bin/sh -c true inside the sandbox itself, timed
//     by the box's shell as a loop of spawns minus the same loop empty.
//
// The floor of a call is its relayed part's median (plus the spawn part's
// for B2); the sum of the rpc and served medians is reported beside it.
type callFloor struct {
	rpc     *probe
	served  map[string]*probe // by boxfloor operation
	relayed map[string]*probe // by boxfloor operation
	spawn   *spawnProbe       // B2 only
	stop    func()
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

// boxfloorOps are B1's operations as bench/boxfloor names them;
// B2's floor serves opEcho.
var boxfloorOps = []string{"read", "write", "edit", "ls", "glob"}

const opEcho = "echo"

// newCallFloor starts the floor's probes for calls to box bx: B1's
// (b2 false) with a served part per file operation, B2's with the echo
// and the spawn parts. stop removes the floor's container.
func (e *env) newCallFloor(ctx context.Context, bx *box, b2 bool) (*callFloor, error) {
	rpc := &probe{name: "loopback gRPC call answered at once", warm: 20, n: e.scale(300, 60), f: func(ctx context.Context) error {
		_, err := bx.w.c.GetSandbox(ctx, &plumbv1.GetSandboxRequest{SandboxId: "sb-bench-floor-none"})
		if status.Code(err) != codes.NotFound {
			return fmt.Errorf("GetSandbox of an unknown id: %v, want NotFound", err)
		}
		return nil
	}}
	ops := boxfloorOps
	if b2 {
		ops = []string{opEcho}
	}
	served, relayed, stop, err := e.servedProbes(ctx, bx, ops)
	if err != nil {
		return nil, err
	}
	f := &callFloor{rpc: rpc, served: served, relayed: relayed, stop: stop}
	if b2 {
		f.spawn = e.spawnFloor(bx)
	}
	return f, nil
}

// probes are the floor's probes, to interleave with the row's.
func (f *callFloor) probes() []*probe {
	ps := []*probe{f.rpc}
	for _, op := range f.ops() {
		ps = append(ps, f.served[op], f.relayed[op])
	}
	if f.spawn != nil {
		ps = append(ps, f.spawn.probe)
	}
	return ps
}

// ops are the served operations in their order.
func (f *callFloor) ops() []string {
	if _, ok := f.served[opEcho]; ok {
		return []string{opEcho}
	}
	return boxfloorOps
}

// p50 is the floor of a call in milliseconds with op's (a boxfloor
// operation's) served part: the relayed part's median, plus the spawn
// part's for B2. sum is the same with the rpc and served parts' medians
// added instead of the relayed one.
func (f *callFloor) p50(op string) (floor, sum float64) {
	ms := func(s samples) float64 { return float64(s.p50()) / float64(time.Millisecond) }
	floor, sum = ms(f.relayed[op].got), ms(f.rpc.got)+ms(f.served[op].got)
	if f.spawn != nil {
		floor += ms(f.spawn.per)
		sum += ms(f.spawn.per)
	}
	return floor, sum
}

// rows are the floor's parts as info rows of scenario id.
func (f *callFloor) rows(id string) []Row {
	part := func(name string, s samples) Row {
		r := latencyRow(id, "floor part: "+name, unitMs, s)
		r.Target, r.Verdict = "— (what every call pays; see the judged rows)", verdictInfo
		return r
	}
	rows := []Row{part("loopback gRPC call the worker answers at once", f.rpc.got)}
	for _, op := range f.ops() {
		what := "engine stdio round trip to a box's PID 1 (bench/boxfloor, 64 B)"
		if op != opEcho {
			what = "engine stdio round trip to a box's PID 1 that makes the " + op + " operation's own system calls on the workspace volume (bench/boxfloor)"
		}
		rows = append(rows, part(what, f.served[op].got),
			part("the two above composed: one loopback gRPC call whose handler makes that round trip (the floor)", f.relayed[op].got))
	}
	if f.spawn != nil {
		r := part("start /bin/sh -c true in the box (its shell's loop of spawns)", f.spawn.per)
		r.OpsPerSec = 0
		r.note("each sample: Execute of a loop of %d `/bin/sh -c true` minus Execute of the same loop empty, divided by %d", spawnLoop, spawnLoop)
		rows = append(rows, r)
	}
	return rows
}

// judgeAtFloor sets r's verdict: pass when met(r's p50, its ratio) holds,
// verdictFloor when it does not and the floor fl (ms) would not meet it
// either, miss otherwise. The floor is added as a baseline (ratio = floor
// ÷ plumb: how close plumb is to it) and its verdict explained; sum, the
// floor's parts timed apart, is noted beside it.
func (r *Row) judgeAtFloor(fl, sum, baseline float64, met func(p50, ratio float64) bool) {
	r.vsLatency("floor (same run): the composed part's p50 below", Row{P50: fl})
	r.note("the floor's parts timed apart sum to %s", fmtVal(sum, unitMs))
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

// floorLine is the size of a boxfloor request and of its answer.
const floorLine = 64

// boxfloorDir is where the floor's program and fixture live in the box.
const boxfloorDir = sandbox.DefaultWorkingDir + "/.bench-floor"

// servedProbes builds bench/boxfloor, uploads it into bx's workspace and
// starts the floor's container on that workspace volume, attached before
// its start as the agent's stdio channel is, with boxfloor as its
// PID 1. It returns two probes per operation in ops, one request each,
// made directly (served) and through a relay (relayed), and what removes
// the container and the relay; the program and its fixture stay in the
// workspace with the box, which the caller drops.
func (e *env) servedProbes(ctx context.Context, bx *box, ops []string) (served, relayed map[string]*probe, stop func(), err error) {
	bin, err := buildStatic(ctx, "github.com/plumbhq/plumb/bench/boxfloor")
	if err != nil {
		return nil, nil, nil, err
	}
	prog := boxfloorDir + "/boxfloor"
	res, err := bx.b.Upload(ctx, []backend.UploadItem{{Path: prog, Content: bin}})
	if err == nil && res[0].Err != nil {
		err = res[0].Err
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("upload boxfloor: %w", err)
	}
	// The floor's box runs as the sandbox user, which may not be whom the
	// box's files belong to (an unhardened box's are root's).
	chmod := fmt.Sprintf("chmod 0755 %s && chmod 0777 %s", prog, boxfloorDir)
	if r, err := bx.b.Execute(ctx, backend.ExecuteRequest{Command: chmod}); err != nil || r.ExitCode == nil || *r.ExitCode != 0 {
		return nil, nil, nil, fmt.Errorf("chmod boxfloor: %v %s", err, r.Output)
	}
	vol, err := e.workspaceVolume(ctx, bx)
	if err != nil {
		return nil, nil, nil, err
	}
	cli := e.docker
	mounts := []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: sandbox.DefaultWorkingDir}}
	cid, err := engineCreateCmd(ctx, cli, e.image, e.runtime, e.labels(), mounts, true, prog, boxfloorDir+"/data")
	remove := func() {
		if cid == "" {
			return
		}
		ctx, cancel := cleanupCtx()
		defer cancel()
		e.removeContainer(ctx, cid)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	att, err := cli.ContainerAttach(ctx, cid, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		remove()
		return nil, nil, nil, fmt.Errorf("attach the floor's box: %w", err)
	}
	rl, err := newRelay(att)
	if err != nil {
		att.Close()
		remove()
		return nil, nil, nil, fmt.Errorf("the floor's relay: %w", err)
	}
	stop = func() { rl.close(); att.Close(); remove() }
	if _, err := cli.ContainerStart(ctx, cid, client.ContainerStartOptions{}); err != nil {
		stop()
		return nil, nil, nil, fmt.Errorf("start the floor's box: %w", err)
	}
	served, relayed = map[string]*probe{}, map[string]*probe{}
	for _, op := range ops {
		line := []byte(fmt.Sprintf("%-*s\n", floorLine-1, op))
		served[op] = &probe{name: "served " + op, warm: 20, n: e.scale(300, 60), f: func(context.Context) error {
			got, err := rl.roundTrip(line)
			if err == nil && !bytes.Equal(got, line) {
				err = fmt.Errorf("boxfloor answered %q", got)
			}
			return err
		}}
		relayed[op] = &probe{name: "relayed " + op, warm: 20, n: e.scale(300, 60), f: func(ctx context.Context) error {
			return rl.call(ctx, line)
		}}
	}
	return served, relayed, stop, nil
}

// workspaceVolume is the engine volume mounted at bx's workspace.
func (e *env) workspaceVolume(ctx context.Context, bx *box) (string, error) {
	res, err := e.docker.ContainerInspect(ctx, bx.cid, client.ContainerInspectOptions{})
	if err != nil {
		return "", err
	}
	for _, m := range res.Container.Mounts {
		if m.Destination == sandbox.DefaultWorkingDir && m.Name != "" {
			return m.Name, nil
		}
	}
	return "", fmt.Errorf("sandbox %s has no volume at %s", bx.id, sandbox.DefaultWorkingDir)
}

// readStdout fills buf from the stdout frames of a multiplexed attach
// stream (8-byte headers: stream, 3 zero bytes, big-endian length); any
// other stream's frame is an error here, since the floor's PID 1 writes
// only stdout.
func readStdout(r io.Reader, buf []byte) error {
	var hdr [8]byte
	for len(buf) > 0 {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[4:]))
		if hdr[0] != 1 || n > len(buf) {
			got := make([]byte, min(n, 256))
			_, _ = io.ReadFull(r, got)
			return fmt.Errorf("unexpected frame: stream %d, %d bytes, %d wanted: %q", hdr[0], n, len(buf), got)
		}
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return err
		}
		buf = buf[n:]
	}
	return nil
}
