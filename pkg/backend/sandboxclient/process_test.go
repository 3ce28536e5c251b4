package sandboxclient_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/sandboxclient"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
)

// drain reads both output streams of p concurrently until they end.
func drain(p backend.Process) (stdout, stderr *bytes.Buffer, wait func() error) {
	stdout, stderr = new(bytes.Buffer), new(bytes.Buffer)
	var wg sync.WaitGroup
	var errs [2]error
	wg.Add(2)
	go func() { defer wg.Done(); _, errs[0] = io.Copy(stdout, p.Stdout()) }()
	go func() { defer wg.Done(); _, errs[1] = io.Copy(stderr, p.Stderr()) }()
	return stdout, stderr, func() error { wg.Wait(); return errors.Join(errs[:]...) }
}

// TestProcessThroughGRPC: interactive processes through SandboxService's
// Process stream, under every runtime: stdin round trips, separate
// streams, output beyond every buffer on the way, signals, closing, bad
// requests, and a process ending with its sandbox.
func TestProcessThroughGRPC(t *testing.T) {
	for _, rt := range sandboxtest.Runtimes(t, sandboxtest.Docker(t)) {
		t.Run(rt, func(t *testing.T) { testProcessThroughGRPC(t, rt) })
	}
}

func testProcessThroughGRPC(t *testing.T, runtime string) {
	w := newWorldOn(t, "", runtime)
	b := sandboxclient.New(w.conn, w.sb.GetId(), sandboxclient.HomeOf(w.sb))
	ctx := context.Background()

	t.Run("stdio", func(t *testing.T) {
		big := strings.Repeat("plumb process\n", 300000) // 4.2 MB
		tests := []struct {
			name, command, stdin, wantOut, wantErr string
			wantCode                               int
		}{
			{name: "cat", command: "cat", stdin: "one\ntwo\n", wantOut: "one\ntwo\n"},
			{name: "streams", command: "echo out; echo err >&2; exit 4", wantOut: "out\n", wantErr: "err\n", wantCode: 4},
			{name: "large both ways", command: "cat; cat /dev/null >&2", stdin: big, wantOut: big},
			{name: "env and cwd", command: "echo $X $PWD", wantOut: "y /tmp\n"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				req := backend.ProcessRequest{Command: tt.command}
				if tt.name == "env and cwd" {
					req.Env, req.Cwd = map[string]string{"X": "y"}, "/tmp"
				}
				p, err := b.StartProcess(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				out, errb, done := drain(p)
				if _, err := io.WriteString(p.Stdin(), tt.stdin); err != nil {
					t.Fatal(err)
				}
				if err := p.Stdin().Close(); err != nil {
					t.Fatal(err)
				}
				exit, err := p.Wait(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := done(); err != nil {
					t.Fatal(err)
				}
				if out.String() != tt.wantOut || errb.String() != tt.wantErr || exit.ExitCode != tt.wantCode {
					t.Fatalf("stdout %d bytes, stderr %q, exit %+v; want %d bytes, %q, %d", out.Len(), errb.String(), exit, len(tt.wantOut), tt.wantErr, tt.wantCode)
				}
			})
		}
	})

	t.Run("signal and close", func(t *testing.T) {
		p, err := b.StartProcess(ctx, backend.ProcessRequest{Command: "trap 'echo got INT; exit 9' INT; echo ready; while :; do sleep 1; done"})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		line := make([]byte, 6)
		if _, err := io.ReadFull(p.Stdout(), line); err != nil || string(line) != "ready\n" {
			t.Fatalf("read %q, %v", line, err)
		}
		if err := p.Signal(ctx, "SIGINT"); backend.CodeOf(err) != backend.CodeInvalidArgument {
			t.Fatalf("bad signal name: %v", err)
		}
		if err := p.Signal(ctx, "INT"); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(p.Stdout())
		if err != nil || string(rest) != "got INT\n" {
			t.Fatalf("after INT: %q, %v", rest, err)
		}
		if exit, err := p.Wait(ctx); err != nil || exit.ExitCode != 9 {
			t.Fatalf("exit %+v, %v", exit, err)
		}

		// Closing the client's stream kills the process in the box.
		p2, err := b.StartProcess(ctx, backend.ProcessRequest{Command: "echo $$; exec sleep 1000"})
		if err != nil {
			t.Fatal(err)
		}
		pid := make([]byte, 16)
		n, err := p2.Stdout().Read(pid)
		if err != nil {
			t.Fatal(err)
		}
		if err := p2.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := p2.Wait(ctx); err == nil {
			t.Fatal("a closed process waited without an error")
		}
		proc := "/proc/" + strings.TrimSpace(string(pid[:n]))
		res, err := b.Execute(ctx, backend.ExecuteRequest{Command: "while [ -d " + proc + " ] && ! grep -qs '^State:.*Z' " + proc + "/status; do sleep 0.1; done; echo gone"})
		if err != nil || strings.TrimSpace(res.Output) != "gone" {
			t.Fatalf("a closed process in the box: %+v, %v", res, err)
		}
	})

	t.Run("bad start", func(t *testing.T) {
		if _, err := b.StartProcess(ctx, backend.ProcessRequest{Command: "true", Cwd: "/no/such/dir"}); backend.CodeOf(err) != backend.CodeFileNotFound {
			t.Fatalf("missing cwd: %v", err)
		}
		other := sandboxclient.New(w.conn, w.sb.GetId()+"x", "/")
		if _, err := other.StartProcess(ctx, backend.ProcessRequest{Command: "true"}); !errors.Is(err, sandboxclient.ErrGone) {
			t.Fatalf("unknown sandbox: %v", err)
		}
	})

	t.Run("ends with the sandbox", func(t *testing.T) {
		p, err := b.StartProcess(ctx, backend.ProcessRequest{Command: "cat"})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if _, err := plumbv1.NewSandboxServiceClient(w.conn).DeleteSandbox(ctx, &plumbv1.DeleteSandboxRequest{SandboxId: w.sb.GetId()}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(ctx); err == nil {
			t.Fatal("the process of a deleted sandbox ended without an error")
		}
	})
}
