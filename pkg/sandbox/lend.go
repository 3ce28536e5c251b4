package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/moby/moby/client"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// Bulk bytes through the agent's open file (docs/security.md): under runc,
// where the channel's agent is the box's PID 1 and this worker can see that
// process, a transfer's bytes skip the channel. The agent opens the file as
// always and names its descriptor; sandboxd takes a duplicate of it with
// pidfd_getfd(2) and writes or reads the bytes itself.

// TransferCounts counts uploads and downloads by the path their bytes
// took: through the agent's open file (Lent) or as chunks over the agent
// channel (Channel). Every download counts; an upload that fits one chunk
// is one upload_file request and counts in neither. LentStreams counts
// the streaming executes whose output came, after its first chunks,
// through a pipe the agent lent.
type TransferCounts struct {
	Lent, Channel, LentStreams int64
}

// Transfers returns the transfer counts since the manager started.
func (m *Manager) Transfers() TransferCounts {
	return TransferCounts{Lent: m.lent.Load(), Channel: m.channelled.Load(), LentStreams: m.lentStreams.Load()}
}

// lender borrows the descriptors of one box's agent, its PID 1, through a
// pidfd; the zero of *lender (nil) borrows nothing.
type lender struct {
	pidfd *os.File
	// off is set once a borrow failed for a reason that will not change
	// (no privilege, no such call): later opens stop asking to lend.
	off atomic.Bool
}

// errNotLent is a borrowed descriptor that is not the file the agent named.
var errNotLent = errors.New("the agent's descriptor is not the file it named")

// borrow returns a duplicate of the agent's transfer file l names, after
// checking that it is a regular file with the device and inode the agent
// reported. Any error leaves the transfer to the channel.
func (l *lender) borrow(lent *agentproto.Lent) (*os.File, error) {
	return l.take(lent, unix.S_IFREG)
}

// borrowPipe returns a duplicate of the read end of the output pipe an
// execute lent, after checking that it is a FIFO with the device and inode
// the agent reported, non-blocking so that the runtime's poller reads it
// and a deadline bounds the read. Any error leaves the output to the
// channel.
func (l *lender) borrowPipe(lent *agentproto.Lent) (*os.File, error) {
	return l.take(lent, unix.S_IFIFO)
}

// take is borrow and borrowPipe: the descriptor must have file type kind.
func (l *lender) take(lent *agentproto.Lent, kind uint32) (*os.File, error) {
	if l == nil || lent == nil || l.off.Load() {
		return nil, errNotLent
	}
	sc, err := l.pidfd.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	cerr := sc.Control(func(pidfd uintptr) { fd, err = unix.PidfdGetfd(int(pidfd), lent.FD, 0) })
	switch {
	case cerr != nil:
		return nil, cerr
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.ENOSYS):
		l.off.Store(true)
		return nil, err
	case err != nil:
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if st.Mode&unix.S_IFMT != kind || uint64(st.Dev) != lent.Dev || st.Ino != lent.Ino {
		unix.Close(fd)
		return nil, errNotLent
	}
	if kind == unix.S_IFIFO {
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return nil, err
		}
	}
	return os.NewFile(uintptr(fd), "lent"), nil
}

func (l *lender) close() {
	if l != nil {
		l.pidfd.Close()
	}
}

// lending is a channel's lender, set up at the first transfer that asks.
type lending struct {
	once sync.Once
	l    *lender
}

// lender returns the lender of ch, sb's channel, opening it at the first
// call; nil when the bytes must go through the channel: the agent is not
// the box's PID 1, the box is not under runc (a gVisor box's PID 1 seen
// from here is the runsc sandbox), this worker cannot see or verify the
// process, or Config.ChannelTransfers.
func (m *Manager) lender(sb *sandbox, ch *channel) *lender {
	if !ch.pid1 || m.cfg.ChannelTransfers {
		return nil
	}
	ch.lending.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), engineTimeout)
		defer cancel()
		l, err := m.openLender(ctx, sb)
		if err != nil {
			m.lg.Debug("transfers go through the agent channel", zap.String("sandbox-id", m.snapshot(sb).ID), zap.Error(err))
			return
		}
		ch.mu.Lock()
		if ch.err != nil { // reset meanwhile: reset closed no lender
			ch.mu.Unlock()
			l.close()
			return
		}
		ch.lending.l = l
		ch.mu.Unlock()
	})
	if l := ch.lending.l; l != nil && !l.off.Load() {
		return l
	}
	return nil
}

// openLender opens a pidfd of sb's PID 1 and checks it is that container's
// (docs/security.md, "Which process"): the engine's pid, whose cgroup names
// the container, with the engine still reporting the container running
// with that pid and start time after the pidfd was opened.
func (m *Manager) openLender(ctx context.Context, sb *sandbox) (*lender, error) {
	info := m.snapshot(sb)
	if rt := cmpOr(info.Settings.Runtime, m.limits.engineDefault); rt != "runc" {
		return nil, fmt.Errorf("runtime %s", rt)
	}
	cid := info.ContainerID
	state := func() (int, string, error) {
		res, err := m.api.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
		if err != nil {
			return 0, "", err
		}
		st := res.Container.State
		if st == nil || !st.Running || st.Pid <= 0 {
			return 0, "", errors.New("the container is not running")
		}
		return st.Pid, st.StartedAt, nil
	}
	pid, started, err := state()
	if err != nil {
		return nil, err
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd of pid %d: %w", pid, err)
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err == nil && !strings.Contains(string(cg), cid) {
		err = fmt.Errorf("pid %d is not in the container's cgroup", pid)
	}
	if err == nil {
		var pid2 int
		var started2 string
		if pid2, started2, err = state(); err == nil && (pid2 != pid || started2 != started) {
			err = errors.New("the container restarted")
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &lender{pidfd: f}, nil
}
