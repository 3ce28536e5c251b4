package sandbox_test

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// BenchmarkSmallOp compares one small operation through the agent channel
// (one multiplexed exec stream per sandbox) with the per-op baseline of one
// Engine-API exec (create + attach + wait + inspect), on the same sandbox in
// the same run. Compare the sub-benchmarks' ns/op for the ratio.
func BenchmarkSmallOp(b *testing.B) {
	e := newEnvB(b)
	m := e.managerB(b)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.CreateSpec{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Delete(context.Background(), info.ID) })
	f, err := m.Files(info.ID)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.Execute(ctx, backend.ExecuteRequest{Command: "echo hello > /workspace/a.txt"}); err != nil {
		b.Fatal(err)
	}

	b.Run("agent-channel/read", func(b *testing.B) {
		for b.Loop() {
			if _, err := f.Read(ctx, backend.ReadRequest{Path: "/workspace/a.txt", Limit: 10}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("agent-channel/execute-true", func(b *testing.B) {
		for b.Loop() {
			if _, err := f.Execute(ctx, backend.ExecuteRequest{Command: "true"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("engine-exec/true", func(b *testing.B) {
		for b.Loop() {
			engineExec(b, e.cli, info.ContainerID, []string{"true"})
		}
	})
	b.Run("engine-exec/cat", func(b *testing.B) {
		for b.Loop() {
			engineExec(b, e.cli, info.ContainerID, []string{"cat", "/workspace/a.txt"})
		}
	})
}

// engineExec is the per-op baseline: one Engine-API exec, run to completion.
func engineExec(b *testing.B, cli *client.Client, cid string, cmd []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex, err := cli.ExecCreate(ctx, cid, client.ExecCreateOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true, User: sandbox.DefaultUser})
	if err != nil {
		b.Fatal(err)
	}
	att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		b.Fatal(err)
	}
	_, _ = stdcopy.StdCopy(io.Discard, io.Discard, att.Reader)
	att.Close()
	if _, err := cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCreateDiskBound compares the create latency of a box without
// a disk_bytes with one of 64 MiB, which gets its own file system (disk
// helper: sparse image, format, loop attach), alternating the two in one
// run; it reports each one's median as p50-plain-ms and p50-disk-ms.
func BenchmarkCreateDiskBound(b *testing.B) {
	e := newEnvB(b)
	m := e.managerB(b)
	ctx := context.Background()
	var plain, disk []time.Duration
	for b.Loop() {
		for _, d := range []int64{0, 64 << 20} {
			start := time.Now()
			info, err := m.Create(ctx, sandbox.CreateSpec{Overrides: sandbox.Template{DiskBytes: d}})
			took := time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			if d == 0 {
				plain = append(plain, took)
			} else {
				disk = append(disk, took)
			}
			b.StopTimer()
			if err := m.Delete(ctx, info.ID); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(median(plain).Milliseconds()), "p50-plain-ms")
	b.ReportMetric(float64(median(disk).Milliseconds()), "p50-disk-ms")
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
