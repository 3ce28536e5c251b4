package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
	"go.uber.org/zap/zaptest"
)

// fakeAgent is the far end of a channel: the test reads requests and
// writes whatever frames it wants, including hostile ones. (The real agent
// is exercised against real containers in manager_test.go; this seam lets
// the tests send frames no correct agent would.)
type fakeAgent struct {
	reqs *bufio.Scanner
	out  io.WriteCloser
}

func newPair(t *testing.T) (*channel, *fakeAgent) {
	t.Helper()
	return newPairWith(t, channelOptions{})
}

func newPairWith(t *testing.T, opts channelOptions) (*channel, *fakeAgent) {
	t.Helper()
	reqR, reqW := io.Pipe()
	respR, respW := io.Pipe()
	ch := newChannel(stream{r: respR, w: reqW, c: closerFunc(func() error {
		reqW.Close()
		respR.Close()
		return nil
	})}, zaptest.NewLogger(t), opts)
	t.Cleanup(ch.close)
	sc := bufio.NewScanner(reqR)
	sc.Buffer(make([]byte, 1<<20), agentproto.MaxFrameBytes)
	return ch, &fakeAgent{reqs: sc, out: respW}
}

func (a *fakeAgent) next(t *testing.T) agentproto.Request {
	t.Helper()
	if !a.reqs.Scan() {
		t.Fatalf("no request: %v", a.reqs.Err())
	}
	req, err := agentproto.DecodeRequest(a.reqs.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// binFrame is a response frame of id with an event of kind carrying payload
// as its binary payload (no trailing newline: the payload ends the frame).
func binFrame(id uint64, kind, payload string) string {
	return `{"id":` + itoa(int(id)) + `,"event":"` + kind + `","bin":` + itoa(len(payload)) + "}\n" + payload
}

// sendBin writes an event frame with a binary payload.
func (a *fakeAgent) sendBin(t *testing.T, id uint64, kind, payload string) {
	t.Helper()
	if _, err := io.WriteString(a.out, binFrame(id, kind, payload)); err != nil {
		t.Fatal(err)
	}
}

func (a *fakeAgent) send(t *testing.T, raw string) {
	t.Helper()
	if _, err := io.WriteString(a.out, raw+"\n"); err != nil {
		t.Fatal(err)
	}
}

type callResult struct {
	raw agentproto.RawMessage
	err error
}

func goCall(ch *channel, op agentproto.Op, onEvent func(agentproto.Response) error) chan callResult {
	done := make(chan callResult, 1)
	go func() {
		raw, err := ch.call(context.Background(), op, agentproto.PathArgs{Path: "/"}, onEvent)
		done <- callResult{raw, err}
	}()
	return done
}

func wait(t *testing.T, c chan callResult) callResult {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(2 * time.Minute): // a hang guard only
		t.Fatal("call did not return")
	}
	return callResult{}
}

func TestChannelMultiplexesOutOfOrder(t *testing.T) {
	ch, a := newPair(t)
	var events []string
	first := goCall(ch, agentproto.OpLs, nil)
	r1 := a.next(t)
	second := goCall(ch, agentproto.OpExecute, func(ev agentproto.Response) error {
		events = append(events, string(ev.Data))
		return nil
	})
	r2 := a.next(t)
	// Answer the second request first, with two stream events.
	a.sendBin(t, r2.ID, "output", "a")
	a.sendBin(t, r2.ID, "output", "b")
	a.send(t, `{"id":`+itoa(int(r2.ID))+`,"done":true,"result":{"size":2}}`)
	if r := wait(t, second); r.err != nil || string(r.raw) != `{"size":2}` || strings.Join(events, "") != "ab" {
		t.Fatalf("second = %s, %v, events %v", r.raw, r.err, events)
	}
	a.send(t, `{"id":`+itoa(int(r1.ID))+`,"done":true,"error":{"code":"file_not_found","message":"nope"}}`)
	if r := wait(t, first); backend.CodeOf(r.err) != backend.CodeFileNotFound {
		t.Fatalf("first = %v", r.err)
	}
}

func TestChannelResetsOnHostileFrames(t *testing.T) {
	tests := []struct {
		name  string
		frame string
	}{
		{"not json", `garbage`},
		{"unknown field", `{"id":1,"done":true,"evil":1}`},
		{"done and event", `{"id":1,"done":true,"event":"chunk"}`},
		{"oversized", strings.Repeat("x", agentproto.MaxFrameBytes+10)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch, a := newPair(t)
			pending := goCall(ch, agentproto.OpLs, nil)
			a.next(t)
			go func() { _, _ = io.WriteString(a.out, tt.frame+"\n") }()
			r := wait(t, pending)
			if backend.CodeOf(r.err) != backend.CodeUnavailable {
				t.Fatalf("in-flight op: %v, want unavailable", r.err)
			}
			if !ch.broken() {
				t.Fatal("channel not reset")
			}
			if _, err := ch.call(context.Background(), agentproto.OpLs, nil, nil); backend.CodeOf(err) != backend.CodeUnavailable {
				t.Fatalf("call on a reset channel: %v", err)
			}
		})
	}
}

func TestChannelCancelAndStreamEnd(t *testing.T) {
	ch, a := newPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := ch.call(ctx, agentproto.OpExecute, agentproto.ExecuteArgs{}, nil)
		done <- err
	}()
	req := a.next(t)
	cancel()
	if err := <-done; backend.CodeOf(err) != backend.CodeCancelled {
		t.Fatalf("cancelled call: %v", err)
	}
	c := a.next(t)
	var args agentproto.CancelArgs
	if c.Op != agentproto.OpCancel || json.Unmarshal(c.Args, &args) != nil || args.Target != req.ID {
		t.Fatalf("agent got %+v, want cancel of %d", c, req.ID)
	}
	// A late answer to the cancelled request is ignored.
	a.send(t, `{"id":`+itoa(int(req.ID))+`,"done":true,"result":{}}`)

	pending := goCall(ch, agentproto.OpLs, nil)
	a.next(t)
	a.out.Close() // the agent died
	if r := wait(t, pending); backend.CodeOf(r.err) != backend.CodeUnavailable || !strings.Contains(r.err.Error(), "retry") {
		t.Fatalf("call when the stream ends: %v", r.err)
	}
}

// TestChannelSlowConsumerStallsOnlyItself: a caller that stops taking its
// stream events never blocks the read loop. Other requests keep being
// answered, and once the stalled caller is more than maxLag bytes behind,
// its request alone is cancelled at the agent and fails with
// slow_consumer.
func TestChannelSlowConsumerStallsOnlyItself(t *testing.T) {
	ch, a := newPair(t)
	ch.maxLag = 8 << 10
	release := make(chan struct{})
	var got int
	stalled := goCall(ch, agentproto.OpExecute, func(ev agentproto.Response) error {
		got += len(ev.Data)
		<-release // the consumer stops reading
		return nil
	})
	req := a.next(t)
	chunk := binFrame(req.ID, "output", strings.Repeat("A", 768))
	// Far more than the bound, and far more than any fixed event buffer.
	go func() {
		for range 200 {
			if _, err := io.WriteString(a.out, chunk); err != nil {
				return
			}
		}
	}()
	c := a.next(t)
	var args agentproto.CancelArgs
	if c.Op != agentproto.OpCancel || json.Unmarshal(c.Args, &args) != nil || args.Target != req.ID {
		t.Fatalf("agent got %+v, want cancel of %d", c, req.ID)
	}
	// The channel still serves other requests while the consumer is stuck.
	other := goCall(ch, agentproto.OpLs, nil)
	r := a.next(t)
	a.send(t, `{"id":`+itoa(int(r.ID))+`,"done":true,"result":{"entries":[]}}`)
	if res := wait(t, other); res.err != nil {
		t.Fatalf("other request while one consumer stalls: %v", res.err)
	}
	close(release)
	res := wait(t, stalled)
	if CodeOf(res.err) != CodeSlowConsumer || !strings.Contains(res.err.Error(), "not read fast enough") {
		t.Fatalf("stalled request: %v, want %s", res.err, CodeSlowConsumer)
	}
	if got == 0 {
		t.Fatal("the stalled consumer got no event before it stopped")
	}
	if ch.broken() {
		t.Fatal("the channel was reset for one slow consumer")
	}
}
