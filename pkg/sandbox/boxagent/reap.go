package boxagent

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Reaper owns every wait of a process that is its box's PID 1 (or a child
// subreaper): Reap collects each exited child with wait4(-1) and hands its
// status to the command the agent started with that pid, or drops it (an
// orphan re-parented to the reaper). With Config.Reaper set, Serve starts
// commands through it and never calls exec.Cmd.Wait or os.Process.Wait,
// which would race the reaper for the same statuses.
//
// A command is started and registered under the reaper's lock, and Reap
// holds the same lock while it waits, so a command that exits at once is
// never taken for an orphan. A registered command's waiter may also reap
// its own child (see start), under the same lock.
//
// The process must reap only through the Reaper: any other wait for any
// child (a library's exec.Cmd.Wait included) can lose its status to Reap.
type Reaper struct {
	mu      sync.Mutex
	waiting map[int]chan syscall.WaitStatus
	orphans atomic.Uint64
}

// NewReaper returns a reaper with no command registered. The caller runs
// Reap on every SIGCHLD (and once after subscribing to it).
func NewReaper() *Reaper {
	return &Reaper{waiting: map[int]chan syscall.WaitStatus{}}
}

// start runs spawn, which must start exactly one child and return its pid,
// registers that pid, and returns how to wait for the child's status.
//
// The wait takes the status from whichever collects it first: Reap, run on
// SIGCHLD, or the waiter itself once the child's pidfd (opened here, while
// the child cannot have been reaped, so the pid is still its) turns
// readable in the runtime's poller. The second path wakes the waiting
// goroutine straight from the kernel's exit, without the signal's hops
// through the runtime (docs/benchmarks.md, B2); without pidfds (old
// kernels, a runtime that lacks them) the wait is Reap's alone.
func (r *Reaper) start(spawn func() (int, error)) (wait func() syscall.WaitStatus, pid int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pid, err = spawn(); err != nil {
		return nil, 0, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.waiting[pid] = ch
	if fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK); err == nil {
		// A nonblocking descriptor: os.NewFile registers it with the poller.
		f := os.NewFile(uintptr(fd), "pidfd")
		return func() syscall.WaitStatus { return r.await(f, pid, ch) }, pid, nil
	}
	return func() syscall.WaitStatus { return <-ch }, pid, nil
}

// await waits on pidfd for the child pid to exit and returns its status,
// collected by itself or by Reap (then on ch). It closes pidfd.
func (r *Reaper) await(pidfd *os.File, pid int, ch <-chan syscall.WaitStatus) syscall.WaitStatus {
	defer pidfd.Close()
	var ws syscall.WaitStatus
	rc, err := pidfd.SyscallConn()
	if err == nil {
		err = rc.Read(func(uintptr) bool {
			var ok bool
			ws, ok = r.collect(pid, ch)
			return ok
		})
	}
	if err != nil {
		return <-ch // the poller cannot wait on it: Reap delivers
	}
	return ws
}

// collect returns pid's status if it has exited: from ch when Reap took
// it, else by reaping pid now. Both happen under the reaper's lock, so the
// status is delivered exactly once.
func (r *Reaper) collect(pid int, ch <-chan syscall.WaitStatus) (syscall.WaitStatus, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case ws := <-ch:
		return ws, true
	default:
	}
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil || got != pid || (!ws.Exited() && !ws.Signaled()):
			return 0, false // still running; ECHILD cannot happen while ch is empty
		}
		delete(r.waiting, pid)
		return ws, true
	}
}

// Reap collects every child that has exited, without blocking: a
// registered command's status goes to its channel, anything else is
// counted as an orphan.
func (r *Reaper) Reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if !ws.Exited() && !ws.Signaled() {
			continue // stopped or continued: no WUNTRACED/WCONTINUED, so not expected
		}
		if ch, ok := r.waiting[pid]; ok {
			delete(r.waiting, pid)
			ch <- ws
			continue
		}
		r.orphans.Add(1)
	}
}

// Orphans is how many children Reap collected that no command was
// waiting for.
func (r *Reaper) Orphans() uint64 { return r.orphans.Load() }

// Waiting is how many started commands have not been reaped yet.
func (r *Reaper) Waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.waiting)
}
