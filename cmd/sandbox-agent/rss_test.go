package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// rssBoundKiB is a generous bound on an idle agent's RSS (3.9 MiB measured
// with GOMAXPROCS=1 and four spare threads, 4.1–4.3 MiB with GOMAXPROCS=2
// and eight; B9's target for everything plumb adds to a box is 4 MiB).
// The RSS of an idle agent is mostly the binary's pages (whatever it
// links) and the heap its package initialisers leave, so it moves with
// what the binary links and does at start, not with the machine's load.
// The agent that linked net/http and zap measured 6.5 MiB.
const rssBoundKiB = 5 << 10

// TestAgentRSS builds the agent as the Makefile does (CGO_ENABLED=0,
// -trimpath, -ldflags '-s -w'), starts `serve --pid1` on pipes as a box
// does, and reports its memory from /proc/PID/status after the hello and
// after one execute: the host measurement of B9 (docs/benchmarks.md), run
// as
//
//	go test -run TestAgentRSS -v ./cmd/sandbox-agent/
//
// With PLUMB_AGENT_BIN set it measures that binary instead of building.
func TestAgentRSS(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Fatalf("the execute needs /bin/sh: %v", err)
	}
	dir := t.TempDir()
	bin := os.Getenv("PLUMB_AGENT_BIN")
	if bin == "" {
		bin = filepath.Join(dir, "sandbox-agent")
		buildAgent(t, bin, "-trimpath", "-ldflags", "-s -w")
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--pid1", "--root", ws, "--workspace", ws, "--log-level", "warn")
	// Each P costs its allocation caches: run with a default box's
	// GOMAXPROCS (one CPU of quota: fitProcs sets 1 where the runtime's
	// own default would be 2) whatever this machine's CPU count.
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	enc, frames, _ := startPiped(t, cmd)

	if r := roundTrip(t, enc, frames, 1, agentproto.OpHello, struct{}{}); r.Error != nil {
		t.Fatalf("hello: %+v", r.Error)
	}
	started := procStatus(t, cmd.Process.Pid)
	var res backend.ExecuteResult
	if r := roundTrip(t, enc, frames, 2, agentproto.OpExecute, backend.ExecuteRequest{Command: "echo hi"}); r.Error != nil || json.Unmarshal(r.Result, &res) != nil || res.Output != "hi\n" {
		t.Fatalf("execute: %+v (%+v)", r, res)
	}
	executed := procStatus(t, cmd.Process.Pid)
	t.Logf("binary %d bytes; after start: %s; after one execute: %s", fi.Size(), started, executed)
	if rss := executed["VmRSS"]; rss > rssBoundKiB {
		t.Errorf("an idle agent's VmRSS is %d KiB, over %d KiB: what does it link or set up at start now? (test/layering, GODEBUG=inittrace=1)", rss, rssBoundKiB)
	}
}

// kib is a set of /proc/PID/status sizes in KiB.
type kib map[string]int

func (k kib) String() string {
	var b strings.Builder
	for i, key := range []string{"VmRSS", "RssAnon", "RssFile", "Threads"} {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(key + " " + strconv.Itoa(k[key]))
		if key != "Threads" {
			b.WriteString(" KiB")
		}
	}
	return b.String()
}

// procStatus reads the memory lines and the thread count of a process.
func procStatus(t *testing.T, pid int) kib {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	k := kib{}
	for line := range strings.Lines(string(b)) {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch key {
		case "VmRSS", "RssAnon", "RssFile", "Threads":
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(val), " kB"))
			if err != nil {
				t.Fatalf("%s: %q", key, line)
			}
			k[key] = n
		}
	}
	if k["VmRSS"] == 0 {
		t.Fatalf("no VmRSS in /proc/%d/status", pid)
	}
	return k
}
