package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
	"go.uber.org/zap/zaptest"
)

// violations records the violations a channel reports.
type violations struct {
	mu   sync.Mutex
	errs []error
}

func (v *violations) add(err error) {
	v.mu.Lock()
	v.errs = append(v.errs, err)
	v.mu.Unlock()
}

func (v *violations) list() []error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]error(nil), v.errs...)
}

func frame(id uint64, rest string) string { return `{"id":` + itoa(int(id)) + `,` + rest + `}` }

// goExec starts an execute (streaming or not) on ch.
func goExec(ch *channel, ctx context.Context, stream bool) chan callResult {
	done := make(chan callResult, 1)
	go func() {
		raw, err := ch.call(ctx, agentproto.OpExecute, agentproto.ExecuteArgs{ExecuteRequest: backend.ExecuteRequest{Command: "true"}, Stream: stream}, nil)
		done <- callResult{raw, err}
	}()
	return done
}

// TestChannelHostileAgent plays a hostile agent against each rule: the
// request in flight fails unavailable, the channel is reset, and the
// violation named by want is reported.
func TestChannelHostileAgent(t *testing.T) {
	big := strings.Repeat("A", 200<<10)
	tests := []struct {
		name string
		opts channelOptions
		op   agentproto.Op // the request in flight (ls when empty)
		// play sends frames given the in-flight request's id.
		play func(t *testing.T, ch *channel, a *fakeAgent, id uint64)
		want string
	}{
		{name: "never issued id", play: func(t *testing.T, _ *channel, a *fakeAgent, id uint64) {
			a.send(t, frame(id+100, `"done":true,"result":{}`))
		}, want: "never sent"},
		{name: "finished id", play: func(t *testing.T, ch *channel, a *fakeAgent, id uint64) {
			second := goCall(ch, agentproto.OpLs, nil)
			r2 := a.next(t)
			a.send(t, frame(r2.ID, `"done":true,"result":{"entries":[]}`))
			if r := wait(t, second); r.err != nil {
				t.Fatal(r.err)
			}
			a.send(t, frame(r2.ID, `"done":true,"result":{"entries":[]}`))
		}, want: "already finished"},
		{name: "event for an op without events", play: func(t *testing.T, _ *channel, a *fakeAgent, id uint64) {
			a.sendBin(t, id, "output", "a")
		}, want: `event "output"`},
		{name: "unknown event kind", op: agentproto.Op("proc_start"), play: func(t *testing.T, _ *channel, a *fakeAgent, id uint64) {
			a.sendBin(t, id, "output", "a")
		}, want: "receives started, stdout, stderr"},
		{name: "final over budget, refused before it is buffered", play: func(t *testing.T, _ *channel, a *fakeAgent, id uint64) {
			go func() {
				_, _ = io.WriteString(a.out, frame(id, `"done":true,"result":{"x":"`+strings.Repeat("A", agentproto.MaxFrameBytes-100)+`"}`)+"\n")
			}()
		}, op: agentproto.OpWrite, want: "no request in flight accepts"},
		{name: "final over its op budget", op: agentproto.OpHello, play: func(t *testing.T, ch *channel, a *fakeAgent, id uint64) {
			// A larger request is in flight too, so the frame is read whole.
			_ = goCall(ch, agentproto.OpLs, nil)
			a.next(t)
			a.send(t, frame(id, `"done":true,"result":{"x":"`+big+`"}`))
		}, want: "exceeds its 65536-byte budget"},
		{name: "frame over the worker budget", opts: channelOptions{budget: newMemBudget(100 << 10)}, play: func(t *testing.T, _ *channel, a *fakeAgent, id uint64) {
			go func() { _, _ = io.WriteString(a.out, frame(id, `"done":true,"result":{"x":"`+big+`"}`)+"\n") }()
		}, want: "memory budget"},
		{name: "frame rate", opts: channelOptions{rate: 1, burst: 5}, op: agentproto.Op("proc_start"), play: func(t *testing.T, _ *channel, a *fakeAgent, id uint64) {
			go func() {
				for range 50 {
					if _, err := io.WriteString(a.out, binFrame(id, "stdout", "a")); err != nil {
						return
					}
				}
			}()
		}, want: "frames a second"},
		{name: "malformed frame", play: func(t *testing.T, _ *channel, a *fakeAgent, id uint64) {
			a.send(t, `{"id":1,"done":true,"evil":1}`)
		}, want: "malformed"},
		{name: "oversized frame", op: agentproto.OpRead, play: func(t *testing.T, ch *channel, a *fakeAgent, id uint64) {
			_ = goCall(ch, agentproto.OpLs, nil) // accepts the largest frame
			a.next(t)
			go func() { _, _ = io.WriteString(a.out, strings.Repeat("x", agentproto.MaxFrameBytes+100<<10)) }()
		}, want: "exceeds the"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v violations
			tt.opts.onViolation = v.add
			ch, a := newPairWith(t, tt.opts)
			op := tt.op
			if op == "" {
				op = agentproto.OpLs
			}
			pending := goCall(ch, op, nil)
			req := a.next(t)
			tt.play(t, ch, a, req.ID)
			go func() { _, _ = io.Copy(io.Discard, readerOf(a)) }() // later requests are not read
			r := wait(t, pending)
			if backend.CodeOf(r.err) != backend.CodeUnavailable {
				t.Fatalf("in-flight op: %v, want unavailable", r.err)
			}
			<-ch.done
			got := v.list()
			if len(got) != 1 || !strings.Contains(got[0].Error(), tt.want) {
				t.Fatalf("violations %v, want one naming %q", got, tt.want)
			}
			if tt.opts.budget != nil && tt.opts.budget.inUse() != 0 {
				t.Fatalf("%d budget bytes still held after the reset", tt.opts.budget.inUse())
			}
		})
	}
}

// TestChannelProcessWindow: a process's agent that sends output beyond its
// window while the reader holds it breaks the protocol.
func TestChannelProcessWindow(t *testing.T) {
	var v violations
	ch, a := newPairWith(t, channelOptions{onViolation: v.add})
	hold := make(chan struct{})
	pending := goCall(ch, agentproto.OpProcStart, func(agentproto.Response) error { <-hold; return nil })
	req := a.next(t)
	go func() { _, _ = io.Copy(io.Discard, readerOf(a)) }()
	chunk := strings.Repeat("x", agentproto.ProcChunkBytes)
	go func() {
		for range agentproto.ProcWindow/agentproto.ProcChunkBytes + 2 {
			if _, err := io.WriteString(a.out, binFrame(req.ID, agentproto.EventStdout, chunk)); err != nil {
				return
			}
		}
	}()
	<-ch.done
	if got := v.list(); len(got) != 1 || !strings.Contains(got[0].Error(), "output window") {
		t.Fatalf("violations %v, want one naming the output window", got)
	}
	close(hold)
	if r := wait(t, pending); backend.CodeOf(r.err) != backend.CodeUnavailable {
		t.Fatalf("the process request: %v, want unavailable", r.err)
	}
}

// readerOf drains what is left of the request stream.
func readerOf(a *fakeAgent) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		for a.reqs.Scan() {
		}
		pw.Close()
	}()
	return pr
}

// TestChannelCancelledFramesDropped: frames for a cancelled request are
// dropped until its final arrives; after that its id is finished, and a
// frame for it is a violation.
func TestChannelCancelledFramesDropped(t *testing.T) {
	var v violations
	ch, a := newPairWith(t, channelOptions{onViolation: v.add})
	ctx, cancel := context.WithCancel(context.Background())
	pending := goExec(ch, ctx, true)
	req := a.next(t)
	cancel()
	if r := wait(t, pending); backend.CodeOf(r.err) != backend.CodeCancelled {
		t.Fatalf("cancelled call: %v", r.err)
	}
	c := a.next(t)
	a.sendBin(t, req.ID, "output", "a")
	a.send(t, frame(c.ID, `"done":true,"result":{}`))
	a.send(t, frame(req.ID, `"done":true,"result":{"output":"a","timed_out":false,"truncated":false,"output_bytes":1,"capture_truncated":false,"duration_ms":1}`))
	// The channel still serves.
	other := goCall(ch, agentproto.OpLs, nil)
	r := a.next(t)
	a.send(t, frame(r.ID, `"done":true,"result":{"entries":[]}`))
	if res := wait(t, other); res.err != nil {
		t.Fatalf("after cancelled frames: %v (violations %v)", res.err, v.list())
	}
	if got := v.list(); len(got) != 0 {
		t.Fatalf("violations for a cancelled request's frames: %v", got)
	}
	// Its final came: another frame for it is a violation.
	a.sendBin(t, req.ID, "output", "a")
	<-ch.done
	if got := v.list(); len(got) != 1 || !strings.Contains(got[0].Error(), "already finished") {
		t.Fatalf("violations %v, want already finished", got)
	}
}

// TestChannelQueuedEventsShareTheBudget: events a caller has not taken
// count against the worker budget; past it the channel resets and the
// budget comes back.
func TestChannelQueuedEventsShareTheBudget(t *testing.T) {
	var v violations
	budget := newMemBudget(64 << 10)
	ch, a := newPairWith(t, channelOptions{budget: budget, onViolation: v.add})
	release := make(chan struct{})
	done := make(chan callResult, 1)
	go func() {
		raw, err := ch.call(context.Background(), agentproto.Op("proc_start"), agentproto.PathArgs{Path: "/f"}, func(agentproto.Response) error {
			<-release
			return nil
		})
		done <- callResult{raw, err}
	}()
	req := a.next(t)
	go func() { _, _ = io.Copy(io.Discard, readerOf(a)) }()
	ev := binFrame(req.ID, "stdout", strings.Repeat("A", 6144)) // 6 KiB each
	go func() {
		for range 20 {
			if _, err := io.WriteString(a.out, ev); err != nil {
				return
			}
		}
	}()
	<-ch.done
	close(release)
	if r := wait(t, done); backend.CodeOf(r.err) != backend.CodeUnavailable {
		t.Fatalf("download: %v", r.err)
	}
	if got := v.list(); len(got) != 1 || !strings.Contains(got[0].Error(), "memory budget") {
		t.Fatalf("violations %v", got)
	}
	if n := budget.inUse(); n != 0 {
		t.Fatalf("%d budget bytes held after the call returned", n)
	}
}

// TestChannelOneBudgetManyChannels: a channel that exhausts the shared
// budget is reset alone; its neighbour keeps serving.
func TestChannelOneBudgetManyChannels(t *testing.T) {
	budget := newMemBudget(256 << 10)
	var hv, nv violations
	hostile, ha := newPairWith(t, channelOptions{budget: budget, onViolation: hv.add})
	neighbour, na := newPairWith(t, channelOptions{budget: budget, onViolation: nv.add})
	hp := goCall(hostile, agentproto.OpLs, nil)
	hr := ha.next(t)
	go func() {
		_, _ = io.WriteString(ha.out, frame(hr.ID, `"done":true,"result":{"x":"`+strings.Repeat("A", 1<<20)+`"}`)+"\n")
	}()
	if r := wait(t, hp); backend.CodeOf(r.err) != backend.CodeUnavailable {
		t.Fatalf("hostile: %v", r.err)
	}
	np := goCall(neighbour, agentproto.OpLs, nil)
	nr := na.next(t)
	na.send(t, frame(nr.ID, `"done":true,"result":{"entries":[]}`))
	if r := wait(t, np); r.err != nil {
		t.Fatalf("neighbour: %v", r.err)
	}
	if len(hv.list()) != 1 || len(nv.list()) != 0 {
		t.Fatalf("violations: hostile %v, neighbour %v", hv.list(), nv.list())
	}
}

// TestChannelWriteDeadline: an agent that stops reading its stdin makes a
// large write time out; the caller gets unavailable, the channel resets
// and the box is charged a violation.
func TestChannelWriteDeadline(t *testing.T) {
	var v violations
	reqR, reqW := net.Pipe() // unbuffered, with deadlines: nobody reads reqR
	respR, respW := io.Pipe()
	ch := newChannel(stream{r: respR, w: reqW, c: closerFunc(func() error {
		reqW.Close()
		respR.Close()
		return nil
	})}, zaptest.NewLogger(t), channelOptions{onViolation: v.add, writeTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { ch.close(); reqR.Close(); respW.Close() })
	_, err := ch.exchange(context.Background(), agentproto.OpWrite, agentproto.WriteArgs{Path: "/f"}, make([]byte, 1<<20), nil)
	if backend.CodeOf(err) != backend.CodeUnavailable {
		t.Fatalf("write to a stuck agent: %v, want unavailable", err)
	}
	if got := v.list(); len(got) != 1 || !strings.Contains(got[0].Error(), "write deadline") {
		t.Fatalf("violations %v", got)
	}
}

// TestChannelOverdue: sandboxd stops waiting for an execute past its
// wait, cancels it at the agent and counts a violation; the channel keeps
// serving.
func TestChannelOverdue(t *testing.T) {
	var v violations
	ch, a := newPairWith(t, channelOptions{onViolation: v.add, maxWait: 100 * time.Millisecond})
	pending := goExec(ch, context.Background(), true)
	req := a.next(t)
	a.sendBin(t, req.ID, "output", "a")
	r := wait(t, pending)
	var od *overdueError
	if !errors.As(r.err, &od) {
		t.Fatalf("overdue execute: %v", r.err)
	}
	c := a.next(t)
	var args agentproto.CancelArgs
	if c.Op != agentproto.OpCancel || json.Unmarshal(c.Args, &args) != nil || args.Target != req.ID {
		t.Fatalf("agent got %+v, want cancel of %d", c, req.ID)
	}
	if got := v.list(); len(got) != 1 || !strings.Contains(got[0].Error(), "did not finish execute") {
		t.Fatalf("violations %v", got)
	}
	res, err := overdueExecute(backend.ExecuteRequest{}, backend.ExecuteResult{}, []byte("partial"), r.err)
	if err != nil || !res.TimedOut || res.ExitCode == nil || *res.ExitCode != 124 || !strings.HasPrefix(res.Output, "partial[sandboxd:") {
		t.Fatalf("overdue result %+v, %v", res, err)
	}
	if ch.broken() {
		t.Fatal("an overdue request reset the channel")
	}
}

// TestChannelOverdueOneTimer: one timer watches every request in flight.
// A request sent while it is armed for an earlier one is found overdue
// after that one, and a request answered in time never is.
func TestChannelOverdueOneTimer(t *testing.T) {
	var v violations
	ch, a := newPairWith(t, channelOptions{onViolation: v.add, maxWait: 200 * time.Millisecond})
	// The agent's requests, read as they come: a cancel may be written at
	// any point once a request is overdue.
	reqs := make(chan agentproto.Request, 16)
	go func() {
		defer close(reqs)
		for a.reqs.Scan() {
			if req, err := agentproto.DecodeRequest(a.reqs.Bytes()); err == nil {
				reqs <- req
			}
		}
	}()
	var cancelled []uint64
	// take reads the agent's next request; a cancel is noted in cancelled.
	take := func() agentproto.Request {
		t.Helper()
		req, ok := <-reqs
		if !ok {
			t.Fatal("the channel's stream ended")
		}
		if req.Op == agentproto.OpCancel {
			var args agentproto.CancelArgs
			if err := json.Unmarshal(req.Args, &args); err != nil {
				t.Fatal(err)
			}
			cancelled = append(cancelled, args.Target)
		}
		return req
	}
	next := func(op agentproto.Op) agentproto.Request {
		t.Helper()
		for {
			switch req := take(); req.Op {
			case op:
				return req
			case agentproto.OpCancel:
			default:
				t.Fatalf("agent got %+v, want %s", req, op)
			}
		}
	}

	first := goExec(ch, context.Background(), false)
	firstID := next(agentproto.OpExecute).ID
	answered := goCall(ch, agentproto.OpLs, nil)
	a.send(t, fmt.Sprintf(`{"id":%d,"done":true,"result":{"entries":[]}}`, next(agentproto.OpLs).ID))
	if r := wait(t, answered); r.err != nil {
		t.Fatalf("answered ls: %v", r.err)
	}
	second := goExec(ch, context.Background(), false)
	secondID := next(agentproto.OpExecute).ID
	for _, p := range []chan callResult{first, second} {
		var od *overdueError
		if r := wait(t, p); !errors.As(r.err, &od) {
			t.Fatalf("unanswered execute: %v, want overdue", r.err)
		}
	}
	for len(cancelled) < 2 {
		if req := take(); req.Op != agentproto.OpCancel {
			t.Fatalf("agent got %+v, want a cancel", req)
		}
	}
	if !slices.Contains(cancelled, firstID) || !slices.Contains(cancelled, secondID) || len(cancelled) != 2 {
		t.Fatalf("cancelled %v, want %d and %d", cancelled, firstID, secondID)
	}
	if got := v.list(); len(got) != 2 {
		t.Fatalf("violations %v, want the two overdue executes", got)
	}
	if ch.broken() {
		t.Fatal("an overdue request reset the channel")
	}
}

func TestRecheckResults(t *testing.T) {
	code := func(n int) *int { return &n }
	exec := agentproto.ExecuteArgs{ExecuteRequest: backend.ExecuteRequest{MaxOutputBytes: 10}}
	tests := []struct {
		name string
		op   agentproto.Op
		args any
		out  any
		want string // "" when fine
	}{
		{"ls within cap", agentproto.OpLs, nil, &backend.LsResult{Entries: make([]backend.FileInfo, 3)}, ""},
		{"ls over cap", agentproto.OpLs, nil, &backend.LsResult{Entries: make([]backend.FileInfo, backend.LsMaxEntries+1)}, "entry cap"},
		{"glob over cap", agentproto.OpGlob, nil, &backend.GlobResult{Matches: make([]backend.FileInfo, backend.GlobMaxMatches+1)}, "match cap"},
		{"grep over cap", agentproto.OpGrep, nil, &backend.GrepResult{Matches: make([]backend.GrepMatch, backend.GrepMaxMax+1)}, "match cap"},
		{"grep text too long", agentproto.OpGrep, nil, &backend.GrepResult{Matches: []backend.GrepMatch{{Text: strings.Repeat("x", backend.GrepTextMaxChars+2)}}}, "characters"},
		{"read too large", agentproto.OpRead, nil, &backend.ReadResult{Content: strings.Repeat("x", 8<<20)}, "content bytes"},
		{"execute fine", agentproto.OpExecute, exec, &backend.ExecuteResult{Output: "0123456789", OutputBytes: 10}, ""},
		{"execute truncated fine", agentproto.OpExecute, exec, &backend.ExecuteResult{Output: "01[... 5 bytes of output omitted ...]\n89", OutputBytes: 100, Truncated: true}, ""},
		{"execute output over max", agentproto.OpExecute, exec, &backend.ExecuteResult{Output: strings.Repeat("x", 200), OutputBytes: 200, Truncated: true}, "exceed max_output_bytes"},
		{"execute untruncated but larger", agentproto.OpExecute, exec, &backend.ExecuteResult{Output: "x", OutputBytes: 50}, "without truncation"},
		{"execute negative size", agentproto.OpExecute, exec, &backend.ExecuteResult{OutputBytes: -1}, "negative"},
		{"execute timed out without 124", agentproto.OpExecute, exec, &backend.ExecuteResult{TimedOut: true, ExitCode: code(0)}, "124"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := recheck(tt.op, tt.args, tt.out)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !isViolation(err)) {
				t.Fatalf("recheck = %v, want %q", err, tt.want)
			}
		})
	}
}

// FuzzChannel feeds arbitrary bytes as the agent's stdout to a channel
// with requests in flight: it must never panic or hang, every call must
// return, and the shared budget must come back to zero.
func FuzzChannel(f *testing.F) {
	f.Add([]byte(`{"id":1,"done":true,"result":{}}` + "\n"))
	f.Add([]byte(`{"id":2,"event":"output","bin":1}` + "\na" + `{"id":2,"done":true,"result":{"output":"a"}}` + "\n"))
	f.Add([]byte(`{"id":3,"event":"stdout","bin":2}` + "\nab" + `{"id":9,"done":true}` + "\n"))
	f.Add([]byte(`{"id":3,"event":"started"}` + "\n" + `{"id":3,"event":"stderr","bin":1}` + "\nx" + `{"id":3,"done":true,"result":{"exit_code":0}}` + "\n"))
	f.Add([]byte(`{"id":2,"event":"output","bin":99999999}` + "\na"))
	f.Add([]byte(`{"id":1,"done":true,"error":{"code":"file_not_found","message":"x"}}` + "\n" + `{"id":1,"done":true}` + "\n"))
	f.Add([]byte("\n\n{}\r\n" + strings.Repeat("x", 70<<10)))
	f.Fuzz(func(t *testing.T, data []byte) {
		budget := newMemBudget(1 << 20)
		reqR, reqW := io.Pipe()
		respR, respW := io.Pipe()
		ch := newChannel(stream{r: respR, w: reqW, c: closerFunc(func() error {
			reqW.Close()
			respR.Close()
			return nil
		})}, zaptest.NewLogger(t), channelOptions{budget: budget, onViolation: func(error) {}, rate: 1000, burst: 1000})
		go func() { _, _ = io.Copy(io.Discard, reqR) }()
		calls := []chan callResult{
			goCall(ch, agentproto.OpLs, nil),
			goExec(ch, context.Background(), true),
			goCall(ch, agentproto.OpProcStart, func(agentproto.Response) error { return nil }),
		}
		// Let the requests go out before the agent speaks.
		for {
			ch.mu.Lock()
			n := ch.nextID
			ch.mu.Unlock()
			if n == 3 || ch.broken() {
				break
			}
			time.Sleep(time.Millisecond)
		}
		_, _ = respW.Write(data)
		respW.Close()
		for _, c := range calls {
			select {
			case <-c:
			case <-time.After(time.Minute):
				t.Fatal("a call did not return")
			}
		}
		ch.close()
		reqR.Close()
		if n := budget.inUse(); n != 0 {
			t.Fatalf("%d budget bytes held after every call returned", n)
		}
	})
}
