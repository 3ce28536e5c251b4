package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox"
)

var errStop = errors.New("reader stops")

// poll calls ok until it reports true, failing t after a minute (a bound on
// a broken implementation, not on how fast a correct one is).
func poll(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// TestResumableExecution: a command run by Executions outlives its reader:
// a reader that drops and re-attaches with the last sequence it saw gets
// the rest and the result with nothing repeated or skipped; a second
// reader takes over; another tenant or sandbox does not find it; nobody
// attached for the grace kills it; a reader behind the buffer is told how
// many messages it lost.
func TestResumableExecution(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t)
	info := e.create(t, m, sandbox.CreateSpec{})
	f, err := m.Files(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := func(command string) string {
		t.Helper()
		r, err := f.Execute(ctx, backend.ExecuteRequest{Command: command})
		if err != nil || r.ExitCode == nil || *r.ExitCode != 0 {
			t.Fatalf("%q: %+v, %v", command, r, err)
		}
		return r.Output
	}

	t.Run("detach and re-attach", func(t *testing.T) {
		x := sandbox.NewExecutions(sandbox.ExecutionsConfig{Grace: time.Hour})
		t.Cleanup(x.Close)
		id := x.Start(ctx, "t1", info.ID, f, backend.ExecuteRequest{Command: `echo one; until [ -e /tmp/gate1 ]; do sleep 0.05; done; echo two; exit 3`})

		// The first reader gets "one" and drops.
		var out strings.Builder
		var last uint64
		err := x.Attach(ctx, "t1", info.ID, id, 0, func(ev sandbox.ExecEvent) error {
			if ev.Sequence != last+1 || ev.Lost != 0 {
				t.Errorf("event %d (lost %d) after %d", ev.Sequence, ev.Lost, last)
			}
			last = ev.Sequence
			out.Write(ev.Output)
			if strings.Contains(out.String(), "one\n") {
				return errStop
			}
			return nil
		})
		if !errors.Is(err, errStop) {
			t.Fatalf("first attach: %v", err)
		}

		// Other tenants and sandboxes do not find it.
		for _, tc := range []struct{ name, tenant, sandbox, id string }{
			{"other tenant", "t2", info.ID, id},
			{"other sandbox", "t1", "sb-other", id},
			{"unknown id", "t1", info.ID, "x-nope"},
		} {
			err := x.Attach(ctx, tc.tenant, tc.sandbox, tc.id, 0, func(sandbox.ExecEvent) error { return nil })
			if sandbox.CodeOf(err) != sandbox.CodeNotFound {
				t.Errorf("%s: %v, want not found", tc.name, err)
			}
		}
		if err := x.Attach(ctx, "t1", info.ID, id, last+100, func(sandbox.ExecEvent) error { return nil }); sandbox.CodeOf(err) != sandbox.CodeInvalid {
			t.Errorf("after beyond the last sequence: %v, want invalid", err)
		}

		// Detached, the command goes on: open the gate, re-attach.
		run("touch /tmp/gate1")
		var rest strings.Builder
		var res *backend.ExecuteResult
		err = x.Attach(ctx, "t1", info.ID, id, last, func(ev sandbox.ExecEvent) error {
			if ev.Sequence != last+1 || ev.Lost != 0 {
				t.Errorf("resumed event %d (lost %d) after %d", ev.Sequence, ev.Lost, last)
			}
			last = ev.Sequence
			rest.Write(ev.Output)
			res = ev.Result
			return nil
		})
		if err != nil {
			t.Fatalf("re-attach: %v", err)
		}
		if out.String() != "one\n" || rest.String() != "two\n" {
			t.Errorf("output %q then %q, want \"one\\n\" then \"two\\n\"", out.String(), rest.String())
		}
		if res == nil || res.ExitCode == nil || *res.ExitCode != 3 || res.Output != "one\ntwo\n" {
			t.Errorf("result %+v, want exit 3 with the whole output", res)
		}
	})

	t.Run("takeover", func(t *testing.T) {
		x := sandbox.NewExecutions(sandbox.ExecutionsConfig{Grace: time.Hour})
		t.Cleanup(x.Close)
		id := x.Start(ctx, "t1", info.ID, f, backend.ExecuteRequest{Command: `echo first; until [ -e /tmp/gate2 ]; do sleep 0.05; done; echo second`})
		got := make(chan struct{})
		firstDone := make(chan error, 1)
		go func() {
			firstDone <- x.Attach(ctx, "t1", info.ID, id, 0, func(ev sandbox.ExecEvent) error {
				if ev.Sequence == 1 {
					close(got)
				}
				return nil
			})
		}()
		<-got
		var out strings.Builder
		secondDone := make(chan error, 1)
		go func() {
			secondDone <- x.Attach(ctx, "t1", info.ID, id, 1, func(ev sandbox.ExecEvent) error {
				out.Write(ev.Output)
				return nil
			})
		}()
		if err := <-firstDone; !errors.Is(err, sandbox.ErrTakenOver) {
			t.Fatalf("first reader: %v, want taken over", err)
		}
		run("touch /tmp/gate2")
		if err := <-secondDone; err != nil {
			t.Fatalf("second reader: %v", err)
		}
		if out.String() != "second\n" {
			t.Errorf("second reader got %q, want \"second\\n\"", out.String())
		}
	})

	t.Run("grace kills", func(t *testing.T) {
		x := sandbox.NewExecutions(sandbox.ExecutionsConfig{Grace: 100 * time.Millisecond})
		t.Cleanup(x.Close)
		id := x.Start(ctx, "t1", info.ID, f, backend.ExecuteRequest{Command: `touch /tmp/ran3; sleep 4243`, TimeoutSeconds: new(int)})
		poll(t, "the command to start", func() bool { return run("ls /tmp/ran3 2>/dev/null || true") != "" })
		poll(t, "the execution to be forgotten", func() bool { return !sandbox.ExecutionKnown(x, id) })
		if err := x.Attach(ctx, "t1", info.ID, id, 0, func(sandbox.ExecEvent) error { return nil }); sandbox.CodeOf(err) != sandbox.CodeNotFound {
			t.Errorf("attach after the grace: %v, want not found", err)
		}
		// The pattern's brackets keep grep's own command line from matching.
		poll(t, "the command to be killed", func() bool {
			return strings.TrimSpace(run(`for p in /proc/[0-9]*; do tr '\0' ' ' <$p/cmdline 2>/dev/null; echo; done | grep -c 'sleep 424[3]' || true`)) == "0"
		})
	})

	t.Run("buffer overflow", func(t *testing.T) {
		x := sandbox.NewExecutions(sandbox.ExecutionsConfig{Grace: time.Hour, Buffer: 64})
		t.Cleanup(x.Close)
		id := x.Start(ctx, "t1", info.ID, f, backend.ExecuteRequest{Command: `i=0; while [ $i -lt 200 ]; do i=$((i+1)); echo line$i; done`})
		poll(t, "the command to end", func() bool { return sandbox.ExecutionDone(x, id) })
		var out strings.Builder
		var evs []sandbox.ExecEvent
		err := x.Attach(ctx, "t1", info.ID, id, 0, func(ev sandbox.ExecEvent) error {
			evs = append(evs, ev)
			out.Write(ev.Output)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 || evs[0].Lost == 0 || evs[0].Lost != evs[0].Sequence-1 {
			t.Fatalf("first event after the gap: %+v, want lost = its sequence - 1 > 0", evs)
		}
		for i, ev := range evs[1:] {
			if ev.Lost != 0 || ev.Sequence != evs[i].Sequence+1 {
				t.Errorf("event %d: %+v after %d", i+1, ev, evs[i].Sequence)
			}
		}
		res := evs[len(evs)-1].Result
		if res == nil || !strings.HasSuffix(res.Output, "line200\n") {
			t.Fatalf("last event %+v, want the result", evs[len(evs)-1])
		}
		if !strings.HasSuffix(res.Output, out.String()) || out.Len() >= len(res.Output) {
			t.Errorf("kept output %q is not a proper tail of %q", out.String(), res.Output)
		}
	})
}

// TestResumableProcessRegistry: a process started by Executions runs with
// nobody attached; its stdin reaches it through the attached reader's
// ProcessInput only (a taken-over one is refused); a command's attach does
// not find it; nobody attached for the grace kills it, and Close kills
// the ones left (TestMain's goleak then finds none of their goroutines).
func TestResumableProcessRegistry(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t)
	info := e.create(t, m, sandbox.CreateSpec{})
	f, err := m.Files(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	running := func(pattern string) bool {
		r, err := f.Execute(ctx, backend.ExecuteRequest{Command: `for p in /proc/[0-9]*; do tr '\0' ' ' <$p/cmdline 2>/dev/null; echo; done | grep -c '` + pattern + `' || true`})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(r.Output) != "0"
	}

	t.Run("input, takeover, exit", func(t *testing.T) {
		x := sandbox.NewExecutions(sandbox.ExecutionsConfig{Grace: time.Hour})
		t.Cleanup(x.Close)
		id, err := x.StartProcess(ctx, "t1", info.ID, f, backend.ProcessRequest{Command: `read a; echo "a=$a"; echo err >&2; read b; echo "b=$b"; exit 2`})
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Attach(ctx, "t1", info.ID, id, 0, func(sandbox.ExecEvent) error { return nil }); sandbox.CodeOf(err) != sandbox.CodeNotFound {
			t.Errorf("a command's attach of a process: %v, want not found", err)
		}
		var old sandbox.ProcessInput
		firstDone := make(chan error, 1)
		var out strings.Builder
		readyc := make(chan struct{})
		go func() {
			firstDone <- x.AttachProcess(ctx, "t1", info.ID, id, 0, func(in sandbox.ProcessInput) {
				old = in
				close(readyc)
			}, func(ev sandbox.ExecEvent) error {
				if !ev.Stderr {
					out.Write(ev.Output)
				}
				return nil
			})
		}()
		<-readyc
		if err := old.Write([]byte("one\n")); err != nil {
			t.Fatal(err)
		}
		var last uint64
		var exit *backend.ProcessExit
		secondReady := make(chan sandbox.ProcessInput, 1)
		secondDone := make(chan error, 1)
		poll(t, "a=one", func() bool { return sandbox.ExecutionEvents(x, id) >= 2 })
		go func() {
			secondDone <- x.AttachProcess(ctx, "t1", info.ID, id, 0, func(in sandbox.ProcessInput) { secondReady <- in }, func(ev sandbox.ExecEvent) error {
				last = ev.Sequence
				if ev.Exit != nil {
					exit = ev.Exit
				}
				return nil
			})
		}()
		in := <-secondReady
		if err := <-firstDone; !errors.Is(err, sandbox.ErrTakenOver) {
			t.Fatalf("first reader: %v, want taken over", err)
		}
		if err := old.Write([]byte("stale\n")); !errors.Is(err, sandbox.ErrTakenOver) {
			t.Fatalf("the taken-over reader's input: %v, want ErrTakenOver", err)
		}
		if err := in.Write([]byte("two\n")); err != nil {
			t.Fatal(err)
		}
		if err := <-secondDone; err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix("a=one\n", out.String()) || exit == nil || exit.ExitCode != 2 || last < 3 {
			t.Fatalf("first reader's stdout %q (want a prefix of a=one); exit %+v at %d", out.String(), exit, last)
		}
		// The second reader replayed everything: its stdout says b=two
		// (not stale), which only the same process could print.
		var all strings.Builder
		if err := x.AttachProcess(ctx, "t1", info.ID, id, 0, nil, func(ev sandbox.ExecEvent) error {
			if !ev.Stderr {
				all.Write(ev.Output)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if all.String() != "a=one\nb=two\n" {
			t.Fatalf("replayed stdout %q, want a=one then b=two", all.String())
		}
	})

	t.Run("grace kills", func(t *testing.T) {
		x := sandbox.NewExecutions(sandbox.ExecutionsConfig{Grace: 100 * time.Millisecond})
		t.Cleanup(x.Close)
		id, err := x.StartProcess(ctx, "t1", info.ID, f, backend.ProcessRequest{Command: `sleep 4244`})
		if err != nil {
			t.Fatal(err)
		}
		poll(t, "the execution to be forgotten", func() bool { return !sandbox.ExecutionKnown(x, id) })
		if err := x.AttachProcess(ctx, "t1", info.ID, id, 0, nil, func(sandbox.ExecEvent) error { return nil }); sandbox.CodeOf(err) != sandbox.CodeNotFound {
			t.Errorf("attach after the grace: %v, want not found", err)
		}
		poll(t, "the process to be killed", func() bool { return !running("sleep 424[4]") })
	})

	t.Run("close kills", func(t *testing.T) {
		x := sandbox.NewExecutions(sandbox.ExecutionsConfig{Grace: time.Hour})
		if _, err := x.StartProcess(ctx, "t1", info.ID, f, backend.ProcessRequest{Command: `sleep 4245`}); err != nil {
			t.Fatal(err)
		}
		poll(t, "the process to start", func() bool { return running("sleep 424[5]") })
		x.Close()
		if running("sleep 424[5]") {
			t.Fatal("the process outlived Close")
		}
		if _, err := x.StartProcess(ctx, "t1", info.ID, f, backend.ProcessRequest{Command: `true`}); sandbox.CodeOf(err) != sandbox.CodeShuttingDown {
			t.Fatalf("a start after Close: %v, want shutting down", err)
		}
	})
}
