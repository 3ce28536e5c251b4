package sandbox_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// runProcess starts command in f, writes stdin and closes it, and returns
// everything the process wrote and how it ended. Both streams are read
// concurrently, as the contract asks.
func runProcess(t *testing.T, f *sandbox.Files, command, stdin string) (string, string, backend.ProcessExit) {
	t.Helper()
	ctx := context.Background()
	p, err := f.StartProcess(ctx, backend.ProcessRequest{Command: command})
	if err != nil {
		t.Fatalf("start %q: %v", command, err)
	}
	defer p.Close()
	var out, errb bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = io.Copy(&out, p.Stdout()) }()
	go func() { defer wg.Done(); _, _ = io.Copy(&errb, p.Stderr()) }()
	if stdin != "" {
		if _, err := io.WriteString(p.Stdin(), stdin); err != nil {
			t.Fatalf("write stdin: %v", err)
		}
	}
	if err := p.Stdin().Close(); err != nil {
		t.Fatalf("close stdin: %v", err)
	}
	exit, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	wg.Wait()
	return out.String(), errb.String(), exit
}

// TestProcessInSandbox: interactive processes through a real box's agent:
// stdin in, stdout and stderr out, exit codes, output far beyond the
// window (credit returned as it is read), signals, Close killing the
// process tree, the per-box limit, and processes ending with their box.
func TestProcessInSandbox(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t)
	info := e.create(t, m, sandbox.CreateSpec{})
	f, err := m.Files(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("stdio", func(t *testing.T) {
		big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB, four windows
		tests := []struct {
			name, command, stdin, wantOut, wantErr string
			wantCode                               int
		}{
			{name: "cat", command: "cat", stdin: "hello\nworld\n", wantOut: "hello\nworld\n"},
			{name: "streams and code", command: "echo out; echo err >&2; exit 7", wantOut: "out\n", wantErr: "err\n", wantCode: 7},
			{name: "beyond the window", command: "cat", stdin: big, wantOut: big},
			{name: "as the sandbox user", command: "id -u", wantOut: "1000\n"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				out, errs, exit := runProcess(t, f, tt.command, tt.stdin)
				if out != tt.wantOut || errs != tt.wantErr || exit.ExitCode != tt.wantCode {
					t.Fatalf("got %d bytes of stdout, stderr %q, exit %+v; want %d bytes, %q, %d", len(out), errs, exit, len(tt.wantOut), tt.wantErr, tt.wantCode)
				}
			})
		}
	})

	t.Run("signal", func(t *testing.T) {
		p, err := f.StartProcess(ctx, backend.ProcessRequest{Command: "exec sleep 1000"})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := p.Signal(ctx, "NOPE"); backend.CodeOf(err) != backend.CodeInvalidArgument {
			t.Fatalf("unknown signal: %v", err)
		}
		if err := p.Signal(ctx, "KILL"); err != nil {
			t.Fatal(err)
		}
		exit, err := p.Wait(ctx)
		if err != nil || exit.Signal != "KILL" || exit.ExitCode != 137 {
			t.Fatalf("exit %+v, %v; want KILL/137", exit, err)
		}
	})

	t.Run("close kills the tree", func(t *testing.T) {
		p, err := f.StartProcess(ctx, backend.ProcessRequest{Command: "setsid sleep 1000 & echo $!; sleep 1000"})
		if err != nil {
			t.Fatal(err)
		}
		line := make([]byte, 32)
		n, err := p.Stdout().Read(line)
		if err != nil {
			t.Fatal(err)
		}
		pid := strings.TrimSpace(string(line[:n]))
		p.Close()
		if _, err := p.Wait(ctx); backend.CodeOf(err) != backend.CodeCancelled {
			t.Fatalf("wait after close: %v", err)
		}
		// The agent kills in the background; a command sees it gone.
		res, err := f.Execute(ctx, backend.ExecuteRequest{Command: "while kill -0 " + pid + " 2>/dev/null; do sleep 0.1; done; echo gone"})
		if err != nil || strings.TrimSpace(res.Output) != "gone" {
			t.Fatalf("the setsid child of a closed process: %+v, %v", res, err)
		}
	})

	t.Run("limit", func(t *testing.T) {
		var ps []backend.Process
		defer func() {
			for _, p := range ps {
				p.Close()
			}
		}()
		for range agentproto.MaxProcesses {
			p, err := f.StartProcess(ctx, backend.ProcessRequest{Command: "cat"})
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		if _, err := f.StartProcess(ctx, backend.ProcessRequest{Command: "cat"}); backend.CodeOf(err) != backend.CodeTooLarge {
			t.Fatalf("process %d: %v, want too_large", agentproto.MaxProcesses+1, err)
		}
		ps[0].Close()
		p, err := f.StartProcess(ctx, backend.ProcessRequest{Command: "cat"})
		if err != nil {
			t.Fatalf("after closing one: %v", err)
		}
		ps[0] = p
	})

	t.Run("bad requests", func(t *testing.T) {
		for _, req := range []backend.ProcessRequest{{Command: " "}, {Command: "true", Cwd: "/nonexistent"}, {Command: "true", Env: map[string]string{"1BAD": "x"}}} {
			if _, err := f.StartProcess(ctx, req); err == nil {
				t.Errorf("%+v started", req)
			}
		}
	})

	t.Run("ends with the sandbox", func(t *testing.T) {
		other := e.create(t, m, sandbox.CreateSpec{})
		of, err := m.Files(other.ID)
		if err != nil {
			t.Fatal(err)
		}
		p, err := of.StartProcess(ctx, backend.ProcessRequest{Command: "cat"})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := m.Delete(ctx, other.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(ctx); err == nil {
			t.Fatal("a process of a deleted sandbox ended without an error")
		}
		if _, err := io.ReadAll(p.Stdout()); err == nil {
			t.Fatal("its stdout ended cleanly")
		}
	})
}
