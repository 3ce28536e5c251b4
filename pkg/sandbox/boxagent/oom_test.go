package boxagent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// TestReadCounter reads the OOM kill count from both cgroup layouts and
// reports files without it as unknown.
func TestReadCounter(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"v2":      "low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n",
		"v1":      "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n",
		"old":     "oom_kill_disable 0\nunder_oom 0\n",
		"garbled": "oom_kill x\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		file string
		n    uint64
		ok   bool
	}{{"v2", 2, true}, {"v1", 7, true}, {"old", 0, false}, {"garbled", 0, false}, {"missing", 0, false}} {
		if n, ok := readCounter(filepath.Join(dir, tc.file), "oom_kill"); n != tc.n || ok != tc.ok {
			t.Errorf("%s: %d, %v; want %d, %v", tc.file, n, ok, tc.n, tc.ok)
		}
	}
}

// TestCommandsOutrankTheAgentForTheOOMKiller: a command starts with
// CommandOomScoreAdj while the agent (here, the test process) keeps its
// own lower value, also when commands start at once.
func TestCommandsOutrankTheAgentForTheOOMKiller(t *testing.T) {
	requireShell(t)
	const self = "/proc/self/oom_score_adj"
	orig, err := os.ReadFile(self)
	if err != nil {
		t.Fatalf("this kernel has no %s: %v", self, err)
	}
	// A value below the command's and at or above any floor the test
	// process may have (only lowering under it needs CAP_SYS_RESOURCE).
	if err := os.WriteFile(self, []byte("900"), 0); err != nil {
		t.Fatalf("set the test process's own value: %v", err)
	}
	t.Cleanup(func() { _ = os.WriteFile(self, orig, 0) })
	c := startAgent(t, Config{})
	var wg sync.WaitGroup
	outs := make([]string, 4)
	for i := range outs {
		wg.Go(func() {
			var res backend.ExecuteResult
			c.ok(agentproto.OpExecute, agentproto.ExecuteArgs{ExecuteRequest: backend.ExecuteRequest{Command: "cat " + self}}, &res)
			outs[i] = res.Output
		})
	}
	wg.Wait()
	for i, o := range outs {
		if o != strconv.Itoa(CommandOomScoreAdj)+"\n" {
			t.Errorf("command %d: oom_score_adj %q, want %d", i, o, CommandOomScoreAdj)
		}
	}
	if got, _ := os.ReadFile(self); strings.TrimSpace(string(got)) != "900" {
		t.Errorf("the agent's own value is %q after the starts, want 900 again", got)
	}
}
