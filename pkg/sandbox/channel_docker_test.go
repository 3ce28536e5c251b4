package sandbox_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

// forgeScript runs in the box: it finds the sandbox agent's processes and
// writes into their stdout, the channel sandboxd reads: 4 MiB frames,
// events of unknown kinds, and a final for a request never sent. It says
// "unreachable" when it cannot write there. The agent's name is assembled
// at run time so the script's own command line does not match it.
const forgeScript = `pat="sandbox-agent"" serve"
forge() { for d in /proc/[0-9]*; do case "$(tr '\0' ' ' < $d/cmdline 2>/dev/null)" in *"$pat"*) cat > $d/fd/1 2>/dev/null && echo forged;; esac; done; }
big() { printf '{"id":1,"done":true,"result":"'; head -c 4194304 /dev/zero | tr '\0' A; printf '"}\n'; }
if ! printf '' | forge | grep -q forged; then echo unreachable; exit 0; fi
big | forge
printf '{"id":1,"event":"bogus","data":""}\n' | forge
for i in 1 2 3 4 5 6 7 8 9 10; do printf '{"id":424242,"event":"output","data":"QQ=="}\n'; done | forge
printf '{"id":999999,"done":true}\n' | forge`

// TestHostileChannelFailsOnlyItsBox: a process in a box forges and floods
// its agent's channel. The box's channel is reset at each violation, the
// box ends failed with a reason naming the violation and its container is
// killed, while a neighbour box on the same worker keeps serving; the
// worker's heap growth stays under its channel memory budget.
func TestHostileChannelFailsOnlyItsBox(t *testing.T) {
	e := newEnv(t)
	const budget = 64 << 20
	e.cfg.ChannelMemoryBytes = budget
	m := e.manager(t)
	neighbour := e.create(t, m, sandbox.CreateSpec{})
	hostile := e.create(t, m, sandbox.CreateSpec{})

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapAlloc)
			}
		}
	}()

	f, err := m.Files(hostile.ID)
	if err != nil {
		t.Fatal(err)
	}
	timeout := 60
	// Each forging execute breaks the channel it runs on; keep forging
	// (and keep the neighbour working) until the hostile box has failed,
	// or until the box finds it cannot reach the agent's channel at all
	// (the isolated agent): then the attack is contained one layer lower.
	deadline := time.Now().Add(3 * time.Minute)
	isolated := false
	for round := 1; !isolated; round++ {
		info, err := m.Get(context.Background(), hostile.ID)
		if err != nil {
			t.Fatal(err)
		}
		if info.State == sandbox.StateFailed {
			if !strings.Contains(info.FailureReason, "protocol") || round < 5 {
				t.Fatalf("failed after %d rounds with reason %q; want a reason naming the violation, after the allowance of 3", round-1, info.FailureReason)
			}
			t.Logf("hostile box failed after %d forging rounds: %s", round-1, info.FailureReason)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hostile box still %s", info.State)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		r, err := f.Execute(ctx, backend.ExecuteRequest{Command: forgeScript, TimeoutSeconds: &timeout})
		cancel()
		if err == nil && strings.Contains(r.Output, "unreachable") {
			t.Log("box code cannot write into the agent's channel: the agent is isolated")
			isolated = true
		}
		t.Logf("forging round %d: %v", round, err)
		if r := exec(t, m, neighbour.ID, "echo ok", 60); r.Output != "ok\n" {
			t.Fatalf("neighbour: %q", r.Output)
		}
	}
	if r := exec(t, m, neighbour.ID, "echo still ok", 60); r.Output != "still ok\n" {
		t.Fatalf("neighbour after the hostile box failed: %q", r.Output)
	}
	if isolated {
		// Nothing reached the channel: the box keeps serving, unharmed.
		if _, err := f.Ls(context.Background(), "/"); err != nil {
			t.Fatalf("ls on the box that tried to forge: %v", err)
		}
	} else if _, err := f.Ls(context.Background(), "/"); sandbox.CodeOf(err) != sandbox.CodeFailed && backend.CodeOf(err) != backend.CodeUnavailable {
		t.Fatalf("ls on the failed box: %v", err)
	}
	// The failed box's container is killed.
	for !isolated {
		res, err := e.cli.ContainerInspect(context.Background(), hostile.ContainerID, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Container.State != nil && !res.Container.State.Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed box's container still runs")
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	growth := int64(peak) - int64(base)
	t.Logf("worker heap: base %d bytes, peak %d bytes, growth %d bytes (channel budget %d)", base, peak, growth, budget)
	if growth > budget {
		t.Fatalf("worker heap grew %d bytes, more than the %d-byte channel budget", growth, budget)
	}
}
