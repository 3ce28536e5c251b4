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

// TestForkAndVolumeCommands drives `agentctl sandbox fork`, `volumes` and
// `create --volume` against a real worker.
func TestForkAndVolumeCommands(t *testing.T) {
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
	agentctl := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := run(ctx, append([]string{"--sandboxd", wk.Addr, "sandbox"}, args...), stdio{
			in: strings.NewReader(""), out: &out, err: &errb, getenv: func(string) string { return "" },
		})
		return out.String(), err
	}
	sh := func(args ...string) string {
		t.Helper()
		out, err := agentctl(args...)
		if err != nil {
			t.Fatalf("agentctl sandbox %v: %v", args, err)
		}
		return out
	}
	vol := strings.TrimSpace(sh("volumes", "create", "data", "--size", "8388608"))
	if !strings.HasPrefix(vol, "vol-"+wk.Name+"-") {
		t.Fatalf("volumes create printed %q", vol)
	}
	id := strings.TrimSpace(sh("create", "--volume", "data:/data"))
	sh("exec", id, "--", "echo saved > /workspace/f; echo shared > /data/s")
	snap := strings.TrimSpace(sh("snapshot", id))
	out := sh("fork", snap, "--count", "2", "--volume", vol+":/mnt/data:ro", "--label", "k=v")
	forks := strings.Fields(out)
	if len(forks) != 2 {
		t.Fatalf("fork printed %q", out)
	}
	for _, f := range forks {
		if got := sh("exec", f, "--", "cat /workspace/f /mnt/data/s"); got != "saved\nshared\n" {
			t.Errorf("fork %s reads %q", f, got)
		}
	}
	if out := sh("volumes"); !strings.Contains(out, "data") || !strings.Contains(out, vol) || !strings.Contains(out, forks[0]) {
		t.Errorf("volumes = %q", out)
	}
	if _, err := agentctl("volumes", "rm", "data"); err == nil || !strings.Contains(err.Error(), "FailedPrecondition") {
		t.Errorf("volumes rm of a volume in use: %v", err)
	}
	if _, err := agentctl("fork", snap, "--count", "0"); err == nil || !strings.Contains(err.Error(), "count") {
		t.Errorf("fork --count 0: %v", err)
	}
	sh(append([]string{"rm", id}, forks...)...)
	if out := sh("volumes", "rm", "data"); out != "data\n" {
		t.Errorf("volumes rm = %q", out)
	}
}
