package boxagent

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/plumbhq/plumb/pkg/testroot"
)

// TestSignalTaggedSkipsTheGroup: signalTagged reaches every process that
// carries the tag, except those still in the process group the caller has
// just signalled, which must not get the signal twice (a shell's INT trap
// would run twice).
func TestSignalTaggedSkipsTheGroup(t *testing.T) {
	testroot.Require(t, "to give a child a supplementary group")
	tag := uint32(tagBase + firstTag())
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "100")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Groups: []uint32{tag}}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	inGroup, left := start(), start() // each leads its own group
	// Signal 0 checks that a process can be signalled without signalling it.
	if n := signalTagged(tag, 0, 0); n != 2 {
		t.Fatalf("signalled %d tagged processes, want 2", n)
	}
	if n := signalTagged(tag, 0, inGroup.Process.Pid); n != 1 {
		t.Fatalf("skipping group %d: signalled %d tagged processes, want 1 (the one that left it)", inGroup.Process.Pid, n)
	}
	if n := signalTagged(tag, syscall.SIGKILL, inGroup.Process.Pid); n != 1 {
		t.Fatalf("SIGKILL skipping group %d: signalled %d, want 1", inGroup.Process.Pid, n)
	}
	if err := left.Wait(); err == nil {
		t.Fatal("the process outside the skipped group was not killed")
	}
	if err := inGroup.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the process in the skipped group was signalled: %v", err)
	}
}
