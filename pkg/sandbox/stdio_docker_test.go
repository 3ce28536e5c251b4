package sandbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"go.uber.org/zap/zaptest"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
)

// zombiesOfPID1 prints how many zombie children PID 1 has in the box.
const zombiesOfPID1 = `n=0; for s in /proc/[0-9]*/stat; do read -r l < $s 2>/dev/null || continue; r=${l##*) }; set -- $r; if [ "$1" = Z ] && [ "$2" = 1 ]; then n=$((n+1)); fi; done; echo $n`

// plumbProcesses prints how many processes of the box run plumb's agent.
const plumbProcesses = `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^/.plumb/'`

// TestStdioChannel checks a box of Config.Channel "stdio": it is greeted
// and served without any exec by one plumb process, its PID 1; concurrent
// commands get their exact exit statuses while orphans re-parented to
// PID 1 exit all the time, and no zombie stays. After a worker restart the
// box is re-adopted and served by one exec'd agent (PID 1 stopped serving
// when the old worker's attach ended).
func TestStdioChannel(t *testing.T) {
	e := newEnv(t)
	e.cfg.Channel = sandbox.ChannelStdio
	m := e.manager(t)
	for _, rt := range sandboxtest.Runtimes(t, e.cli) {
		t.Run(rt, func(t *testing.T) {
			info := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{Runtime: rt}})
			if r := exec(t, m, info.ID, `echo $PPID; tr '\0' ' ' < /proc/1/cmdline`, 60); !strings.HasPrefix(r.Output, "1\n/.plumb/sandbox-agent serve --pid1 ") {
				t.Fatalf("the command's parent and PID 1: %q, want PID 1 to be the agent", r.Output)
			}
			if r := exec(t, m, info.ID, plumbProcesses, 60); r.Output != "1\n" {
				t.Fatalf("plumb processes in the box: %q, want 1", r.Output)
			}
			c, err := e.cli.ContainerInspect(context.Background(), info.ContainerID, client.ContainerInspectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if ids := c.Container.ExecIDs; len(ids) != 0 {
				t.Fatalf("the sandbox was served through %d execs, want none", len(ids))
			}

			const n = 24
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					want, cmd := i, fmt.Sprintf("(sleep 0.05; exit 5) >/dev/null 2>&1 & (sh -c 'exit 9' &) ; (exit 3) & exit %d", i)
					if i%8 == 5 {
						want, cmd = 137, "(exit 3) & kill -KILL $$"
					}
					if r := exec(t, m, info.ID, cmd, 60); exitCode(r) != want {
						t.Errorf("command %d exited %d, want %d", i, exitCode(r), want)
					}
				}()
			}
			wg.Wait()
			deadline := time.Now().Add(2 * time.Minute)
			for {
				r := exec(t, m, info.ID, zombiesOfPID1, 60)
				if r.Output == "0\n" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("zombie children of PID 1: %q, want none", r.Output)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}

	// A worker restart: the new worker cannot re-attach (stdin closed
	// with the old attach) and execs an agent.
	old, err := sandbox.NewManager(context.Background(), e.cli, e.cfg, sandbox.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	info := e.create(t, old, sandbox.CreateSpec{})
	exec(t, old, info.ID, "echo kept > note", 30)
	old.Close() // a worker restart leaves its sandboxes running
	m2 := e.manager(t)
	if r := exec(t, m2, info.ID, "cat note", 30); r.Output != "kept\n" {
		t.Fatalf("re-adopted box: %q", r.Output)
	}
	waitAgents(t, m2, info.ID, 1)
}

// TestStdioAgentDeathFailsInFlight kills a stdio box's PID 1 (the agent)
// through the engine while requests wait on it: every one fails at once
// with unavailable, not at its deadline (10 minutes), and the sandbox
// reports that its container exited.
func TestStdioAgentDeathFailsInFlight(t *testing.T) {
	e := newEnv(t)
	e.cfg.Channel = sandbox.ChannelStdio
	m := e.manager(t)
	for _, rt := range sandboxtest.Runtimes(t, e.cli) {
		t.Run(rt, func(t *testing.T) {
			info := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{Runtime: rt}})
			f, err := m.Files(info.ID)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const n = 3
			errs := make(chan error, n)
			for i := range n {
				go func() {
					timeout := 600
					_, err := f.Execute(ctx, backend.ExecuteRequest{Command: fmt.Sprintf("touch /tmp/running.%d; sleep 600", i), TimeoutSeconds: &timeout})
					errs <- err
				}()
			}
			for deadline := time.Now().Add(2 * time.Minute); exec(t, m, info.ID, "ls /tmp | grep -c running", 30).Output != fmt.Sprintf("%d\n", n); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the commands did not start")
				}
			}
			if _, err := e.cli.ContainerKill(context.Background(), info.ContainerID, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
				t.Fatal(err)
			}
			// A hang guard far below the commands' deadline: the channel
			// ends with the box, and so must every request on it.
			guard := time.After(2 * time.Minute)
			for range n {
				select {
				case err := <-errs:
					if backend.CodeOf(err) != backend.CodeUnavailable {
						t.Fatalf("a request in flight when PID 1 died: %v, want unavailable", err)
					}
				case <-guard:
					t.Fatal("requests in flight still wait after their box ended")
				}
			}
			for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
				got, err := m.Get(context.Background(), info.ID)
				if err == nil && got.State == sandbox.StateFailed {
					if !strings.Contains(got.FailureReason, "exited with code 137") {
						t.Fatalf("failure reason %q, want the container's exit", got.FailureReason)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("sandbox after its PID 1 died: %+v, %v; want failed", got, err)
				}
			}
		})
	}
}
