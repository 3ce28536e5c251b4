package boxagent

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
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
// never taken for an orphan.
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
// and registers that pid; the channel receives the child's status once.
func (r *Reaper) start(spawn func() (int, error)) (<-chan syscall.WaitStatus, int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := spawn()
	if err != nil {
		return nil, 0, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.waiting[pid] = ch
	return ch, pid, nil
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
