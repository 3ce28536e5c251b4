package boxagent

import (
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// startShell starts `sh -c script` through r and returns its wait.
func startShell(t *testing.T, r *Reaper, script string) func() syscall.WaitStatus {
	t.Helper()
	cmd := exec.Command(Shell, "-c", script)
	wait, _, err := r.start(func() (int, error) {
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Release()
	return wait
}

// TestReaperDeliversEachStatusOnce starts commands with known ends through
// one Reaper while Reap runs over and over, as SIGCHLD storms make it run
// in PID 1: every command gets its own status, whichever side collected it,
// and none is left registered or counted as an orphan.
func TestReaperDeliversEachStatusOnce(t *testing.T) {
	requireShell(t)
	tests := []struct {
		script string
		exit   int            // with signal 0
		signal syscall.Signal // the signal that ended it, or 0
	}{
		{script: "exit 0"},
		{script: "exit 3", exit: 3},
		{script: "sleep 0.05; exit 7", exit: 7},
		{script: "kill -9 $$", signal: syscall.SIGKILL},
		{script: "kill -TERM $$", signal: syscall.SIGTERM},
	}
	r := NewReaper()
	stop := make(chan struct{})
	var storm sync.WaitGroup
	storm.Add(1)
	go func() {
		defer storm.Done()
		for {
			select {
			case <-stop:
				return
			default:
				r.Reap()
			}
		}
	}()
	defer func() { close(stop); storm.Wait() }()

	const rounds = 20
	var wg sync.WaitGroup
	errs := make(chan error, rounds*len(tests))
	for round := range rounds {
		for _, tt := range tests {
			wait := startShell(t, r, tt.script)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ws := wait()
				switch {
				case tt.signal != 0 && (!ws.Signaled() || ws.Signal() != tt.signal):
					errs <- fmt.Errorf("round %d %q: status %#x, want killed by %v", round, tt.script, uint32(ws), tt.signal)
				case tt.signal == 0 && (!ws.Exited() || ws.ExitStatus() != tt.exit):
					errs <- fmt.Errorf("round %d %q: status %#x, want exit %d", round, tt.script, uint32(ws), tt.exit)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := r.Waiting(); n != 0 {
		t.Errorf("%d commands still registered", n)
	}
	if n := r.Orphans(); n != 0 {
		t.Errorf("%d commands' statuses counted as orphans", n)
	}
}

// TestReaperWaiterCollectsAlone: where the kernel has pidfds, a command's
// wait returns though Reap never runs (no SIGCHLD handled): the waiter
// collects its own child once its pidfd turns readable. Without pidfds the
// wait is Reap's: it returns once Reap has run.
func TestReaperWaiterCollectsAlone(t *testing.T) {
	requireShell(t)
	pidfds := true
	if fd, err := unix.PidfdOpen(syscall.Getpid(), 0); errors.Is(err, unix.ENOSYS) {
		pidfds = false
		t.Log("no pidfd_open on this kernel: checking that Reap delivers instead")
	} else if err == nil {
		unix.Close(fd)
	}
	r := NewReaper()
	for _, script := range []string{"exit 5", "sleep 0.1; exit 5"} {
		wait := startShell(t, r, script)
		done := make(chan struct{})
		if !pidfds {
			go func() {
				for {
					select {
					case <-done:
						return
					default:
						r.Reap()
					}
				}
			}()
		}
		ws := wait()
		close(done)
		if !ws.Exited() || ws.ExitStatus() != 5 {
			t.Errorf("%q: status %#x, want exit 5", script, uint32(ws))
		}
	}
	if n := r.Waiting(); n != 0 {
		t.Errorf("%d commands still registered", n)
	}
}
