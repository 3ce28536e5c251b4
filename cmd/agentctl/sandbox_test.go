package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// TestSandboxCommands drives `agentctl sandbox ...` against a real worker
// and real containers: create, ls, exec (streamed, exit code passed on;
// interactive with -i),
// cp in and out, rm.
func TestSandboxCommands(t *testing.T) {
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sh := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := run(ctx, append([]string{"--sandboxd", wk.Addr, "sandbox"}, args...), stdio{
			in: strings.NewReader(""), out: &out, err: &errb, getenv: func(string) string { return "" },
		})
		return out.String(), err
	}

	out, err := sh("create", "--label", "owner=cli", "--memory", "134217728", "--ttl", "10m")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	if !strings.HasPrefix(id, "sbx-"+wk.Name+"-") {
		t.Fatalf("create printed %q", out)
	}
	if out, err = sh("ls", "--label", "owner=cli"); err != nil || !strings.Contains(out, id) || !strings.Contains(out, "RUNNING") {
		t.Fatalf("ls = %q, %v", out, err)
	}
	if out, err = sh("exec", id, "--", "echo hi from $(id -u)"); err != nil || out != "hi from 1000\n" {
		t.Fatalf("exec = %q, %v", out, err)
	}
	// Several words are an argv, each passed as it is (issue 21 item 13):
	// no word splitting, expansion or shell syntax in any of them.
	argv := []string{"import sys; print(sys.version)", "it's", "$(id -u)", "a  b", ";", "*", ""}
	if out, err = sh(append([]string{"exec", id, "--", "printf", "[%s]"}, argv...)...); err != nil || out != "[import sys; print(sys.version)][it's][$(id -u)][a  b][;][*][]" {
		t.Fatalf("exec of an argv = %q, %v", out, err)
	}
	if out, err = sh("exec", "-i", id, "--", "sh", "-c", `echo "$1:$2"`, "sh", "x y", "it's"); err != nil || out != "x y:it's\n" {
		t.Fatalf("exec -i of an argv = %q, %v", out, err)
	}
	_, err = sh("exec", id, "--", "exit 7")
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 7 {
		t.Fatalf("exec of a failing command: %v, want exit code 7", err)
	}

	// Interactive: stdin passed on, streams apart, the exit code kept.
	var out2, err2 bytes.Buffer
	err = run(ctx, []string{"--sandboxd", wk.Addr, "sandbox", "exec", "-i", id, "--", "tr a-z A-Z; echo oops >&2; exit 3"}, stdio{
		in: strings.NewReader("hello\nworld\n"), out: &out2, err: &err2, getenv: func(string) string { return "" },
	})
	if !errors.As(err, &ee) || ee.code != 3 || out2.String() != "HELLO\nWORLD\n" || err2.String() != "oops\n" {
		t.Fatalf("exec -i: stdout %q, stderr %q, %v", out2.String(), err2.String(), err)
	}

	local := filepath.Join(t.TempDir(), "in.bin")
	payload := bytes.Repeat([]byte{0, 1, 2, 0xff}, 700_000) // 2.8 MB: several chunks
	if err := os.WriteFile(local, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sh("cp", local, id+":/workspace/in.bin"); err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(t.TempDir(), "out.bin")
	if _, err := sh("cp", id+":/workspace/in.bin", back); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("round trip: %d bytes, %v", len(got), err)
	}
	if _, err := sh("cp", id+":/workspace/missing", back); err == nil || !strings.Contains(err.Error(), "file_not_found") {
		t.Fatalf("cp of a missing file: %v", err)
	}
	if out, err = sh("rm", id); err != nil || strings.TrimSpace(out) != id {
		t.Fatalf("rm = %q, %v", out, err)
	}
	if out, err = sh("ls"); err != nil || strings.Contains(out, id) {
		t.Fatalf("ls after rm = %q, %v", out, err)
	}
}
