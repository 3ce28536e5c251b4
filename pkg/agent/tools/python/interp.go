package python

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/plumbhq/plumb/pkg/backend"
)

// driver is the Python side of the protocol (see driver.py).
//
//go:embed driver.py
var driver string

// maxProtocolLine bounds one answer line of the driver: three fields of at
// most limit characters, JSON-escaped. A longer line that carries the
// call's nonce is treated as raw output.
const maxProtocolLine = 16 << 20

// reply is one answer of the driver.
type reply struct {
	ID     int     `json:"id"`
	Ready  bool    `json:"ready"`
	Python string  `json:"python"`
	Stdout string  `json:"stdout"`
	Stderr string  `json:"stderr"`
	Value  *string `json:"value"`
	Error  bool    `json:"error"`
}

// outcome is what one call produced: the driver's reply plus what the
// process wrote to its file descriptors 1 and 2 directly (subprocesses,
// C code) while the call ran.
type outcome struct {
	reply
	rawOut, rawErr string
}

// errDied is returned by interp.call when the process ended mid-call.
type errDied struct {
	exit   backend.ProcessExit
	waited bool // exit is known
	rawOut string
	rawErr string
}

func (e *errDied) Error() string {
	switch {
	case !e.waited:
		return "the Python interpreter exited"
	case e.exit.OOMKilled:
		return "the Python interpreter was killed for running out of memory (the sandbox's memory limit)"
	case e.exit.Signal != "":
		return "the Python interpreter was killed by signal " + e.exit.Signal
	default:
		return "the Python interpreter exited with code " + strconv.Itoa(e.exit.ExitCode)
	}
}

// errTimeout is returned by interp.call when the call's time ran out.
var errTimeout = errors.New("timed out")

// errTampered is returned by interp.call when the driver's channel carried
// what the driver never sends: an answer or end mark for another call
// than the one in flight, a second one for a call, or an undecodable
// answer under the call's nonce. Only code in the interpreter can write
// those (it found the call's nonce), so no answer of it can be trusted.
type errTampered struct{ why string }

func (e *errTampered) Error() string {
	return "the Python interpreter's answer channel was tampered with (" + e.why + ")"
}

// interp is one running interpreter: the process, the nonce of the call
// in flight, and the two goroutines that drain its stdout and stderr.
// call is not safe for concurrent use (the session serializes calls);
// close is.
type interp struct {
	id    string // told to the model's State; not secret
	proc  backend.Process
	lg    *zap.Logger
	limit int

	mu sync.Mutex
	// nonce marks the driver's lines for call cur (0: the start); a fresh
	// one per call, sent with the call, never valid for another.
	nonce    []byte
	cur      int
	replies  map[int]reply
	marks    map[int]bool
	answered bool   // call cur's answer came (it may have been taken)
	marked   bool   // call cur's end mark came
	tampered string // why the channel cannot be trusted; "" while it can
	rawOut   capBuf
	rawErr   capBuf
	changed  chan struct{} // 1-buffered: something above changed

	outDone, errDone chan struct{}
	nextID           int
	closeOnce        sync.Once
}

// command is the shell line that starts the driver.
func command(python string, limit int) string {
	return fmt.Sprintf("exec %s -u -c %s %d", python, shellQuote(driver), limit)
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}

// startInterp starts the driver through ps and waits until it is ready.
// ctx bounds the start.
func startInterp(ctx context.Context, ps backend.ProcessStarter, python string, limit int, lg *zap.Logger) (*interp, error) {
	proc, err := ps.StartProcess(ctx, backend.ProcessRequest{Command: command(python, limit)})
	if err != nil {
		return nil, err
	}
	nonce := randomHex(16)
	it := &interp{
		id: randomHex(8), nonce: []byte(nonce + " "), proc: proc, lg: lg, limit: limit,
		replies: map[int]reply{}, marks: map[int]bool{},
		rawOut: capBuf{limit: limit}, rawErr: capBuf{limit: limit},
		changed: make(chan struct{}, 1),
		outDone: make(chan struct{}), errDone: make(chan struct{}),
		nextID: 1,
	}
	go it.drain(proc.Stdout(), &it.rawOut, it.outDone, it.onStdout)
	go it.drain(proc.Stderr(), &it.rawErr, it.errDone, it.onStderr)
	err = it.send(ctx, nonce+"\n")
	switch {
	case err != nil && ctx.Err() == nil: // stdin is closed: the process ended
		err = it.died(ctx)
	case err == nil:
		_, err = it.await(ctx, 0, false)
	}
	if err != nil {
		it.close()
		var died *errDied
		if errors.As(err, &died) {
			msg := strings.TrimSpace(died.rawErr + "\n" + died.rawOut)
			if msg == "" {
				return nil, fmt.Errorf("start the Python interpreter: %v", err)
			}
			return nil, fmt.Errorf("start the Python interpreter: %v: %s", err, msg)
		}
		return nil, fmt.Errorf("start the Python interpreter: %w", err)
	}
	return it, nil
}

// send writes s to the interpreter's stdin, giving up when ctx ends (the
// caller then closes the process, which ends the write).
func (it *interp) send(ctx context.Context, s string) error {
	errc := make(chan error, 1)
	go func() {
		_, err := io.WriteString(it.proc.Stdin(), s)
		errc <- err
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		it.close()
		<-errc
		return ctx.Err()
	}
}

// call runs code and waits for its outcome at most timeout.
func (it *interp) call(ctx context.Context, code string, timeout time.Duration) (outcome, error) {
	id := it.nextID
	it.nextID++
	nonce := randomHex(16)
	req, err := json.Marshal(struct {
		ID    int    `json:"id"`
		Nonce string `json:"nonce"`
		Code  string `json:"code"`
	}{id, nonce, code})
	if err != nil {
		return outcome{}, err
	}
	it.mu.Lock()
	it.nonce, it.cur, it.answered, it.marked = []byte(nonce+" "), id, false, false
	it.mu.Unlock()
	tctx, cancel := context.WithTimeoutCause(ctx, timeout, errTimeout)
	defer cancel()
	if err := it.send(tctx, string(req)+"\n"); err != nil {
		if c := context.Cause(tctx); c != nil {
			return outcome{}, c
		}
		return outcome{}, it.died(ctx)
	}
	r, err := it.await(tctx, id, true)
	if err != nil {
		return outcome{}, err
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	return outcome{reply: r, rawOut: it.rawOut.take(), rawErr: it.rawErr.take()}, nil
}

// await waits for reply id (and, when mark is set, for its end mark on
// stderr), for the process to die, or for ctx to end; the cause of ctx
// (errTimeout) is returned then.
func (it *interp) await(ctx context.Context, id int, mark bool) (reply, error) {
	for {
		it.mu.Lock()
		if why := it.tampered; why != "" {
			it.mu.Unlock()
			return reply{}, &errTampered{why: why}
		}
		r, ok := it.replies[id]
		done := ok && (!mark || it.marks[id])
		if done {
			delete(it.replies, id)
			delete(it.marks, id)
		}
		it.mu.Unlock()
		if done {
			return r, nil
		}
		select {
		case <-it.changed:
		case <-it.outDone:
			// A reply that came with the end of stdout is still good;
			// its end mark may be lost with stderr.
			it.mu.Lock()
			r, ok := it.replies[id]
			it.mu.Unlock()
			if ok {
				select {
				case <-it.errDone:
					return r, nil
				case <-it.changed:
					continue
				case <-ctx.Done():
					return reply{}, context.Cause(ctx)
				}
			}
			return reply{}, it.died(ctx)
		case <-ctx.Done():
			return reply{}, context.Cause(ctx)
		}
	}
}

// died reports a process whose stdout ended: how it exited (waiting a
// little for that) and what it wrote last.
func (it *interp) died(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	e := &errDied{}
	if exit, err := it.proc.Wait(wctx); err == nil {
		e.exit, e.waited = exit, true
	}
	select {
	case <-it.errDone:
	case <-wctx.Done():
	}
	it.mu.Lock()
	e.rawOut, e.rawErr = it.rawOut.take(), it.rawErr.take()
	it.mu.Unlock()
	return e
}

// tamperedWith returns why the interpreter's channel cannot be trusted,
// or "".
func (it *interp) tamperedWith() string {
	it.mu.Lock()
	defer it.mu.Unlock()
	return it.tampered
}

// tamper records the first sign of tampering; it.mu is held.
func (it *interp) tamper(why string) {
	if it.tampered == "" {
		it.tampered = why
		it.lg.Warn("the Python interpreter's answer channel was tampered with", zap.String("interpreter", it.id), zap.String("why", why))
	}
}

// alive reports whether the process has not closed its stdout.
func (it *interp) alive() bool {
	select {
	case <-it.outDone:
		return false
	default:
		return true
	}
}

// closeWait bounds how long close waits for the output streams to end
// after Process.Close, which should end them at once.
const closeWait = 30 * time.Second

// close kills the process and waits for the drain goroutines.
func (it *interp) close() {
	it.closeOnce.Do(func() {
		if err := it.proc.Close(); err != nil {
			it.lg.Debug("close the Python interpreter", zap.Error(err))
		}
	})
	t := time.NewTimer(closeWait)
	defer t.Stop()
	for _, done := range []chan struct{}{it.outDone, it.errDone} {
		select {
		case <-done:
		case <-t.C:
			// Not waiting forever keeps the thread's session usable; the
			// drain goroutine ends whenever the stream does.
			it.lg.Warn("the Python interpreter's output did not end after it was closed", zap.Duration("waited", closeWait))
			return
		}
	}
}

func (it *interp) notify() {
	select {
	case it.changed <- struct{}{}:
	default:
	}
}

// onStdout takes a line under the current call's nonce: exactly one
// answer, for that call, is the driver's; anything else is tampering.
func (it *interp) onStdout(payload []byte) {
	var r reply
	err := json.Unmarshal(payload, &r)
	it.mu.Lock()
	switch {
	case err != nil:
		it.tamper(fmt.Sprintf("an undecodable answer during call %d", it.cur))
	case r.ID != it.cur:
		it.tamper(fmt.Sprintf("an answer for call %d during call %d", r.ID, it.cur))
	case it.answered:
		it.tamper(fmt.Sprintf("a second answer for call %d", r.ID))
	default:
		it.answered = true
		it.replies[r.ID] = r
	}
	it.mu.Unlock()
	it.notify()
}

// onStderr takes a line under the current call's nonce on stderr: exactly
// one end mark, for that call.
func (it *interp) onStderr(payload []byte) {
	rest, ok := bytes.CutPrefix(payload, []byte("end "))
	id, err := strconv.Atoi(string(rest))
	it.mu.Lock()
	switch {
	case !ok || err != nil:
		it.tamper(fmt.Sprintf("an undecodable end mark during call %d", it.cur))
	case id != it.cur:
		it.tamper(fmt.Sprintf("an end mark for call %d during call %d", id, it.cur))
	case it.marked:
		it.tamper(fmt.Sprintf("a second end mark for call %d", id))
	default:
		it.marked = true
		it.marks[id] = true
	}
	it.mu.Unlock()
	it.notify()
}

// prefix is what starts the driver's lines now: the current call's nonce
// and a space.
func (it *interp) prefix() []byte {
	it.mu.Lock()
	defer it.mu.Unlock()
	return it.nonce
}

// drain reads one output stream of the process to its end: lines carrying
// the current call's nonce go to onLine, everything else (old nonces
// included) into raw.
func (it *interp) drain(r io.Reader, raw *capBuf, done chan struct{}, onLine func([]byte)) {
	defer close(done)
	defer it.notify()
	sp := splitter{r: bufio.NewReaderSize(r, 64<<10), prefix: it.prefix, max: maxProtocolLine}
	for {
		data, line, err := sp.next()
		if len(data) > 0 {
			it.mu.Lock()
			raw.write(data)
			it.mu.Unlock()
		}
		if line != nil {
			onLine(line)
		}
		if err != nil {
			return
		}
	}
}

// splitter separates the driver's lines ("<nonce> <payload>\n", possibly
// after raw bytes that did not end in a newline) from raw output. The
// nonce changes with each call: prefix returns the current one.
type splitter struct {
	r      *bufio.Reader
	prefix func() []byte
	max    int
	buf    []byte
}

// next returns raw bytes and/or one protocol payload; err is the read
// error (io.EOF at the end), after which the remaining bytes were
// returned as raw.
func (s *splitter) next() (raw, payload []byte, err error) {
	chunk, err := s.r.ReadSlice('\n')
	s.buf = append(s.buf, chunk...)
	complete := err == nil
	if errors.Is(err, bufio.ErrBufferFull) {
		err = nil
	}
	nonce := s.prefix()
	i := bytes.Index(s.buf, nonce)
	switch {
	case err != nil: // the end: whatever is left is raw
		raw, s.buf = s.buf, nil
		return raw, nil, err
	case i >= 0 && complete:
		raw = bytes.Clone(s.buf[:i])
		payload = bytes.Clone(bytes.TrimSuffix(s.buf[i+len(nonce):], []byte("\n")))
		s.buf = s.buf[:0]
		return raw, payload, nil
	case i >= 0 && len(s.buf)-i > s.max: // not an answer of ours
		raw, s.buf = s.buf, nil
		return raw, nil, nil
	case i >= 0: // an answer still arriving
		return nil, nil, nil
	case complete:
		raw = bytes.Clone(s.buf)
		s.buf = s.buf[:0]
		return raw, nil, nil
	}
	// A long raw line: pass it on, but keep what could be the start of a
	// nonce.
	keep := len(nonce) - 1
	if len(s.buf) <= keep {
		return nil, nil, nil
	}
	raw = bytes.Clone(s.buf[:len(s.buf)-keep])
	s.buf = append(s.buf[:0], s.buf[len(s.buf)-keep:]...)
	return raw, nil, nil
}

// capBuf keeps the first and last limit/2 bytes written to it and counts
// the rest.
type capBuf struct {
	limit   int
	head    []byte
	tail    []byte
	omitted int64
}

func (c *capBuf) write(p []byte) {
	half := max(c.limit/2, 1)
	if n := min(half-len(c.head), len(p)); n > 0 {
		c.head = append(c.head, p[:n]...)
		p = p[n:]
	}
	if len(p) == 0 {
		return
	}
	c.tail = append(c.tail, p...)
	if over := len(c.tail) - half; over > half { // trim in batches: amortized linear
		c.omitted += int64(over)
		c.tail = append(c.tail[:0], c.tail[over:]...)
	}
}

// take returns the text kept (valid UTF-8, with a note where bytes were
// left out) and resets the buffer.
func (c *capBuf) take() string {
	half := max(c.limit/2, 1)
	if over := len(c.tail) - half; over > 0 {
		c.omitted += int64(over)
		c.tail = c.tail[over:]
	}
	var s string
	if c.omitted > 0 {
		s = fmt.Sprintf("%s\n... [%d bytes omitted] ...\n%s", validUTF8(c.head), c.omitted, validUTF8(c.tail))
	} else {
		s = validUTF8(append(c.head, c.tail...))
	}
	c.head, c.tail, c.omitted = nil, nil, 0
	return s
}

func validUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
