package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/internal/server/sandboxsvc/sandboxsvctest"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/snapshot"
)

// TestWorkspaceCommands drives `agentctl sandbox snapshot|snapshots|
// suspend|resume` and `create --snapshot` against a real worker.
func TestWorkspaceCommands(t *testing.T) {
	store, err := snapshot.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo, err := snapshot.NewRepo(store, 0)
	if err != nil {
		t.Fatal(err)
	}
	wk := sandboxsvctest.StartWorker(t, sandbox.Config{Snapshots: repo})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sh := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		err := run(ctx, append([]string{"--sandboxd", wk.Addr, "sandbox"}, args...), stdio{
			in: strings.NewReader(""), out: &out, err: &errb, getenv: func(string) string { return "" },
		})
		if err != nil {
			t.Fatalf("agentctl sandbox %v: %v (%s)", args, err, errb.String())
		}
		return out.String()
	}
	id := strings.TrimSpace(sh("create"))
	sh("exec", id, "--", "echo saved > /workspace/f")
	snap := strings.TrimSpace(sh("snapshot", id))
	if !snapshot.ValidID(snap) {
		t.Fatalf("snapshot printed %q", snap)
	}
	if out := sh("snapshots"); !strings.Contains(out, snap) || !strings.Contains(out, id) {
		t.Errorf("snapshots = %q", out)
	}
	if out := sh("suspend", id); !strings.Contains(out, "PAUSED (processes kept)") {
		t.Errorf("suspend = %q", out)
	}
	if out := sh("resume", id); out != id+" RUNNING\n" {
		t.Errorf("resume = %q", out)
	}
	if out := sh("suspend", id, "--hibernate"); !strings.Contains(out, "HIBERNATED snapshot snap-") || !strings.Contains(out, "processes end") {
		t.Errorf("suspend --hibernate = %q", out)
	}
	if out := sh("exec", id, "--", "cat /workspace/f"); out != "saved\n" {
		t.Errorf("exec on a hibernated box = %q", out)
	}
	other := strings.TrimSpace(sh("create", "--snapshot", snap))
	if out := sh("exec", other, "--", "cat /workspace/f"); out != "saved\n" {
		t.Errorf("a box created from the snapshot: %q", out)
	}
	if out := sh("snapshots", "rm", snap); out != snap+"\n" {
		t.Errorf("snapshots rm = %q", out)
	}
}
