package agentd

import (
	"testing"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
)

// A thread keeps a suspended sandbox (the next call wakes it); only a
// failed or deleting one is replaced.
func TestServes(t *testing.T) {
	for st, want := range map[plumbv1.SandboxState]bool{
		plumbv1.SandboxState_SANDBOX_STATE_RUNNING:     true,
		plumbv1.SandboxState_SANDBOX_STATE_PAUSED:      true,
		plumbv1.SandboxState_SANDBOX_STATE_HIBERNATED:  true,
		plumbv1.SandboxState_SANDBOX_STATE_FAILED:      false,
		plumbv1.SandboxState_SANDBOX_STATE_DELETING:    false,
		plumbv1.SandboxState_SANDBOX_STATE_CREATING:    false,
		plumbv1.SandboxState_SANDBOX_STATE_UNSPECIFIED: false,
	} {
		if got := serves(st); got != want {
			t.Errorf("serves(%s) = %v, want %v", st, got, want)
		}
	}
}
