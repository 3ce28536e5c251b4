package runs_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	plumbv1 "github.com/plumbhq/plumb/gen/go/plumb/v1"
	"github.com/plumbhq/plumb/internal/runhost/runs"
	"github.com/plumbhq/plumb/pkg/agent"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func ev(seq uint64, p any) *plumbv1.Event {
	e := &plumbv1.Event{Sequence: seq, ThreadId: "t1", RunId: "r1", AgentPath: "main"}
	switch p := p.(type) {
	case *plumbv1.RunStarted:
		e.Payload = &plumbv1.Event_RunStarted{RunStarted: p}
	case *plumbv1.MessageDelta:
		e.Payload = &plumbv1.Event_MessageDelta{MessageDelta: p}
	case *plumbv1.ToolCallStarted:
		e.Payload = &plumbv1.Event_ToolCallStarted{ToolCallStarted: p}
	case *plumbv1.ToolCallDelta:
		e.Payload = &plumbv1.Event_ToolCallDelta{ToolCallDelta: p}
	case *plumbv1.ToolOutput:
		e.Payload = &plumbv1.Event_ToolOutput{ToolOutput: p}
	case *plumbv1.RunFinished:
		e.Payload = &plumbv1.Event_RunFinished{RunFinished: p}
	}
	return e
}

func started(seq uint64) *plumbv1.Event {
	return ev(seq, &plumbv1.RunStarted{ThreadId: "t1", RunId: "r1"})
}
func delta(seq uint64, text string) *plumbv1.Event {
	return ev(seq, &plumbv1.MessageDelta{Text: text, Step: 1, Attempt: 1})
}
func tool(seq uint64) *plumbv1.Event   { return ev(seq, &plumbv1.ToolCallStarted{Id: "c"}) }
func finish(seq uint64) *plumbv1.Event { return ev(seq, &plumbv1.RunFinished{}) }

// collect follows r and returns the sequences sent.
func collect(t *testing.T, f func(context.Context, func(*plumbv1.Event) error) error) ([]*plumbv1.Event, error) {
	t.Helper()
	var out []*plumbv1.Event
	err := f(t.Context(), func(e *plumbv1.Event) error {
		out = append(out, e)
		return nil
	})
	return out, err
}

func seqs(evs []*plumbv1.Event) []uint64 {
	var out []uint64
	for _, e := range evs {
		out = append(out, e.GetSequence())
	}
	return out
}

// leave drops the owner's pin, as a detached run whose client left.
func leave(r *runs.Run) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = r.Stream(ctx, func(*plumbv1.Event) error { return nil })
}

func TestBeginRules(t *testing.T) {
	g := runs.New(runs.Options{MaxRuns: 2})
	nop := func() {}
	r1, err := g.Begin("t1", nop)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Begin("t1", nop); !errors.Is(err, agent.ErrThreadBusy) {
		t.Errorf("second run on t1: %v", err)
	}
	r2, err := g.Begin("", nop)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Begin("t3", nop); !errors.Is(err, runs.ErrNoSlot) {
		t.Errorf("third run: %v", err)
	}
	if _, err := g.Reserve("t1"); !errors.Is(err, agent.ErrThreadBusy) {
		t.Errorf("reserve a running thread: %v", err)
	}
	r1.End(errors.New("rejected"))
	r2.End(errors.New("rejected"))
	release, err := g.Reserve("t1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Begin("t1", nop); !errors.Is(err, agent.ErrThreadBusy) {
		t.Errorf("run on a reserved thread: %v", err)
	}
	release()
	r, err := g.Begin("t1", nop)
	if err != nil {
		t.Fatal(err)
	}
	r.End(errors.New("rejected"))
	g.Drain()
	if _, err := g.Begin("t9", nop); !errors.Is(err, runs.ErrShuttingDown) {
		t.Errorf("run while draining: %v", err)
	}
}

// TestFinishing: a segment that emitted its terminal event but has not
// ended is finishing; its channel closes at End, and then the thread's
// next run begins.
func TestFinishing(t *testing.T) {
	g := runs.New(runs.Options{MaxRuns: 2})
	nop := func() {}
	r, err := g.Begin("t1", nop)
	if err != nil {
		t.Fatal(err)
	}
	r.Emit(started(1))
	if g.Finishing("t1") != nil {
		t.Error("a running segment is finishing")
	}
	r.Emit(finish(2))
	ch := g.Finishing("t1")
	if ch == nil {
		t.Fatal("a segment whose terminal event is held is not finishing")
	}
	if _, err := g.Begin("t1", nop); !errors.Is(err, agent.ErrThreadBusy) {
		t.Errorf("run on a finishing thread: %v", err)
	}
	r.End(nil)
	<-ch
	if g.Finishing("t1") != nil || g.Finishing("t2") != nil {
		t.Error("an ended or unknown thread is finishing")
	}
	next, err := g.Begin("t1", nop)
	if err != nil {
		t.Fatal(err)
	}
	next.End(errors.New("rejected"))
	leave(r)
}

// The terminal event is published only by End, after the slot and the
// thread are free; the owner's stream ends with it.
func TestTerminalHeldUntilEnd(t *testing.T) {
	g := runs.New(runs.Options{MaxRuns: 1})
	r, err := g.Begin("t1", func() {})
	if err != nil {
		t.Fatal(err)
	}
	r.Emit(started(1))
	r.Emit(delta(2, "a"))
	r.Emit(finish(3))
	got := make(chan []uint64, 1)
	var freeAtTerminal bool
	go func() {
		var s []uint64
		_ = r.Stream(context.Background(), func(e *plumbv1.Event) error {
			s = append(s, e.GetSequence())
			if e.GetRunFinished() != nil {
				freeAtTerminal = g.Live() == 0 && g.Active("t1") == nil
			}
			return nil
		})
		got <- s
	}()
	select {
	case s := <-got:
		t.Fatalf("stream ended before End: %v", s)
	case <-time.After(50 * time.Millisecond):
	}
	r.End(nil)
	if s := <-got; !slices.Equal(s, []uint64{1, 2, 3}) {
		t.Errorf("stream %v", s)
	}
	if !freeAtTerminal {
		t.Error("the slot or the thread was still taken when the terminal event was sent")
	}
	select {
	case <-r.Done():
	default:
		t.Error("Done not closed")
	}
}

// A run that fails to start returns its error to the owner, is not
// attachable, and leaves the thread's retained replay in place.
func TestStartErrorKeepsRetainedReplay(t *testing.T) {
	g := runs.New(runs.Options{})
	r, _ := g.Begin("t1", func() {})
	r.Emit(started(1))
	r.Emit(finish(2))
	r.End(nil)

	bad, _ := g.Begin("t1", func() {})
	boom := errors.New("pending interrupt")
	bad.End(boom)
	if _, err := collect(t, bad.Stream); !errors.Is(err, boom) {
		t.Errorf("owner got %v", err)
	}
	a, after, err := g.Attach("t1", 0)
	if err != nil || a != r || after != 0 {
		t.Fatalf("attach after a rejected run: %v %v", a, err)
	}

	never, _ := g.Begin("t2", func() {})
	never.End(boom)
	if _, _, err := g.Attach("t2", 0); !errors.Is(err, runs.ErrNoRun) {
		t.Errorf("attach to a run that never started: %v", err)
	}
}

// A retained log expires ReplayRetention after the terminal event.
func TestRetention(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	g := runs.New(runs.Options{Retention: time.Minute, Now: c.Now})
	r, _ := g.Begin("", func() {})
	r.Emit(started(1))
	r.Emit(finish(2))
	r.End(nil)
	c.add(59 * time.Second)
	a, _, err := g.Attach("t1", 0)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := collect(t, func(ctx context.Context, send func(*plumbv1.Event) error) error { return a.Follow(ctx, 0, send) })
	if err != nil || !slices.Equal(seqs(evs), []uint64{1, 2}) {
		t.Errorf("replay %v, %v", seqs(evs), err)
	}
	c.add(time.Second)
	if _, _, err := g.Attach("t1", 0); !errors.Is(err, runs.ErrNoRun) {
		t.Errorf("after retention: %v", err)
	}
}

// Over MaxEvents, deltas are coalesced first (text kept, the later
// sequence carried), then the oldest events dropped; Attach then reports
// OUT_OF_RANGE for what is gone.
func TestTrimCoalescesThenDrops(t *testing.T) {
	g := runs.New(runs.Options{MaxEvents: 10})
	r, _ := g.Begin("", func() {})
	leave(r)
	r.Emit(started(1))
	var want strings.Builder
	for i := uint64(2); i <= 31; i++ {
		r.Emit(delta(i, string(rune('a'+i%26))))
		want.WriteString(string(rune('a' + i%26)))
	}
	a, after, err := g.Attach("t1", 0)
	if err != nil {
		t.Fatal(err)
	}
	r.Emit(finish(32))
	r.End(nil)
	evs, err := collect(t, func(ctx context.Context, send func(*plumbv1.Event) error) error { return a.Follow(ctx, after, send) })
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) > 10 || evs[0].GetSequence() != 1 || evs[len(evs)-1].GetSequence() != 32 {
		t.Fatalf("log %v", seqs(evs))
	}
	var text strings.Builder
	for i, e := range evs {
		text.WriteString(e.GetMessageDelta().GetText())
		if i > 0 && e.GetSequence() <= evs[i-1].GetSequence() {
			t.Errorf("reordered: %v", seqs(evs))
		}
	}
	if text.String() != want.String() {
		t.Errorf("coalesced text %q, want %q", text.String(), want.String())
	}

	g2 := runs.New(runs.Options{MaxEvents: 10})
	r2, _ := g2.Begin("", func() {})
	leave(r2)
	r2.Emit(started(1))
	for i := uint64(2); i <= 40; i++ {
		r2.Emit(tool(i))
	}
	r2.Emit(finish(41))
	r2.End(nil)
	_, _, err = g2.Attach("t1", 0)
	var oor *runs.OutOfRangeError
	if !errors.As(err, &oor) || !errors.Is(err, runs.ErrOutOfRange) || oor.Oldest <= 2 {
		t.Fatalf("attach 0 after drops: %v", err)
	}
	a2, after, err := g2.Attach("t1", oor.Oldest-1)
	if err != nil {
		t.Fatal(err)
	}
	evs, err = collect(t, func(ctx context.Context, send func(*plumbv1.Event) error) error { return a2.Follow(ctx, after, send) })
	if err != nil || evs[0].GetSequence() != oor.Oldest || evs[len(evs)-1].GetSequence() != 41 {
		t.Errorf("attach from the oldest: %v, %v", seqs(evs), err)
	}
}

// follower runs f in a goroutine and reports each event it sends on got;
// send blocks on gate (when not nil) once it has sent the event with
// sequence stallAt. done receives f's error.
type follower struct {
	got  chan *plumbv1.Event
	done chan error
}

func follow(f func(context.Context, func(*plumbv1.Event) error) error, stallAt uint64, gate <-chan struct{}) *follower {
	fl := &follower{got: make(chan *plumbv1.Event, 1000), done: make(chan error, 1)}
	go func() {
		fl.done <- f(context.Background(), func(e *plumbv1.Event) error {
			fl.got <- e
			if gate != nil && e.GetSequence() == stallAt {
				<-gate // a client that stopped reading
			}
			return nil
		})
	}()
	return fl
}

// next waits for the follower's next event.
func (fl *follower) next(t *testing.T) *plumbv1.Event {
	t.Helper()
	select {
	case e := <-fl.got:
		return e
	case <-t.Context().Done():
		return nil
	case err := <-fl.done:
		select {
		case e := <-fl.got: // sent before it ended
			fl.done <- err
			return e
		default:
			t.Fatalf("follower ended early: %v", err)
		}
	}
	return nil
}

// drain returns the events still queued and the follower's error.
func (fl *follower) drain() ([]uint64, error) {
	err := <-fl.done
	var out []uint64
	for {
		select {
		case e := <-fl.got:
			out = append(out, e.GetSequence())
		default:
			return out, err
		}
	}
}

// A stream that stops reading does not pin the log: the log stays within
// MaxEvents, the run and a second stream go on, and the stalled stream,
// once it reads again, ends with a LagError naming the last event it was
// sent; re-attaching from there is OUT_OF_RANGE, from the oldest retained
// event it works.
func TestStalledStreamIsCut(t *testing.T) {
	g := runs.New(runs.Options{MaxEvents: 10})
	r, _ := g.Begin("t1", func() {})
	gate := make(chan struct{})
	owner := follow(r.Stream, 2, gate)
	r.Emit(started(1))
	a, after, err := g.Attach("t1", 0)
	if err != nil {
		t.Fatal(err)
	}
	fast := follow(func(ctx context.Context, send func(*plumbv1.Event) error) error { return a.Follow(ctx, after, send) }, 0, nil)
	fast.next(t)
	r.Emit(tool(2))
	fast.next(t)
	owner.next(t)
	if e := owner.next(t); e.GetSequence() != 2 {
		t.Fatalf("owner got %d, want 2", e.GetSequence())
	}
	// The owner is now blocked in send with event 2.
	for i := uint64(3); i <= 100; i++ {
		r.Emit(tool(i))
		if e := fast.next(t); e.GetSequence() != i {
			t.Fatalf("fast follower got %d, want %d", e.GetSequence(), i)
		}
	}
	r.Emit(finish(101))
	r.End(nil)
	if e := fast.next(t); e.GetRunFinished() == nil {
		t.Fatalf("fast follower ended with %v", e)
	}
	if rest, err := fast.drain(); err != nil || len(rest) != 0 {
		t.Fatalf("fast follower: %v, %v", rest, err)
	}

	_, _, err = g.Attach("t1", 0)
	var oor *runs.OutOfRangeError
	if !errors.As(err, &oor) || oor.Oldest <= 91-10 {
		t.Fatalf("attach while a stream is stalled: %v (the log is pinned)", err)
	}
	close(gate)
	rest, err := owner.drain()
	var lag *runs.LagError
	if !errors.As(err, &lag) || !errors.Is(err, runs.ErrLagging) || len(rest) != 0 {
		t.Fatalf("stalled owner: more events %v, err %v; want a LagError", rest, err)
	}
	if lag.ThreadID != "t1" || lag.Last != 2 || lag.Oldest != oor.Oldest {
		t.Errorf("lag %+v, want last 2, oldest %d", lag, oor.Oldest)
	}
	if !strings.Contains(lag.Error(), "after_sequence "+strconv.FormatUint(lag.Oldest-1, 10)) {
		t.Errorf("lag message gives no way on: %s", lag)
	}

	if _, _, err := g.Attach("t1", lag.Last); !errors.As(err, &oor) || oor.Oldest != lag.Oldest {
		t.Errorf("re-attach from the last event sent: %v", err)
	}
	a, after, err = g.Attach("t1", lag.Oldest-1)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := collect(t, func(ctx context.Context, send func(*plumbv1.Event) error) error { return a.Follow(ctx, after, send) })
	if err != nil || evs[0].GetSequence() != lag.Oldest || evs[len(evs)-1].GetSequence() != 101 {
		t.Errorf("re-attach from the oldest: %v, %v", seqs(evs), err)
	}
}

// MaxBytes bounds the log's encoded size; the newest event is kept even
// when it alone is larger.
func TestMaxBytes(t *testing.T) {
	const limit = 4096
	big := func(seq uint64, n int) *plumbv1.Event {
		return ev(seq, &plumbv1.ToolCallStarted{Id: "c", ArgsJson: strings.Repeat("x", n)})
	}
	// retained runs a segment of events and returns what Attach can still
	// replay of it.
	retained := func(t *testing.T, evs ...*plumbv1.Event) []*plumbv1.Event {
		t.Helper()
		g := runs.New(runs.Options{MaxBytes: limit})
		r, _ := g.Begin("t1", func() {})
		leave(r)
		for _, e := range evs {
			r.Emit(e)
		}
		r.End(nil)
		_, _, err := g.Attach("t1", 0)
		var oor *runs.OutOfRangeError
		if !errors.As(err, &oor) {
			t.Fatalf("attach 0: %v, want OUT_OF_RANGE", err)
		}
		a, after, err := g.Attach("t1", oor.Oldest-1)
		if err != nil {
			t.Fatal(err)
		}
		out, err := collect(t, func(ctx context.Context, send func(*plumbv1.Event) error) error { return a.Follow(ctx, after, send) })
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	evs := []*plumbv1.Event{started(1)}
	for i := uint64(2); i <= 40; i++ {
		evs = append(evs, big(i, 1000))
	}
	got := retained(t, append(evs, finish(41))...)
	size := 0
	for _, e := range got[:len(got)-1] { // the terminal event is added after trimming
		size += proto.Size(e)
	}
	if size > limit || len(got) < 3 || got[len(got)-1].GetSequence() != 41 {
		t.Errorf("retained %d bytes in %v, want ≤ %d", size, seqs(got), limit)
	}

	got = retained(t, append(evs, big(41, 2*limit), finish(42))...)
	if !slices.Equal(seqs(got), []uint64{41, 42}) {
		t.Errorf("after an oversized event: %v, want only it and the terminal event", seqs(got))
	}
}

// Trimming coalesces the deltas a stream has not sent yet, but never
// merges a delta it was sent with one it was not: its text arrives exactly
// once.
func TestCoalesceRespectsStreams(t *testing.T) {
	g := runs.New(runs.Options{MaxEvents: 10})
	r, _ := g.Begin("t1", func() {})
	gate := make(chan struct{})
	owner := follow(r.Stream, 3, gate)
	r.Emit(started(1))
	r.Emit(delta(2, "a"))
	r.Emit(delta(3, "b"))
	for range 3 {
		owner.next(t)
	}
	want := "ab"
	for i := uint64(4); i <= 60; i++ {
		r.Emit(delta(i, string(rune('a'+i%26))))
		want += string(rune('a' + i%26))
	}
	r.Emit(finish(61))
	r.End(nil)
	close(gate)
	var text strings.Builder
	text.WriteString("ab")
	n := 3
	for {
		e := owner.next(t)
		n++
		text.WriteString(e.GetMessageDelta().GetText())
		if e.GetRunFinished() != nil {
			break
		}
	}
	if _, err := owner.drain(); err != nil {
		t.Fatal(err)
	}
	if text.String() != want {
		t.Errorf("text %q, want %q", text.String(), want)
	}
	if n > 10 {
		t.Errorf("the owner got %d events; deltas were not coalesced", n)
	}
}

// Cancel cancels the active run only; CancelAll and Wait serve Shutdown.
func TestCancelAndWait(t *testing.T) {
	g := runs.New(runs.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	r, _ := g.Begin("t1", cancel)
	r.Emit(started(1))
	if g.Cancel("t2") != nil {
		t.Error("cancelled an unknown thread")
	}
	if got := g.Cancel("t1"); got != r || ctx.Err() == nil || got.RunID() != "r1" {
		t.Errorf("cancel: %v, ctx %v", got, ctx.Err())
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer wcancel()
	if err := g.Wait(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait with a live run: %v", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	r2, _ := g.Begin("t2", cancel2)
	g.CancelAll()
	if ctx2.Err() == nil {
		t.Error("CancelAll left a run")
	}
	go func() {
		r.Emit(finish(2))
		r.End(nil)
		r2.End(context.Canceled)
	}()
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if g.Cancel("t1") != nil {
		t.Error("cancelled a finished run")
	}
}

// Over MaxEvents, argument deltas of one call and output of one running
// call are coalesced like text (the first id and name kept, the fragments
// appended in order); fragments of different calls, or after a truncated
// one, are not merged.
func TestTrimCoalescesToolStreams(t *testing.T) {
	g := runs.New(runs.Options{MaxEvents: 20})
	r, _ := g.Begin("", func() {})
	leave(r)
	r.Emit(started(1))
	seq := uint64(2)
	var args0, args1, out strings.Builder
	for i := range 15 {
		d := &plumbv1.ToolCallDelta{Index: int32(i % 2), Args: fmt.Sprint(i), Step: 1, Attempt: 1}
		if i < 2 {
			d.Id, d.Name = fmt.Sprintf("c%d", i), "write_file"
		}
		r.Emit(ev(seq, d))
		seq++
		if i%2 == 0 {
			args0.WriteString(d.Args)
		} else {
			args1.WriteString(d.Args)
		}
	}
	for i := range 15 {
		o := &plumbv1.ToolOutput{Id: "c0", Name: "execute", Text: fmt.Sprintf("line %d\n", i)}
		r.Emit(ev(seq, o))
		seq++
		out.WriteString(o.Text)
	}
	r.Emit(finish(seq))
	r.End(nil)
	a, after, err := g.Attach("t1", 0)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := collect(t, func(ctx context.Context, send func(*plumbv1.Event) error) error { return a.Follow(ctx, after, send) })
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32]*plumbv1.ToolCallDelta{}
	var gotOut strings.Builder
	for _, e := range evs {
		if d := e.GetToolCallDelta(); d != nil {
			if got[d.GetIndex()] == nil {
				got[d.GetIndex()] = &plumbv1.ToolCallDelta{}
			}
			g := got[d.GetIndex()]
			g.Id += d.GetId()
			g.Name += d.GetName()
			g.Args += d.GetArgs()
		}
		gotOut.WriteString(e.GetToolOutput().GetText())
	}
	if len(evs) >= 32 || evs[len(evs)-1].GetSequence() != seq {
		t.Fatalf("log %v: nothing was coalesced", seqs(evs))
	}
	if g := got[0]; g == nil || g.Id != "c0" || g.Name != "write_file" || g.Args != args0.String() {
		t.Errorf("call 0 replayed as %v, want args %q", g, args0.String())
	}
	if g := got[1]; g == nil || g.Id != "c1" || g.Name != "write_file" || g.Args != args1.String() {
		t.Errorf("call 1 replayed as %v, want args %q", g, args1.String())
	}
	if gotOut.String() != out.String() {
		t.Errorf("output replayed as %q, want %q", gotOut.String(), out.String())
	}
}

// TestAbortCutsEachStreamWhereItIs: a segment aborted without a terminal
// event (handed off, or its lease lost) ends every stream, once it has
// sent the log, with a *CutError naming the last sequence that stream
// delivered; a terminal event held back is dropped, and a later Begin on
// the thread is free.
func TestAbortCutsEachStreamWhereItIs(t *testing.T) {
	g := runs.New(runs.Options{})
	r, err := g.Begin("t1", func() {})
	if err != nil {
		t.Fatal(err)
	}
	r.Emit(started(1))
	r.Emit(delta(2, "a"))
	r.Emit(tool(3))
	r.Emit(finish(4)) // held back, then dropped by Abort
	cause := fmt.Errorf("renew: %w", agent.ErrLeaseLost)
	r.Abort(cause)

	owner, err := collect(t, r.Stream)
	var cut *runs.CutError
	if !errors.As(err, &cut) || cut.Last != 3 || cut.ThreadID != "t1" || !errors.Is(err, agent.ErrLeaseLost) {
		t.Fatalf("owner stream ended with %v, want a CutError after 3 wrapping the cause", err)
	}
	if !slices.Equal(seqs(owner), []uint64{1, 2, 3}) {
		t.Fatalf("owner stream sent %v, want 1 2 3 without the terminal event", seqs(owner))
	}
	r2, _, err := g.Attach("t1", 2)
	if err != nil {
		t.Fatal(err)
	}
	late, err := collect(t, func(ctx context.Context, send func(*plumbv1.Event) error) error { return r2.Follow(ctx, 2, send) })
	if !errors.As(err, &cut) || cut.Last != 3 || !slices.Equal(seqs(late), []uint64{3}) {
		t.Fatalf("attach after 2 sent %v and ended with %v, want 3 then a CutError after 3", seqs(late), err)
	}
	nothing, err := collect(t, func(ctx context.Context, send func(*plumbv1.Event) error) error { return r2.Follow(ctx, 3, send) })
	if !errors.As(err, &cut) || cut.Last != 3 || len(nothing) != 0 {
		t.Fatalf("attach after 3 sent %v and ended with %v, want a CutError after 3", seqs(nothing), err)
	}
	if _, err := g.Begin("t1", func() {}); err != nil {
		t.Fatalf("begin after the abort: %v", err)
	}
}

// TestReplicatedDrainRefusesWithReplicaStopping: a replicated registry
// that drains refuses new segments with ErrReplicaStopping, which is also
// ErrShuttingDown.
func TestReplicatedDrainRefusesWithReplicaStopping(t *testing.T) {
	g := runs.New(runs.Options{Replicated: true})
	g.Drain()
	_, err := g.Begin("t1", func() {})
	if !errors.Is(err, runs.ErrReplicaStopping) || !errors.Is(err, runs.ErrShuttingDown) {
		t.Fatalf("begin while draining: %v, want ErrReplicaStopping", err)
	}
}
