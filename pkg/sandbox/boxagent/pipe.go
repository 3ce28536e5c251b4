package boxagent

import (
	"os"
	"sync"
	"syscall"

	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"

	"golang.org/x/sys/unix"
)

// bulkPipeBytes is the capacity the agent gives a pipe that carries bulk
// bytes (its channel while a transfer or a streaming execute is running,
// a streaming execute's output): the kernel's default 64 KiB makes every
// hop of the path (process → agent → containerd-shim → dockerd) hand over
// 64 KiB per wake-up, and the hops wait on each other. 1 MiB is the
// default /proc/sys/fs/pipe-max-size, the most an unprivileged process
// may ask for.
const bulkPipeBytes = 1 << 20

// setPipeSize sets the capacity of f, when it is a pipe, to n bytes (the
// kernel rounds up to a power-of-two number of pages) and returns the
// capacity it had and the one it has; 0, 0 when f is not a pipe file
// or its size cannot be read. It is best effort: a pipe the kernel refuses
// to grow (the owner's pipe-user-pages-soft budget is spent) or to shrink
// (it holds more than n bytes) keeps its size, which only costs speed or
// memory.
func setPipeSize(f any, n int) (old, now int) {
	file, ok := f.(syscall.Conn)
	if !ok || file == nil || file == (*os.File)(nil) {
		return 0, 0
	}
	// Fd() would switch the file to blocking mode and break deadlines;
	// Control borrows the descriptor without that.
	rc, err := file.SyscallConn()
	if err != nil {
		return 0, 0
	}
	_ = rc.Control(func(fd uintptr) {
		size, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
		if err != nil {
			return
		}
		old, now = size, size
		if size != n {
			if size, err := unix.FcntlInt(fd, unix.F_SETPIPE_SZ, n); err == nil {
				now = size
			}
		}
	})
	return old, now
}

// chunks recycles the ChunkBytes buffers of upload payloads and download
// reads: a transfer would otherwise allocate (and zero) a fresh MiB per
// chunk, and the box's CPU quota pays for it and the collections.
var chunks = sync.Pool{New: func() any { b := make([]byte, agentproto.ChunkBytes); return &b }}

// pooledBytes is the smallest buffer getChunk takes from the pool: a
// smaller one (a small write's content, a process's input) is allocated at
// its size rather than hold a pooled MiB.
const pooledBytes = 64 << 10

// getChunk returns a buffer of n bytes: from the pool when n is between
// pooledBytes and agentproto.ChunkBytes (a write's content may be larger).
func getChunk(n int) []byte {
	if n < pooledBytes || n > agentproto.ChunkBytes {
		return make([]byte, n)
	}
	b := *chunks.Get().(*[]byte)
	return b[:n]
}

// putChunk returns a buffer from getChunk to the pool; other slices (nil,
// or of another capacity) are ignored.
func putChunk(b []byte) {
	if cap(b) != agentproto.ChunkBytes {
		return
	}
	b = b[:0]
	chunks.Put(&b)
}
