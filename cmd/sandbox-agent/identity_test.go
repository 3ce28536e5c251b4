package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
	"github.com/plumbhq/plumb/pkg/testroot"
)

// TestServeAsSandboxUser builds the agent (without -race, which links the
// race runtime, under which AllThreadsSyscall is unsupported) and runs it as
// root with --uid/--gid, as in a sandbox: hello
// reports the sandbox user, files written by file operations and by
// commands belong to it, permission checks are its, commands have no
// supplementary group but their tag, and a timed-out command's setsid'd descendants
// die. It needs root (CI containers run tests as root).
func TestServeAsSandboxUser(t *testing.T) {
	testroot.Require(t, "to switch identities")
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	const uid, gid = 1000, 1000
	root, err := os.MkdirTemp("", "agent-identity")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	ws := filepath.Join(root, "ws")
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, uid, gid); err != nil {
		t.Fatal(err)
	}

	// The binary sits in root (0755), where the sandbox user may exec it.
	bin := filepath.Join(root, "sandbox-agent")
	buildAgent(t, bin)
	cmd := exec.Command(bin, "serve", "--root", root, "--workspace", ws,
		"--uid", "1000", "--gid", "1000", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	enc := agentproto.NewWriter(in)
	frames := agentproto.NewReader(out, 0)
	var next uint64
	call := func(op agentproto.Op, args, result any) *backend.Error {
		t.Helper()
		next++
		resp := roundTrip(t, enc, frames, next, op, args)
		if resp.Error == nil && result != nil {
			if err := json.Unmarshal(resp.Result, result); err != nil {
				t.Fatal(err)
			}
		}
		return resp.Error
	}
	owner := func(p string) [2]uint32 {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return [2]uint32{st.Uid, st.Gid}
	}
	user := [2]uint32{uid, gid}

	var h agentproto.Hello
	if err := call(agentproto.OpHello, struct{}{}, &h); err != nil || h.UID != uid || h.GID != gid {
		t.Fatalf("hello: %+v, %v", h, err)
	}
	if err := call(agentproto.OpWrite, chunk{agentproto.WriteArgs{Path: "/ws/sub/op.txt"}, []byte("x")}, nil); err != nil {
		t.Fatalf("write: %v", err)
	}
	for _, p := range []string{"ws/sub", "ws/sub/op.txt"} {
		if got := owner(filepath.Join(root, p)); got != user {
			t.Errorf("%s owned by %v, want %v", p, got, user)
		}
	}
	// root is root's and 0755: the sandbox user may not write there.
	if err := call(agentproto.OpWrite, chunk{agentproto.WriteArgs{Path: "/denied.txt"}, []byte("x")}, nil); err == nil || err.Code != backend.CodePermissionDenied {
		t.Fatalf("write into a root-owned dir: %v, want permission_denied", err)
	}
	var res backend.ExecuteResult
	if err := call(agentproto.OpExecute, agentproto.ExecuteArgs{ExecuteRequest: backend.ExecuteRequest{Command: "id -u; id -G; echo x > cmd.txt; grep CapEff /proc/self/status"}}, &res); err != nil {
		t.Fatalf("execute: %v", err)
	}
	// The only supplementary group is the command's tag (≥ 1<<30).
	var tag uint64
	if _, err := fmt.Sscanf(res.Output, "1000\n1000 %d\n", &tag); err != nil || tag < 1<<30 || !strings.Contains(res.Output, "0000000000000000") {
		t.Fatalf("execute identity: %q", res.Output)
	}
	if got := owner(filepath.Join(ws, "cmd.txt")); got != user {
		t.Errorf("cmd.txt owned by %v, want %v", got, user)
	}

	// A timed-out command's descendants die, even after setsid.
	one := 1
	marker := "sleep 1" + strings.TrimPrefix(filepath.Base(root), "agent-identity")
	if err := call(agentproto.OpExecute, agentproto.ExecuteArgs{ExecuteRequest: backend.ExecuteRequest{
		Command: "setsid " + marker + "1 & (setsid " + marker + "2 &); " + marker + "3", TimeoutSeconds: &one}}, &res); err != nil || !res.TimedOut {
		t.Fatalf("execute with timeout: %+v, %v", res, err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for survivors(marker) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d processes %q survive the timeout", survivors(marker), marker)
		}
		time.Sleep(100 * time.Millisecond)
	}

	in.Close()
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// survivors counts processes whose command line starts with prefix.
func survivors(prefix string) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(strings.ReplaceAll(string(b), "\x00", " "), prefix) {
			n++
		}
	}
	return n
}
