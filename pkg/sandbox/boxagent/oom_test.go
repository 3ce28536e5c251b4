package boxagent

import (
	"os"
	"path/filepath"
	"testing"
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
