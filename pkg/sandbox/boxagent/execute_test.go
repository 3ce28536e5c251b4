package boxagent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// These tests run commands with the host's /bin/sh: the same code runs in
// the container.
func requireShell(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(Shell); err != nil {
		t.Skipf("no %s on this machine", Shell)
	}
}

// TestExecute covers docs/file-tools.md §7 cases 62–70 and the validation rules
// of §4.8 whose results are immediate.
func TestExecute(t *testing.T) {
	requireShell(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sub", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "file.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(root, "workspace")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	c := startAgent(t, Config{Root: root, Workspace: ws})

	tests := []struct {
		name    string
		req     backend.ExecuteRequest
		want    string // exact output
		code    int
		wantErr backend.Code
		errText string // substring of the error message
		maxTime time.Duration
	}{
		{name: "62 echo", req: backend.ExecuteRequest{Command: "echo hi"}, want: "hi\n"},
		{name: "63 stdout then stderr in order, exit 3", req: backend.ExecuteRequest{Command: "echo out; echo err 1>&2; exit 3"}, want: "out\nerr\n", code: 3},
		{name: "interleaving is the true order", req: backend.ExecuteRequest{Command: "echo 1; echo 2 >&2; echo 3; echo 4 >&2"}, want: "1\n2\n3\n4\n"},
		{name: "no output", req: backend.ExecuteRequest{Command: "true"}, want: ""},
		{name: "67 empty command", req: backend.ExecuteRequest{Command: ""}, wantErr: backend.CodeInvalidArgument},
		{name: "67 blank command", req: backend.ExecuteRequest{Command: "   \t\n "}, wantErr: backend.CodeInvalidArgument},
		{name: "command over 100000 bytes", req: backend.ExecuteRequest{Command: "#" + strings.Repeat("x", backend.ExecuteMaxCommandBytes)}, wantErr: backend.CodeTooLarge, errText: "write_file"},
		{name: "command of exactly 100000 bytes runs", req: backend.ExecuteRequest{Command: "echo ok #" + strings.Repeat("x", backend.ExecuteMaxCommandBytes-9)}, want: "ok\n"},
		{name: "NUL in command", req: backend.ExecuteRequest{Command: "echo a\x00b"}, wantErr: backend.CodeInvalidArgument},
		{name: "68 pwd is the workspace", req: backend.ExecuteRequest{Command: "pwd"}, want: ws + "\n"},
		{name: "68 env var", req: backend.ExecuteRequest{Command: "echo $FOO", Env: map[string]string{"FOO": "bar"}}, want: "bar\n"},
		{name: "68 bad env key", req: backend.ExecuteRequest{Command: "true", Env: map[string]string{"1A": "x"}}, wantErr: backend.CodeInvalidArgument, errText: "1A"},
		{name: "env key with dash", req: backend.ExecuteRequest{Command: "true", Env: map[string]string{"A-B": "x"}}, wantErr: backend.CodeInvalidArgument},
		{name: "empty env key", req: backend.ExecuteRequest{Command: "true", Env: map[string]string{"": "x"}}, wantErr: backend.CodeInvalidArgument},
		{name: "NUL in env value", req: backend.ExecuteRequest{Command: "true", Env: map[string]string{"A": "x\x00y"}}, wantErr: backend.CodeInvalidArgument},
		{name: "base env is inherited", req: backend.ExecuteRequest{Command: "echo $PLUMB_BASE"}, want: "base\n"},
		{name: "request env overrides base", req: backend.ExecuteRequest{Command: "echo $PLUMB_BASE", Env: map[string]string{"PLUMB_BASE": "over"}}, want: "over\n"},
		{name: "host env does not leak", req: backend.ExecuteRequest{Command: "echo \"[$PLUMB_HOST_SECRET]\""}, want: "[]\n"},
		{name: "stdin is /dev/null", req: backend.ExecuteRequest{Command: "cat; echo done"}, want: "done\n"},
		{name: "cwd under the root", req: backend.ExecuteRequest{Command: "pwd", Cwd: "sub/./dir/"}, want: filepath.Join(root, "sub", "dir") + "\n"},
		{name: "cwd / is the root", req: backend.ExecuteRequest{Command: "pwd", Cwd: "/"}, want: root + "\n"},
		{name: "cwd missing", req: backend.ExecuteRequest{Command: "pwd", Cwd: "/missing"}, wantErr: backend.CodeFileNotFound, errText: "/missing"},
		{name: "cwd is a file", req: backend.ExecuteRequest{Command: "pwd", Cwd: "/file.txt"}, wantErr: backend.CodeNotADirectory},
		{name: "cwd traversal", req: backend.ExecuteRequest{Command: "pwd", Cwd: "/sub/../.."}, wantErr: backend.CodeInvalidPath},
		{name: "65 timeout -1", req: backend.ExecuteRequest{Command: "true", TimeoutSeconds: intp(-1)}, wantErr: backend.CodeInvalidArgument, errText: "3600"},
		{name: "65 timeout 3601", req: backend.ExecuteRequest{Command: "true", TimeoutSeconds: intp(3601)}, wantErr: backend.CodeInvalidArgument, errText: "3600"},
		{name: "65 timeout 0 is the maximum", req: backend.ExecuteRequest{Command: "echo ok", TimeoutSeconds: intp(0)}, want: "ok\n"},
		{name: "timeout 3600", req: backend.ExecuteRequest{Command: "echo ok", TimeoutSeconds: intp(3600)}, want: "ok\n"},
		{name: "max_output_bytes negative", req: backend.ExecuteRequest{Command: "true", MaxOutputBytes: -1}, wantErr: backend.CodeInvalidArgument},
		{name: "max_output_bytes too large", req: backend.ExecuteRequest{Command: "true", MaxOutputBytes: MaxInlineOutput + 1}, wantErr: backend.CodeInvalidArgument},
		{name: "69 kill -9 $$", req: backend.ExecuteRequest{Command: "kill -9 $$"}, code: 137},
		{name: "killed by SIGTERM", req: backend.ExecuteRequest{Command: "echo before; kill -TERM $$"}, want: "before\n", code: 143},
		{name: "exit 255", req: backend.ExecuteRequest{Command: "exit 255"}, code: 255},
		{name: "command not found", req: backend.ExecuteRequest{Command: "plumb-no-such-command-xyz 2>/dev/null"}, code: 127},
		{name: "invalid UTF-8 becomes U+FFFD", req: backend.ExecuteRequest{Command: `printf 'a\377b\342\202'`}, want: "a\uFFFDb\uFFFD\uFFFD"},
		{name: "offload_path traversal", req: backend.ExecuteRequest{Command: "true", OffloadPath: "../x"}, wantErr: backend.CodeInvalidPath},
		{name: "offload_path root", req: backend.ExecuteRequest{Command: "true", OffloadPath: "/"}, wantErr: backend.CodeInvalidPath},
		{name: "offload_path is a directory", req: backend.ExecuteRequest{Command: "true", OffloadPath: "/sub"}, wantErr: backend.CodeIsDirectory},
		{name: "offload_path under a file", req: backend.ExecuteRequest{Command: "true", OffloadPath: "/file.txt/out"}, wantErr: backend.CodeNotADirectory},
	}
	t.Setenv("PLUMB_HOST_SECRET", "leaked")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := c.on(t)
			res, e := c.execute(tt.req)
			if tt.wantErr != "" {
				if e == nil || e.Code != tt.wantErr {
					t.Fatalf("got result %+v err %v, want error %s", res, e, tt.wantErr)
				}
				if !strings.Contains(e.Message, tt.errText) {
					t.Fatalf("error message %q does not mention %q", e.Message, tt.errText)
				}
				return
			}
			if e != nil {
				t.Fatalf("unexpected error %v", e)
			}
			if res.Output != tt.want || res.ExitCode == nil || *res.ExitCode != tt.code || res.TimedOut || res.Truncated {
				t.Fatalf("got output %q exit %v timed_out %v truncated %v; want %q exit %d", res.Output, deref(res.ExitCode), res.TimedOut, res.Truncated, tt.want, tt.code)
			}
			if (!strings.ContainsRune(tt.want, utf8.RuneError) && res.OutputBytes != int64(len(tt.want))) || res.DurationMS < 0 {
				t.Fatalf("output_bytes %d, duration_ms %d", res.OutputBytes, res.DurationMS)
			}
		})
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestExecuteTimeoutSelection checks which timeout each timeout_s selects
// (docs/file-tools.md §7 case 65) without waiting for it.
func TestExecuteTimeoutSelection(t *testing.T) {
	tests := []struct {
		name    string
		max     time.Duration
		timeout *int
		want    time.Duration
		wantErr bool
	}{
		{name: "null is 120 s", timeout: nil, want: 120 * time.Second},
		{name: "0 is the maximum", timeout: intp(0), want: 3600 * time.Second},
		{name: "5", timeout: intp(5), want: 5 * time.Second},
		{name: "3600", timeout: intp(3600), want: 3600 * time.Second},
		{name: "-1", timeout: intp(-1), wantErr: true},
		{name: "3601", timeout: intp(3601), wantErr: true},
		{name: "configured max: 0", max: 60 * time.Second, timeout: intp(0), want: 60 * time.Second},
		{name: "configured max: null is capped", max: 60 * time.Second, timeout: nil, want: 60 * time.Second},
		{name: "configured max: 61", max: 60 * time.Second, timeout: intp(61), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &server{cfg: Config{Root: "/", Workspace: "/", MaxExecuteTimeout: tt.max, Env: []string{}}.withDefaults()}
			var err error
			s.root, err = os.OpenRoot("/")
			if err != nil {
				t.Fatal(err)
			}
			defer s.root.Close()
			p, err := s.plan(backend.ExecuteRequest{Command: "true", TimeoutSeconds: tt.timeout})
			if tt.wantErr {
				if backend.CodeOf(err) != backend.CodeInvalidArgument {
					t.Fatalf("err %v, want invalid_argument", err)
				}
				return
			}
			if err != nil || p.timeout != tt.want {
				t.Fatalf("timeout %v err %v, want %v", p.timeout, err, tt.want)
			}
		})
	}
}

// TestExecuteTimeout is docs/file-tools.md §7 case 64, plus a timeout selected by 0 under a
// small configured maximum.
func TestExecuteTimeout(t *testing.T) {
	requireShell(t)
	tests := []struct {
		name    string
		max     time.Duration
		req     backend.ExecuteRequest
		min     time.Duration
		wantOut string
	}{
		{name: "64 sleep 5 timeout 1", req: backend.ExecuteRequest{Command: "echo before; sleep 5; echo after", TimeoutSeconds: intp(1)}, min: time.Second, wantOut: "before\n"},
		{name: "0 selects the configured maximum", max: time.Second, req: backend.ExecuteRequest{Command: "sleep 5", TimeoutSeconds: intp(0)}, min: time.Second},
		{name: "SIGTERM ignored: SIGKILL after the grace", req: backend.ExecuteRequest{Command: "trap '' TERM; echo trapped; while :; do sleep 0.1; done", TimeoutSeconds: intp(1)}, min: time.Second + backend.KillGrace, wantOut: "trapped\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := startAgent(t, Config{MaxExecuteTimeout: tt.max})
			start := time.Now()
			res, e := c.execute(tt.req)
			took := time.Since(start)
			if e != nil {
				t.Fatal(e)
			}
			if !res.TimedOut || res.ExitCode == nil || *res.ExitCode != 124 || res.Output != tt.wantOut {
				t.Fatalf("got %+v (exit %v), want timed_out, exit 124, output %q", res, deref(res.ExitCode), tt.wantOut)
			}
			// docs/file-tools.md §7 64: within timeout + kill grace + 1 s.
			if took < tt.min || took > tt.min+backend.KillGrace+time.Second {
				t.Fatalf("returned after %v, want between %v and %v", took, tt.min, tt.min+backend.KillGrace+time.Second)
			}
		})
	}
}

// TestExecuteTimeoutKillsProcessGroup checks that a background grandchild
// in the command's process group dies at the timeout.
func TestExecuteTimeoutKillsProcessGroup(t *testing.T) {
	requireShell(t)
	c := startAgent(t, Config{})
	res, e := c.execute(backend.ExecuteRequest{
		Command:        `sh -c 'echo $$; exec sleep 100' & sleep 100`,
		TimeoutSeconds: intp(1),
	})
	if e != nil {
		t.Fatal(e)
	}
	if !res.TimedOut {
		t.Fatalf("not timed out: %+v", res)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(res.Output))
	if err != nil {
		t.Fatalf("output %q is not the grandchild's pid", res.Output)
	}
	if !processGone(pid, 5*time.Second) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("grandchild %d still runs after the timeout", pid)
	}
}

// TestExecuteBackgroundChild is docs/file-tools.md §7 case 70: a background child that keeps
// the output pipe open does not hold the call open.
func TestExecuteBackgroundChild(t *testing.T) {
	requireShell(t)
	c := startAgent(t, Config{})
	start := time.Now()
	res, e := c.execute(backend.ExecuteRequest{Command: "sleep 30 & echo started $!"})
	took := time.Since(start)
	if e != nil {
		t.Fatal(e)
	}
	f := strings.Fields(res.Output)
	if len(f) != 2 || f[0] != "started" || res.ExitCode == nil || *res.ExitCode != 0 || res.TimedOut {
		t.Fatalf("got %+v, want output \"started <pid>\" and exit 0", res)
	}
	pid, _ := strconv.Atoi(f[1])
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if took >= 4*time.Second {
		t.Fatalf("returned after %v, want < 4 s", took)
	}
	// The child is left running: the sandbox is the boundary.
	if processGone(pid, 0) {
		t.Fatalf("background child %d was killed", pid)
	}
}

// TestExecuteTruncationAndOffload is docs/file-tools.md §7 case 66 and the offload rules.
func TestExecuteTruncationAndOffload(t *testing.T) {
	requireShell(t)
	root := t.TempDir()
	c := startAgent(t, Config{Root: root})

	// 3000 numbered lines of 100 bytes: 300,000 bytes.
	const gen = `i=0; while [ $i -lt 3000 ]; do printf 'line %05d %s\n' $i xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done`
	var want bytes.Buffer
	for i := range 3000 {
		fmt.Fprintf(&want, "line %05d %s\n", i, strings.Repeat("x", 88))
	}
	if want.Len() != 300000 {
		t.Fatalf("generator makes %d bytes", want.Len())
	}

	t.Run("66 truncated with offload", func(t *testing.T) {
		c := c.on(t)
		res, e := c.execute(backend.ExecuteRequest{Command: gen, OffloadPath: "large/./out.txt"})
		if e != nil {
			t.Fatal(e)
		}
		if !res.Truncated || res.OutputBytes != 300000 || res.OffloadedPath != "/large/out.txt" || res.CaptureTruncated {
			t.Fatalf("got truncated %v output_bytes %d offloaded %q capture_truncated %v", res.Truncated, res.OutputBytes, res.OffloadedPath, res.CaptureTruncated)
		}
		checkHeadTail(t, res.Output, want.Bytes(), backend.ExecuteInlineOutput)
		got, err := os.ReadFile(filepath.Join(root, "large", "out.txt"))
		if err != nil || !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("offload file: %d bytes, err %v; want the 300,000-byte stream", len(got), err)
		}
	})
	t.Run("truncated without offload", func(t *testing.T) {
		c := c.on(t)
		res, e := c.execute(backend.ExecuteRequest{Command: gen, MaxOutputBytes: 10000})
		if e != nil {
			t.Fatal(e)
		}
		if !res.Truncated || res.OffloadedPath != "" {
			t.Fatalf("got %+v", res)
		}
		checkHeadTail(t, res.Output, want.Bytes(), 10000)
	})
	t.Run("fits: offload file removed", func(t *testing.T) {
		c := c.on(t)
		res, e := c.execute(backend.ExecuteRequest{Command: "echo small", OffloadPath: "/small.txt"})
		if e != nil {
			t.Fatal(e)
		}
		if res.Truncated || res.OffloadedPath != "" || res.Output != "small\n" {
			t.Fatalf("got %+v", res)
		}
		if _, err := os.Lstat(filepath.Join(root, "small.txt")); !os.IsNotExist(err) {
			t.Fatalf("offload file kept (lstat err %v)", err)
		}
	})
	t.Run("exactly max_output_bytes is not truncated", func(t *testing.T) {
		c := c.on(t)
		res, e := c.execute(backend.ExecuteRequest{Command: "printf '%0100d' 0", MaxOutputBytes: 100})
		if e != nil {
			t.Fatal(e)
		}
		if res.Truncated || len(res.Output) != 100 {
			t.Fatalf("got truncated %v, %d bytes", res.Truncated, len(res.Output))
		}
	})
	t.Run("capture stops at 10 MiB", func(t *testing.T) {
		c := c.on(t)
		res, e := c.execute(backend.ExecuteRequest{Command: "head -c 11000000 /dev/zero | tr '\\0' z", OffloadPath: "/big.txt"})
		if e != nil {
			t.Fatal(e)
		}
		fi, err := os.Stat(filepath.Join(root, "big.txt"))
		if err != nil || fi.Size() != backend.ExecuteCaptureMax || !res.CaptureTruncated || res.OutputBytes != 11000000 || !res.Truncated {
			t.Fatalf("offload size %v err %v; result truncated %v capture_truncated %v output_bytes %d", fi.Size(), err, res.Truncated, res.CaptureTruncated, res.OutputBytes)
		}
		if len(res.Output) > backend.ExecuteInlineOutput {
			t.Fatalf("inline output %d bytes", len(res.Output))
		}
	})
}

var markerRE = regexp.MustCompile(`(?m)^\[\.\.\. (\d+) bytes of output omitted \.\.\.\]\n`)

// checkHeadTail verifies a truncated ASCII output: at most max bytes, a
// prefix of stream, one marker line whose count matches, a suffix of
// stream, and head and tail within one line of even.
func checkHeadTail(t *testing.T, out string, stream []byte, max int) {
	t.Helper()
	if len(out) > max {
		t.Fatalf("inline output is %d bytes, over %d", len(out), max)
	}
	loc := markerRE.FindStringSubmatchIndex(out)
	if loc == nil {
		t.Fatalf("no marker line in %q…", out[:min(len(out), 200)])
	}
	head, tail := out[:loc[0]], out[loc[1]:]
	omitted, _ := strconv.Atoi(out[loc[2]:loc[3]])
	if !bytes.HasPrefix(stream, []byte(head)) {
		// The marker starts a line of its own: a head cut mid-line gets a
		// newline that is not part of the stream.
		head = strings.TrimSuffix(head, "\n")
	}
	if !bytes.HasPrefix(stream, []byte(head)) || !bytes.HasSuffix(stream, []byte(tail)) {
		t.Fatalf("head or tail is not from the stream")
	}
	if len(head)+omitted+len(tail) != len(stream) {
		t.Fatalf("head %d + omitted %d + tail %d != %d", len(head), omitted, len(tail), len(stream))
	}
	if len(head) < max/3 || len(tail) < max/3 {
		t.Fatalf("head %d and tail %d bytes: both should be about half of %d", len(head), len(tail), max)
	}
}

// TestExecuteStreaming checks that output events carry the raw stream in
// order, before the final result, in chunks of at most ChunkBytes.
func TestExecuteStreaming(t *testing.T) {
	requireShell(t)
	tests := []struct {
		name      string
		command   string
		want      func() []byte
		minEvents int
	}{
		{name: "separate writes", command: "echo a; sleep 0.3; echo b >&2; sleep 0.3; echo c", want: func() []byte { return []byte("a\nb\nc\n") }, minEvents: 2},
		{name: "3 MB in chunks", command: "head -c 3000000 /dev/zero | tr '\\0' q", want: func() []byte { return bytes.Repeat([]byte("q"), 3000000) }, minEvents: 3},
		{name: "raw bytes", command: `printf 'a\377\000b'`, want: func() []byte { return []byte("a\xff\x00b") }, minEvents: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startAgent(t, Config{})
			events, final := c.call(agentproto.OpExecute, agentproto.ExecuteArgs{ExecuteRequest: backend.ExecuteRequest{Command: tt.command}, Stream: true})
			if final.Error != nil {
				t.Fatal(final.Error)
			}
			var got []byte
			for _, ev := range events {
				if ev.Event != agentproto.EventOutput || len(ev.Data) == 0 || len(ev.Data) > agentproto.ChunkBytes {
					t.Fatalf("bad event %q with %d bytes", ev.Event, len(ev.Data))
				}
				got = append(got, ev.Data...)
			}
			if want := tt.want(); !bytes.Equal(got, want) {
				t.Fatalf("streamed %d bytes %q…, want %d bytes", len(got), got[:min(len(got), 40)], len(want))
			}
			if len(events) < tt.minEvents {
				t.Fatalf("%d events, want at least %d", len(events), tt.minEvents)
			}
			var res backend.ExecuteResult
			if err := json.Unmarshal(final.Result, &res); err != nil || res.OutputBytes != int64(len(got)) {
				t.Fatalf("result %s (err %v), want output_bytes %d", final.Result, err, len(got))
			}
		})
	}
}

// TestExecuteConcurrent runs several commands at once: each waits until
// all of them have started (a barrier of files), which only completes if
// they really run in parallel.
func TestExecuteConcurrent(t *testing.T) {
	requireShell(t)
	c := startAgent(t, Config{})
	const n = 6
	dir := t.TempDir()
	var wg sync.WaitGroup
	outs := make([]string, n)
	for i := range n {
		wg.Go(func() {
			cmd := fmt.Sprintf(`touch "$D/%d"; while [ "$(ls "$D" | wc -l)" -lt %d ]; do sleep 0.01; done; echo %d`, i, n, i)
			_, ch := c.start(agentproto.OpExecute, agentproto.ExecuteArgs{ExecuteRequest: backend.ExecuteRequest{
				Command: cmd, Env: map[string]string{"D": dir},
			}})
			_, final := c.wait(ch)
			var res backend.ExecuteResult
			if final.Error == nil && json.Unmarshal(final.Result, &res) == nil {
				outs[i] = res.Output
			}
		})
	}
	wg.Wait()
	for i, o := range outs {
		if o != fmt.Sprintf("%d\n", i) {
			t.Errorf("command %d output %q: the commands did not run in parallel", i, o)
		}
	}
}

// TestExecuteCancel cancels a running command with OpCancel, and checks
// that closing the channel kills running commands too.
func TestExecuteCancel(t *testing.T) {
	requireShell(t)
	run := func(t *testing.T, c *client) (uint64, chan agentproto.Response, int) {
		id, ch := c.start(agentproto.OpExecute, agentproto.ExecuteArgs{ExecuteRequest: backend.ExecuteRequest{Command: "sh -c 'echo $$; exec sleep 100' & wait"}, Stream: true})
		select {
		case ev := <-ch:
			pid, err := strconv.Atoi(strings.TrimSpace(string(ev.Data)))
			if ev.Done || err != nil {
				t.Fatalf("first response %+v, want the pid as output", ev)
			}
			return id, ch, pid
		case <-time.After(callTimeout):
			t.Fatal("no output")
		}
		return 0, nil, 0
	}

	t.Run("OpCancel", func(t *testing.T) {
		c := startAgent(t, Config{})
		id, ch, pid := run(t, c)
		start := time.Now()
		var ack struct{}
		c.ok(agentproto.OpCancel, agentproto.CancelArgs{Target: id}, &ack)
		_, final := c.wait(ch)
		if final.Error == nil || final.Error.Code != backend.CodeCancelled {
			t.Fatalf("final %+v, want cancelled", final)
		}
		if took := time.Since(start); took > backend.KillGrace+time.Second {
			t.Fatalf("cancel took %v", took)
		}
		if !processGone(pid, 5*time.Second) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d survived the cancel", pid)
		}
		// The channel still serves.
		var h agentproto.Hello
		c.ok(agentproto.OpHello, nil, &h)
	})
	t.Run("cancel of an unknown request is acknowledged", func(t *testing.T) {
		c := startAgent(t, Config{})
		var ack struct{}
		c.ok(agentproto.OpCancel, agentproto.CancelArgs{Target: 424242}, &ack)
	})
	t.Run("channel close", func(t *testing.T) {
		c := startAgent(t, Config{})
		_, _, pid := run(t, c)
		start := time.Now()
		if err := c.stop(); err != nil {
			t.Fatalf("Serve: %v", err)
		}
		if took := time.Since(start); took > backend.KillGrace+time.Second {
			t.Fatalf("Serve took %v to stop", took)
		}
		if !processGone(pid, 5*time.Second) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d survived the channel close", pid)
		}
	})
}

// TestExecuteLentOutput plays the worker's part of a lent output pipe
// (docs/security.md, "Streamed output through a lent pipe") against an
// agent in this process, whose descriptors are this process's: the lent
// event names a close-on-exec FIFO; after lent_taken the output goes on in
// the pipe behind one lent_on event, the frames before it and the pipe's
// bytes together are the output in order, and the pipe ends. A lent_taken naming no lending execute is refused.
func TestExecuteLentOutput(t *testing.T) {
	requireShell(t)
	c := startAgent(t, Config{})
	if e := c.fails(agentproto.OpLentTaken, agentproto.LentTakenArgs{Target: 999}, backend.CodeInvalidArgument); e == nil {
		t.Fatal("lent_taken for no execute succeeded")
	}
	want := "a\n" + strings.Repeat("q", 3000000) + "z\n"
	id, ch := c.start(agentproto.OpExecute, agentproto.ExecuteArgs{ExecuteRequest: backend.ExecuteRequest{
		Command: `echo a; sleep 0.3; head -c 3000000 /dev/zero | tr '\0' q; echo z`}, Stream: true, Lend: true})
	first := <-ch
	var lent agentproto.Lent
	if first.Event != agentproto.EventLent || json.Unmarshal(first.Result, &lent) != nil {
		t.Fatalf("first response %+v, want a lent event", first)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(lent.FD, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO || st.Ino != lent.Ino || uint64(st.Dev) != lent.Dev {
		t.Fatalf("lent %+v: fstat %+v %v, want that FIFO", lent, st, err)
	}
	if flags, err := unix.FcntlInt(uintptr(lent.FD), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("the lent descriptor is not close-on-exec: %#x %v", flags, err)
	}
	dup, err := unix.Dup(lent.FD) // what pidfd_getfd gives the worker
	if err != nil {
		t.Fatal(err)
	}
	pipe := os.NewFile(uintptr(dup), "lent")
	defer pipe.Close()
	piped := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(pipe); piped <- b }()
	c.ok(agentproto.OpLentTaken, agentproto.LentTakenArgs{Target: id}, nil)

	events, final := c.wait(ch)
	if final.Error != nil {
		t.Fatal(final.Error)
	}
	var framed []byte
	on := 0
	for i, ev := range events {
		switch ev.Event {
		case agentproto.EventOutput:
			if on > 0 {
				t.Fatalf("an output frame after lent_on (event %d)", i)
			}
			framed = append(framed, ev.Data...)
		case agentproto.EventLentOn:
			on++
		default:
			t.Fatalf("event %q", ev.Event)
		}
	}
	var viaPipe []byte
	select {
	case viaPipe = <-piped:
	case <-time.After(callTimeout):
		t.Fatal("the lent pipe did not end after the final response")
	}
	if on != 1 || len(viaPipe) == 0 {
		t.Fatalf("%d lent_on events, %d bytes through the pipe: want one, and the output after the take in it", on, len(viaPipe))
	}
	if got := string(framed) + string(viaPipe); got != want {
		t.Fatalf("output %d bytes (%d framed, %d piped), want %d", len(got), len(framed), len(viaPipe), len(want))
	}
	var res backend.ExecuteResult
	if err := json.Unmarshal(final.Result, &res); err != nil || res.OutputBytes != int64(len(want)) {
		t.Fatalf("result %s (%v), want output_bytes %d", final.Result, err, len(want))
	}
	if e := c.fails(agentproto.OpLentTaken, agentproto.LentTakenArgs{Target: id}, backend.CodeInvalidArgument); e == nil {
		t.Fatal("lent_taken after the execute ended succeeded")
	}
}
