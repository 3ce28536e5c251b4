package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/plumbhq/plumb/pkg/sandbox"
)

// The baselines below talk to the Engine API directly, the way a sandbox
// system without an in-container agent does: one exec (create + attach +
// inspect) per operation, or the archive endpoints for copies.

// execResult is one finished Engine-API exec.
type execResult struct {
	stdout, stderr []byte
	exitCode       int
	// firstByte is when the first stdout bytes were demultiplexed (zero
	// when there were none).
	firstByte time.Time
}

// engineExec runs cmd in container cid as the sandbox user: ExecCreate,
// ExecAttach (read to EOF, demultiplexed), ExecInspect for the exit code.
func engineExec(ctx context.Context, cli *client.Client, cid string, cmd ...string) (execResult, error) {
	return engineExecTo(ctx, cli, cid, nil, cmd...)
}

// engineExecTo is engineExec with stdout sent to w instead of kept.
func engineExecTo(ctx context.Context, cli *client.Client, cid string, w io.Writer, cmd ...string) (execResult, error) {
	ex, err := cli.ExecCreate(ctx, cid, client.ExecCreateOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true, User: sandbox.DefaultUser})
	if err != nil {
		return execResult{}, fmt.Errorf("exec create: %w", err)
	}
	att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return execResult{}, fmt.Errorf("exec attach: %w", err)
	}
	var res execResult
	var out, errb bytes.Buffer
	sink := io.Writer(&out)
	if w != nil {
		sink = w
	}
	_, err = stdcopy.StdCopy(&firstWrite{w: sink, at: &res.firstByte}, &errb, att.Reader)
	att.Close()
	if err != nil {
		return execResult{}, fmt.Errorf("exec output: %w", err)
	}
	ins, err := cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
	if err != nil {
		return execResult{}, fmt.Errorf("exec inspect: %w", err)
	}
	res.stdout, res.stderr, res.exitCode = out.Bytes(), errb.Bytes(), ins.ExitCode
	return res, nil
}

// removeContainer force-removes the engine container cid with its
// anonymous volumes (untimed cleanup: an error only reaches the log, and
// the leftover check at the end catches what stayed).
func (e *env) removeContainer(ctx context.Context, cid string) {
	if _, err := e.docker.ContainerRemove(ctx, cid, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
		e.log("remove container %s: %v", cid, err)
	}
}

// engineExecOK is engineExec that fails unless the command exits 0.
func engineExecOK(ctx context.Context, cli *client.Client, cid string, cmd ...string) ([]byte, error) {
	r, err := engineExec(ctx, cli, cid, cmd...)
	if err != nil {
		return nil, err
	}
	if r.exitCode != 0 {
		return nil, fmt.Errorf("%q exited %d: %s", cmd, r.exitCode, r.stderr)
	}
	return r.stdout, nil
}

// firstWrite records when the first bytes pass through.
type firstWrite struct {
	w  io.Writer
	at *time.Time
}

func (f *firstWrite) Write(p []byte) (int, error) {
	if f.at.IsZero() && len(p) > 0 {
		*f.at = time.Now()
	}
	return f.w.Write(p)
}

// countWriter counts bytes.
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}
