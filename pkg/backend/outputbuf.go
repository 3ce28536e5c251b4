package backend

import (
	"io"
	"sync"
)

// OutputBuffer carries one output stream of a Process from the goroutine
// that receives it to the one that reads it, chunk by chunk, in order.
// Push blocks while the buffer holds limit bytes or more (no bound when
// limit ≤ 0: the producer bounds it, as an output window does). It is safe
// for concurrent use.
type OutputBuffer struct {
	limit  int
	onRead func(n int)

	mu     sync.Mutex
	cond   *sync.Cond
	chunks []chunk
	size   int
	err    error // the end of the stream once the chunks are read
	gone   bool  // the reader closed: pushes are dropped
}

// chunk is the unread rest of one pushed chunk and the pushed length.
type chunk struct {
	rest []byte
	n    int
}

// NewOutputBuffer returns a buffer bounded by limit. onRead, when non-nil,
// is called with each chunk's length once the reader has consumed all of
// it (outside the buffer's lock).
func NewOutputBuffer(limit int, onRead func(n int)) *OutputBuffer {
	b := &OutputBuffer{limit: limit, onRead: onRead}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// Push appends p, which the buffer keeps; it waits while the buffer is
// full and reports false when the reader closed or the stream ended.
func (b *OutputBuffer) Push(p []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.limit > 0 && b.size >= b.limit && !b.gone && b.err == nil {
		b.cond.Wait()
	}
	if b.gone || b.err != nil {
		return false
	}
	if len(p) > 0 {
		b.chunks = append(b.chunks, chunk{rest: p, n: len(p)})
		b.size += len(p)
		b.cond.Broadcast()
	}
	return true
}

// CloseWithError ends the stream: Read returns err (io.EOF when nil) once
// the buffered chunks are read. Only the first end counts.
func (b *OutputBuffer) CloseWithError(err error) {
	if err == nil {
		err = io.EOF
	}
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.cond.Broadcast()
	b.mu.Unlock()
}

// Read reads buffered output, waiting for some when there is none.
func (b *OutputBuffer) Read(p []byte) (int, error) {
	b.mu.Lock()
	for len(b.chunks) == 0 && b.err == nil && !b.gone {
		b.cond.Wait()
	}
	if b.gone {
		b.mu.Unlock()
		return 0, io.ErrClosedPipe
	}
	if len(b.chunks) == 0 {
		err := b.err
		b.mu.Unlock()
		return 0, err
	}
	head := &b.chunks[0]
	n := copy(p, head.rest)
	consumed := 0
	if head.rest = head.rest[n:]; len(head.rest) == 0 {
		consumed = head.n
		b.chunks[0] = chunk{}
		b.chunks = b.chunks[1:]
	}
	b.size -= n
	b.cond.Broadcast()
	b.mu.Unlock()
	if consumed > 0 && b.onRead != nil {
		b.onRead(consumed)
	}
	return n, nil
}

// Close abandons the stream: buffered and later output is dropped.
func (b *OutputBuffer) Close() error {
	b.mu.Lock()
	b.gone = true
	b.chunks, b.size = nil, 0
	b.cond.Broadcast()
	b.mu.Unlock()
	return nil
}
