package backendtest

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
)

// executeCases are docs/file-tools.md §7 rows 62–64 and 66–70: execute (§4.8). Row 65 is the
// tool layer's.
func executeCases() []testCase {
	exec := func(e *env, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
		return e.h.Executor.Execute(e.ctx, req)
	}
	mustExec := func(e *env, req backend.ExecuteRequest) backend.ExecuteResult {
		e.t.Helper()
		r, err := exec(e, req)
		if err != nil {
			e.t.Fatalf("execute %q: %v", req.Command, err)
		}
		return r
	}
	wantExit := func(e *env, what string, r backend.ExecuteResult, code int) {
		e.t.Helper()
		if r.ExitCode == nil || *r.ExitCode != code {
			e.t.Errorf("%s: exit code %s, want %d (output %q)", what, fmtIntPtr(r.ExitCode), code, clip(r.Output))
		}
	}
	caps := []Capability{Execute}
	// 3000 lines of 99 chars + LF: a 300,000-byte stream ending in "45678\n".
	line99 := strings.Repeat("0123456789", 9) + "012345678"
	return []testCase{
		{name: "B62_execute_echo", caps: caps, run: func(e *env) {
			r := mustExec(e, backend.ExecuteRequest{Command: "echo hi"})
			if r.Output != "hi\n" || r.TimedOut || r.Truncated {
				e.t.Errorf("echo hi = %+v, want output \"hi\\n\"", r)
			}
			wantExit(e, "echo hi", r, 0)
		}},
		{name: "B63_execute_merged_output_and_exit", caps: caps, run: func(e *env) {
			r := mustExec(e, backend.ExecuteRequest{Command: "echo out; echo err 1>&2; exit 3"})
			if r.Output != "out\nerr\n" {
				e.t.Errorf("output %q, want \"out\\nerr\\n\"", r.Output)
			}
			wantExit(e, "exit 3", r, 3)
		}},
		{name: "B64_execute_timeout", caps: caps, run: func(e *env) {
			start := time.Now()
			r := mustExec(e, backend.ExecuteRequest{Command: "sleep 5", TimeoutSeconds: intp(1)})
			if d := time.Since(start); d > 4*time.Second {
				e.t.Errorf("sleep 5 with timeout 1 returned after %v, want within 1 + 2 + 1 s", d)
			}
			if !r.TimedOut {
				e.t.Errorf("timed_out not set: %+v", r)
			}
			wantExit(e, "timeout", r, 124)
		}},
		{name: "B66_execute_truncation_and_offload", caps: caps, run: func(e *env) {
			off := e.p("/offload.log")
			r := mustExec(e, backend.ExecuteRequest{
				Command:     "i=0; while [ $i -lt 3000 ]; do echo " + line99 + "; i=$((i+1)); done",
				OffloadPath: off,
			})
			if !r.Truncated || r.OutputBytes != 300000 {
				e.t.Errorf("truncated %v, output_bytes %d; want true, 300000", r.Truncated, r.OutputBytes)
			}
			if len(r.Output) > backend.ExecuteInlineOutput {
				e.t.Errorf("inline output %d bytes, over %d", len(r.Output), backend.ExecuteInlineOutput)
			}
			if !strings.HasPrefix(r.Output, "0123456789") || !strings.HasSuffix(r.Output, "45678\n") || len(r.Output) < backend.ExecuteInlineOutput*9/10 {
				e.t.Errorf("inline output (%d bytes) does not keep head and tail: %q", len(r.Output), clip(r.Output))
			}
			wantExit(e, "big output", r, 0)
			if r.OffloadedPath != off {
				e.t.Fatalf("offloaded_path %q, want %q", r.OffloadedPath, off)
			}
			res, err := e.b.Download(e.ctx, []string{off})
			if err != nil || len(res) != 1 || res[0].Err != nil {
				e.t.Fatalf("download offload file: %v %+v", err, res)
			}
			if got := res[0].Content; len(got) != 300000 || !bytes.HasSuffix(got, []byte("45678\n")) {
				e.t.Errorf("offload file has %d bytes, want the 300000-byte stream", len(got))
			}
		}},
		{name: "B67_execute_blank_command", caps: caps, run: func(e *env) {
			for _, cmd := range []string{"", "   "} {
				_, err := exec(e, backend.ExecuteRequest{Command: cmd})
				e.wantCode(fmt.Sprintf("execute %q", cmd), err, backend.CodeInvalidArgument)
			}
		}},
		{name: "B68_execute_cwd_and_env", caps: caps, run: func(e *env) {
			ws := e.h.Workspace
			if ws == "" {
				ws = "/workspace"
			}
			r := mustExec(e, backend.ExecuteRequest{Command: "pwd"})
			if r.Output != ws+"\n" {
				e.t.Errorf("pwd = %q, want %q", r.Output, ws+"\n")
			}
			r = mustExec(e, backend.ExecuteRequest{Command: "echo $FOO", Env: map[string]string{"FOO": "bar"}})
			if r.Output != "bar\n" {
				e.t.Errorf("echo $FOO = %q, want \"bar\\n\"", r.Output)
			}
			_, err := exec(e, backend.ExecuteRequest{Command: "true", Env: map[string]string{"1A": "x"}})
			e.wantCode("env key 1A", err, backend.CodeInvalidArgument)
		}},
		{name: "B69_execute_killed_by_signal", caps: caps, run: func(e *env) {
			r := mustExec(e, backend.ExecuteRequest{Command: "kill -9 $$"})
			wantExit(e, "kill -9 $$", r, 137)
		}},
		{name: "B70_execute_background_child", caps: caps, run: func(e *env) {
			start := time.Now()
			r := mustExec(e, backend.ExecuteRequest{Command: "sleep 30 & echo started"})
			if d := time.Since(start); d >= 4*time.Second {
				e.t.Errorf("returned after %v, want < 4 s", d)
			}
			if r.Output != "started\n" {
				e.t.Errorf("output %q, want \"started\\n\"", r.Output)
			}
			wantExit(e, "background child", r, 0)
		}},
	}
}
