package boxagent

import (
	"os"
	"sync"
	"sync/atomic"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

// lentOutput is the pipe a streaming execute lends the worker for its
// output (docs/security.md, "Streamed output through a lent pipe"). The
// output goes as frames until the worker says it holds the read end
// (take); from then on it goes into w. Both ends are close-on-exec, so no
// command holds them.
type lentOutput struct {
	w  *os.File
	on atomic.Bool // the worker took the read end: output goes into w

	mu sync.Mutex
	r  *os.File // the agent's read end until the worker takes it or the output ends
}

// newLentOutput makes the pipe and names its read end; nil when either
// fails, and the output then stays on the channel.
func newLentOutput() (*lentOutput, *agentproto.Lent) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil
	}
	lent := lend(r)
	if lent == nil {
		r.Close()
		w.Close()
		return nil, nil
	}
	setPipeSize(w, bulkPipeBytes)
	return &lentOutput{r: r, w: w}, lent
}

// take switches the output to the pipe once the worker holds its own
// duplicate of the read end, and closes the agent's; false when the
// execute has already ended.
func (l *lentOutput) take() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.r == nil {
		return l.on.Load()
	}
	l.r.Close()
	l.r = nil
	l.on.Store(true)
	return true
}

// close ends the output: the worker reads EOF after the last byte.
func (l *lentOutput) close() {
	l.w.Close()
	l.mu.Lock()
	if l.r != nil {
		l.r.Close()
		l.r = nil
	}
	l.mu.Unlock()
}

// lendOutput wraps a streaming execute's emit (frames) for request id: it
// lends a pipe (a lent event), and once the worker has taken it, says so
// (one lent_on event) and writes the output into it. done ends the pipe;
// the caller calls it when the execute has returned, before its answer.
func (s *server) lendOutput(id uint64, frames func([]byte) error) (emit func([]byte) error, done func()) {
	l, lent := newLentOutput()
	if l == nil {
		return frames, func() {}
	}
	done = func() {
		s.mu.Lock()
		delete(s.lent, id)
		s.mu.Unlock()
		l.close()
	}
	// Registered before it is named, so the worker's lent_taken finds it.
	s.mu.Lock()
	s.lent[id] = l
	s.mu.Unlock()
	raw, err := agentproto.Marshal(lent)
	if err == nil {
		err = s.w.Write(agentproto.Response{ID: id, Event: agentproto.EventLent, Result: raw})
	}
	if err != nil {
		done()
		return frames, func() {}
	}
	announced := false // emit is called by one goroutine at a time
	emit = func(b []byte) error {
		if !l.on.Load() {
			return frames(b)
		}
		if !announced {
			announced = true
			if err := s.w.Write(agentproto.Response{ID: id, Event: agentproto.EventLentOn}); err != nil {
				return err
			}
		}
		_, err := l.w.Write(b)
		return err
	}
	return emit, done
}

// lentTaken answers OpLentTaken: the worker holds the pipe an execute lent.
func (s *server) lentTaken(req agentproto.Request) agentproto.Response {
	var a agentproto.LentTakenArgs
	if e := decodeArgs(req, &a); e != nil {
		return agentproto.Failure(req.ID, e)
	}
	s.mu.Lock()
	l := s.lent[a.Target]
	s.mu.Unlock()
	if l == nil || !l.take() {
		return agentproto.Failure(req.ID, backend.Errorf(backend.CodeInvalidArgument, "", "request %d lends no output pipe now", a.Target))
	}
	return agentproto.Result(req.ID, struct{}{})
}
