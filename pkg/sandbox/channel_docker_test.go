package sandbox_test

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	"go.uber.org/zap/zaptest"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
)

// agentProcs is a shell snippet that defines agents: the pids of the
// sandbox agent's processes (`sandbox-agent serve`). The name is assembled
// at run time so the script's own command line does not match it.
const agentProcs = `pat="sandbox-agent"" serve"
agents() { for d in /proc/[0-9]*; do case "$(tr '\0' ' ' < $d/cmdline 2>/dev/null)" in *"$pat"*) echo ${d#/proc/};; esac; done; }
`

// forgeScript writes into the stdout of every sandbox agent process, the
// channel sandboxd reads: 4 MiB frames, events of unknown kinds, and a
// final for a request never sent. It says "unreachable" when it cannot
// write there. (Its first probe piped an empty printf through forge into
// grep -q: under gVisor 20221219 that pipeline crashed the box's own
// gVisor sandbox in 3 of 20 runs; the probe below never did.) Every
// agent gets the whole input, PID 1 last: with the stdio channel a box has
// two after a reset, the exec'd one serving and PID 1 no longer (its
// stdout, which nobody attaches to any more, may take the engine a while
// to drain).
const forgeScript = agentProcs + `forge() { f=$(mktemp); cat > $f; for a in $(agents | sort -rn); do cat $f > /proc/$a/fd/1 2>/dev/null && echo forged; done; rm -f $f; }
big() { printf '{"id":1,"done":true,"result":"'; head -c 4194304 /dev/zero | tr '\0' A; printf '"}\n'; }
case "$(forge </dev/null)" in *forged*) ;; *) echo unreachable; exit 0;; esac
big | forge
printf '{"id":1,"event":"bogus","data":""}\n' | forge
for i in 1 2 3 4 5 6 7 8 9 10; do printf '{"id":424242,"event":"output","data":"QQ=="}\n'; done | forge
printf '{"id":999999,"done":true}\n' | forge`

// rootExec runs script with sh in container cid as container root (with
// the box's three capabilities), from outside the box: an Engine exec, not
// a sandbox command. It returns the combined output.
func rootExec(t *testing.T, cli *client.Client, cid, script string) string {
	t.Helper()
	return execAs(t, cli, cid, sandbox.AgentUser, script)
}

// execAs runs script in container cid as user through an Engine exec
// (not the agent) and returns its output.
func execAs(t *testing.T, cli *client.Client, cid, user, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	ex, err := cli.ExecCreate(ctx, cid, client.ExecCreateOptions{
		User: user, Cmd: []string{"sh", "-c", script}, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		t.Fatalf("root exec: %v", err)
	}
	att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("root exec attach: %v", err)
	}
	defer att.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, att.Reader); err != nil {
		t.Fatalf("root exec output: %v (so far %q)", err, out.String())
	}
	return out.String()
}

// TestHostileChannelFailsOnlyItsBox: forged and flooding frames on a real
// agent channel, under every runtime, while a neighbour box on the same
// worker keeps serving and the worker's heap stays within its channel
// memory budget.
//
// Box code of a hardened box cannot write into the channel at all: the
// box keeps serving. To play a compromised agent, or box code that got
// hold of the channel anyway, a second worker runs unhardened
// (Config.Unhardened: the agent and commands share root's identity and
// the agent stays dumpable, as before issue 9), so the same box code
// reaches the channel: the box's channel is reset at each violation, and
// past the allowance the box is failed with a reason naming the violation
// and its container killed.
func TestHostileChannelFailsOnlyItsBox(t *testing.T) {
	e := newEnv(t)
	e.cfg.ChannelMemoryBytes = testChannelBudget
	m := e.manager(t)
	neighbour := e.create(t, m, sandbox.CreateSpec{})
	eu := newEnv(t) // a worker of its own: managers sweep their worker's boxes
	eu.cfg.ChannelMemoryBytes = testChannelBudget
	eu.cfg.Unhardened = true
	mu := eu.manager(t)
	uneighbour := createUnhardened(t, mu, "")
	heap := watchHeap(t, 2*testChannelBudget) // two workers in this process
	for _, rt := range sandboxtest.Runtimes(t, e.cli) {
		t.Run(rt, func(t *testing.T) {
			t.Run("box code", func(t *testing.T) {
				hostile := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{Runtime: rt}})
				keepsServing(t, m, neighbour.ID, func() {
					if r := exec(t, m, hostile.ID, forgeScript, 120); !strings.Contains(r.Output, "unreachable") {
						t.Fatalf("box code reached the agent's channel: %q", r.Output)
					}
				})
				if r := exec(t, m, hostile.ID, "echo alive", 60); r.Output != "alive\n" {
					t.Fatalf("the box after its forging attempt: %q", r.Output)
				}
			})
			t.Run("compromised agent", func(t *testing.T) {
				compromisedAgent(t, eu, mu, createUnhardened(t, mu, rt), uneighbour.ID)
			})
		})
	}
	heap.check(t)
}

// createUnhardened creates a box on an unhardened worker (e.create would
// fail its hardening checks).
func createUnhardened(t *testing.T, m *sandbox.Manager, rt string) sandbox.Info {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	info, err := m.Create(ctx, sandbox.CreateSpec{Overrides: sandbox.Template{Runtime: rt}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return info
}

// compromisedAgent forges frames into hostile's channel from box code that
// can reach it, one execute per round, until the box fails.
func compromisedAgent(t *testing.T, e *env, m *sandbox.Manager, hostile sandbox.Info, neighbour string) {
	ctx := context.Background()
	f, err := m.Files(hostile.ID)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute) // hang guard
	allowance := m.Config().ViolationAllowance
	for round := 1; ; round++ {
		info, err := m.Get(ctx, hostile.ID)
		if err != nil {
			t.Fatal(err)
		}
		if info.State == sandbox.StateFailed {
			// Under every runtime the forged frames reach sandboxd. (With
			// gVisor 20221219 the forged write stalled in the sentry and
			// the gVisor sandbox died instead.)
			if !strings.Contains(info.FailureReason, "protocol") || round <= allowance+1 {
				t.Fatalf("failed after %d rounds with reason %q; want a reason naming the violation, after the allowance of %d", round-1, info.FailureReason, allowance)
			}
			t.Logf("hostile box failed after %d forging rounds: %s", round-1, info.FailureReason)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hostile box still %s after %d rounds", info.State, round-1)
		}
		var r backend.ExecuteResult
		keepsServing(t, m, neighbour, func() {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // hang guard
			defer cancel()
			timeout := 5
			r, err = f.Execute(ctx, backend.ExecuteRequest{Command: forgeScript, TimeoutSeconds: &timeout})
		})
		switch {
		case backend.CodeOf(err) == backend.CodeUnavailable:
			// The execute that forged is failed by its channel's reset.
			t.Logf("round %d: the channel was reset: %v", round, err)
		default:
			t.Fatalf("round %d: forging execute: %q, %v; want unavailable", round, r.Output, err)
		}
	}
	if _, err := f.Ls(ctx, "/"); sandbox.CodeOf(err) != sandbox.CodeFailed && backend.CodeOf(err) != backend.CodeUnavailable {
		t.Fatalf("ls on the failed box: %v", err)
	}
	// The failed box's container is killed.
	for {
		res, err := e.cli.ContainerInspect(ctx, hostile.ContainerID, client.ContainerInspectOptions{})
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
}

// TestStoppedAgentHoldsNothing: an agent that stops answering and reading
// (stopped with SIGSTOP by a root exec from the test: box code cannot, see
// TestBoxCannotReachTheAgent) cannot hang its callers nor keep its box
// alive, under every runtime. An execute is ended by sandboxd's own
// deadline (exit 124, timed out, saying sandboxd ended it) though the box
// never answers; a large write ends at the caller's deadline, unavailable,
// and resets the channel; the next operation is served by a new agent;
// the idle box is reaped at its TTL. A neighbour keeps serving throughout.
// (The worker reads nothing from a stopped agent, so there is no heap
// bound to check here: the test's own 10 MiB writes would dominate it.)
func TestStoppedAgentHoldsNothing(t *testing.T) {
	e := newEnv(t)
	clock := &fakeClock{now: time.Now()}
	m := e.manager(t, sandbox.WithClock(clock.Now))
	neighbour := e.create(t, m, sandbox.CreateSpec{})
	for _, rt := range sandboxtest.Runtimes(t, e.cli) {
		t.Run(rt, func(t *testing.T) { stoppedAgent(t, e, m, clock, rt, neighbour.ID) })
	}
}

func stoppedAgent(t *testing.T, e *env, m *sandbox.Manager, clock *fakeClock, rt, neighbour string) {
	const ttl = time.Minute
	box := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{Runtime: rt, TTL: ttl}})
	f, err := m.Files(box.ID)
	if err != nil {
		t.Fatal(err)
	}
	stop := func() {
		t.Helper()
		if e.cfg.Channel == sandbox.ChannelStdio {
			// PID 1 is an agent, and the kernel drops a SIGSTOP sent to
			// its namespace's init from inside (even by root): the engine
			// stops it from outside.
			if _, err := e.cli.ContainerKill(context.Background(), box.ContainerID, client.ContainerKillOptions{Signal: "STOP"}); err != nil {
				t.Fatalf("stop PID 1: %v", err)
			}
		}
		if out := rootExec(t, e.cli, box.ContainerID, agentProcs+`for a in $(agents); do kill -STOP $a && echo stopped; done`); !strings.Contains(out, "stopped") {
			t.Fatalf("stop the agent: %q", out)
		}
	}
	exec(t, m, box.ID, "true", 60) // the channel is open: its agent runs
	stop()

	t.Run("execute ends at sandboxd's deadline", func(t *testing.T) {
		var r backend.ExecuteResult
		keepsServing(t, m, neighbour, func() { r = exec(t, m, box.ID, "echo never", 1) })
		if !r.TimedOut || exitCode(r) != 124 || !strings.Contains(r.Output, "sandboxd") {
			t.Fatalf("execute on a stopped agent: %+v, want timed out, exit 124, saying sandboxd ended it", r)
		}
	})

	t.Run("large write ends at the caller's deadline", func(t *testing.T) {
		var err error
		keepsServing(t, m, neighbour, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = f.Write(ctx, "/workspace/big", bytes.Repeat([]byte("x"), 4<<20))
		})
		switch backend.CodeOf(err) {
		case backend.CodeUnavailable:
			// The write timed out part-way: the channel was reset, and a
			// new agent serves the next operation.
			if r := exec(t, m, box.ID, "echo back", 60); r.Output != "back\n" {
				t.Fatalf("after the reset: %q", r.Output)
			}
		case backend.CodeTimeout:
			// On a loaded machine the deadline can pass before the
			// request is even written (encoding it, waiting for the
			// writer): nothing was written, and the channel stays.
			t.Logf("the deadline passed before the write started: %v", err)
		default:
			t.Fatalf("write to a stopped agent: %v, want unavailable (or deadline exceeded before writing)", err)
		}
	})

	t.Run("reaped at its TTL", func(t *testing.T) {
		stop() // the new agent too
		clock.Set(clock.Now().Add(ttl + time.Second))
		// The worker's own reaper loop may take it first.
		if got := m.Reap(context.Background()); len(got) > 1 || len(got) == 1 && got[0] != box.ID {
			t.Fatalf("reaped %v past the TTL, want [%s]", got, box.ID)
		}
		deadline := time.Now().Add(time.Minute) // hang guard
		for {
			_, err := m.Get(context.Background(), box.ID)
			if sandbox.CodeOf(err) == sandbox.CodeNotFound {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the box past its TTL: %v, want not found", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := e.cli.ContainerInspect(context.Background(), box.ContainerID, client.ContainerInspectOptions{}); err == nil {
			t.Fatal("the reaped box's container still exists")
		}
	})
}

// hangingEngine is the real engine, except that while hang is set an
// ExecCreate (the dial of an agent channel) blocks until release is closed
// or its context ends.
type hangingEngine struct {
	*client.Client
	hang    atomic.Bool
	inside  atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (h *hangingEngine) ExecCreate(ctx context.Context, id string, opts client.ExecCreateOptions) (client.ExecCreateResult, error) {
	if !h.hang.Load() {
		return h.Client.ExecCreate(ctx, id, opts)
	}
	h.inside.Store(true)
	defer h.inside.Store(false)
	h.entered <- struct{}{}
	select {
	case <-h.release:
		return h.Client.ExecCreate(ctx, id, opts)
	case <-ctx.Done():
		return client.ExecCreateResult{}, ctx.Err()
	}
}

// TestHungDialHoldsNoLock: while the engine hangs on the exec that opens a
// box's agent channel, the worker still answers Get, List and KeepAlive
// for that box, and a neighbour keeps serving; once the engine answers,
// the box serves again. Runtime-independent (the worker's locking), so
// under the engine's default runtime only.
func TestHungDialHoldsNoLock(t *testing.T) {
	e := newEnv(t)
	h := &hangingEngine{Client: e.cli, entered: make(chan struct{}, 1), release: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	var box, neighbour sandbox.Info
	if e.cfg.Channel == sandbox.ChannelStdio {
		// PID 1 is the agent, which the kernel does not let even a root
		// exec kill from inside: a worker restart gives both boxes exec'd
		// agents, whose end is the case here.
		first, err := sandbox.NewManager(ctx, e.cli, e.cfg, sandbox.WithLogger(zaptest.NewLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		box = e.create(t, first, sandbox.CreateSpec{})
		neighbour = e.create(t, first, sandbox.CreateSpec{})
		first.Close() // a worker restart leaves its sandboxes running
	}
	m := e.managerOn(t, h)
	if e.cfg.Channel == sandbox.ChannelStdio {
		exec(t, m, box.ID, "true", 60) // their exec'd agents
		exec(t, m, neighbour.ID, "true", 60)
	} else {
		box = e.create(t, m, sandbox.CreateSpec{})
		neighbour = e.create(t, m, sandbox.CreateSpec{})
	}
	// End the box's agent: its channel ends, and the next operation dials.
	if out := rootExec(t, e.cli, box.ContainerID, agentProcs+`for a in $(agents); do kill -9 $a && echo killed; done`); !strings.Contains(out, "killed") {
		t.Fatalf("kill the agent: %q", out)
	}
	h.hang.Store(true)
	done := make(chan backend.ExecuteResult, 1)
	go func() {
		// Retried until it reaches the dial: the first attempt may still
		// find the old channel before its end is noticed.
		for {
			f, err := m.Files(box.ID)
			if err != nil {
				done <- backend.ExecuteResult{Output: err.Error()}
				return
			}
			r, err := f.Execute(ctx, backend.ExecuteRequest{Command: "echo back"})
			if err == nil {
				done <- r
				return
			}
			if ctx.Err() != nil {
				done <- backend.ExecuteResult{Output: err.Error()}
				return
			}
		}
	}()
	select {
	case <-h.entered:
	case <-ctx.Done():
		t.Fatal("the box's next operation never dialled its agent")
	}
	if _, err := m.Get(ctx, box.ID); err != nil {
		t.Fatalf("get during the dial: %v", err)
	}
	if got := m.List(nil); len(got) != 2 {
		t.Fatalf("list during the dial: %d sandboxes, want 2", len(got))
	}
	if _, err := m.KeepAlive(ctx, box.ID, 0); err != nil {
		t.Fatalf("keep-alive during the dial: %v", err)
	}
	h.hang.Store(false) // the neighbour's channel is open; a redial must not hang
	if r := exec(t, m, neighbour.ID, "echo alive", 60); r.Output != "alive\n" {
		t.Fatalf("neighbour during the dial: %q", r.Output)
	}
	if !h.inside.Load() {
		t.Fatal("the dial ended before the calls above returned: they waited for it")
	}
	close(h.release)
	if r := <-done; r.Output != "back\n" {
		t.Fatalf("the box once the engine answers: %q", r.Output)
	}
}
