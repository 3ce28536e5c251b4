package boxagent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox/agentlog"
	"github.com/plumbhq/plumb/pkg/sandbox/agentproto"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// callTimeout bounds every call in these tests: a hang guard, generous for
// a loaded machine; a hang fails the test.
const callTimeout = 2 * time.Minute

// client is a minimal host side of the agent channel: it runs Serve over
// in-process pipes, writes request frames and routes the response frames,
// decoded strictly as the real host does, by request id.
type client struct {
	t *testing.T // the test that failures are reported to; see on
	*conn
}

// conn is the state shared by every client of one agent.
type conn struct {
	inW   *io.PipeWriter
	w     *agentproto.Writer
	serve chan error // Serve's result
	read  chan struct{}

	mu      sync.Mutex
	nextID  uint64
	routes  map[uint64]chan agentproto.Response
	badResp error // first malformed response frame
}

// startAgent runs Serve with cfg (Workspace and Root default to a fresh
// temp dir, Env to a small fixed environment) and stops it at cleanup.
func startAgent(t *testing.T, cfg Config) *client {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = t.TempDir()
	}
	if cfg.Workspace == "" {
		cfg.Workspace = cfg.Root
	}
	if cfg.Env == nil {
		cfg.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "PLUMB_BASE=base"}
	}
	if cfg.Logger == nil {
		cfg.Logger = agentlog.New(t.Output(), agentlog.LevelDebug)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &client{t: t, conn: &conn{
		inW:    inW,
		w:      agentproto.NewWriter(inW),
		serve:  make(chan error, 1),
		read:   make(chan struct{}),
		nextID: 1000,
		routes: map[uint64]chan agentproto.Response{},
	}}
	go func() {
		err := Serve(context.Background(), inR, outW, cfg)
		outW.Close()
		c.serve <- err
	}()
	go c.readLoop(outR)
	t.Cleanup(func() {
		err := c.stop()
		if err != nil {
			t.Errorf("Serve returned %v after EOF, want nil", err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.badResp != nil {
			t.Errorf("agent wrote a malformed response frame: %v", c.badResp)
		}
	})
	return c
}

// on returns a client that reports failures to t (a subtest).
func (c *client) on(t *testing.T) *client { return &client{t: t, conn: c.conn} }

// stop closes the agent's input and waits for Serve to return; calling it
// again returns the same result.
func (c *client) stop() error {
	c.inW.Close()
	select {
	case err := <-c.serve:
		c.serve <- err
		<-c.read
		return err
	case <-time.After(callTimeout):
		c.t.Fatal("Serve did not return after its input closed")
		return nil
	}
}

func (c *conn) readLoop(r io.Reader) {
	defer close(c.read)
	fr := agentproto.NewReader(r, agentproto.MaxFrameBytes)
	for {
		frame, err := fr.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.mu.Lock()
				c.badResp = err
				c.mu.Unlock()
			}
			return
		}
		resp, err := agentproto.DecodeResponse(frame)
		if err == nil && resp.Bin > 0 {
			if resp.Data, err = fr.ReadPayload(resp.Bin); err != nil {
				c.mu.Lock()
				c.badResp = err
				c.mu.Unlock()
				return
			}
		}
		c.mu.Lock()
		if err != nil && c.badResp == nil {
			c.badResp = err
		}
		ch := c.routes[resp.ID]
		c.mu.Unlock()
		if err == nil && ch != nil {
			ch <- resp
		}
	}
}

// expect registers id and returns the channel its responses arrive on.
func (c *conn) expect(id uint64) chan agentproto.Response {
	ch := make(chan agentproto.Response, 4096)
	c.mu.Lock()
	c.routes[id] = ch
	c.mu.Unlock()
	return ch
}

// raw writes one frame as given (a newline is appended).
func (c *client) raw(frame []byte) {
	c.t.Helper()
	if _, err := c.inW.Write(append(frame, '\n')); err != nil {
		c.t.Fatalf("write frame: %v", err)
	}
}

// withPayload sends args with data as the request's binary payload.
type withPayload struct {
	args any
	data []byte
}

// start sends a request and returns its id and response channel.
func (c *client) start(op agentproto.Op, args any) (uint64, chan agentproto.Response) {
	c.t.Helper()
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	c.mu.Unlock()
	ch := c.expect(id)
	req := agentproto.Request{ID: id, Op: op}
	if p, ok := args.(withPayload); ok {
		args, req.Payload = p.args, p.data
	}
	if args != nil {
		raw, err := json.Marshal(args)
		if err != nil {
			c.t.Fatal(err)
		}
		req.Args = raw
	}
	if err := c.w.Write(req); err != nil {
		c.t.Fatalf("write request: %v", err)
	}
	return id, ch
}

// wait collects the events and the final response of one request.
func (c *client) wait(ch chan agentproto.Response) ([]agentproto.Response, agentproto.Response) {
	c.t.Helper()
	var events []agentproto.Response
	deadline := time.After(callTimeout)
	for {
		select {
		case r := <-ch:
			if r.Done {
				return events, r
			}
			events = append(events, r)
		case <-deadline:
			c.t.Fatalf("no final response within %v", callTimeout)
		}
	}
}

// call sends a request and returns its events and final response.
func (c *client) call(op agentproto.Op, args any) ([]agentproto.Response, agentproto.Response) {
	c.t.Helper()
	_, ch := c.start(op, args)
	return c.wait(ch)
}

// ok calls op, requires success and decodes the result into out (if
// non-nil); it returns the events.
func (c *client) ok(op agentproto.Op, args, out any) []agentproto.Response {
	c.t.Helper()
	events, final := c.call(op, args)
	if final.Error != nil {
		c.t.Fatalf("%s: unexpected error %v", op, final.Error)
	}
	if out != nil {
		if err := json.Unmarshal(final.Result, out); err != nil {
			c.t.Fatalf("%s: decode result %s: %v", op, final.Result, err)
		}
	}
	return events
}

// fails calls op and requires an error with code want.
func (c *client) fails(op agentproto.Op, args any, want backend.Code) *backend.Error {
	c.t.Helper()
	_, final := c.call(op, args)
	if final.Error == nil {
		c.t.Fatalf("%s: got result %s, want error %s", op, final.Result, want)
	}
	if final.Error.Code != want {
		c.t.Fatalf("%s: got error %v, want code %s", op, final.Error, want)
	}
	return final.Error
}

// execute runs req and returns its result or error.
func (c *client) execute(req backend.ExecuteRequest) (backend.ExecuteResult, *backend.Error) {
	c.t.Helper()
	_, final := c.call(agentproto.OpExecute, agentproto.ExecuteArgs{ExecuteRequest: req})
	if final.Error != nil {
		return backend.ExecuteResult{}, final.Error
	}
	var res backend.ExecuteResult
	if err := json.Unmarshal(final.Result, &res); err != nil {
		c.t.Fatalf("decode execute result: %v", err)
	}
	return res, nil
}

func intp(n int) *int { return &n }

// processGone polls until pid no longer runs (absent or a zombie waiting
// for its reaper) and reports whether that happened within d.
func processGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		if state := procState(b); state == 'Z' || state == 'X' {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// procState extracts the state letter of /proc/<pid>/stat ("pid (comm) S ...").
func procState(stat []byte) byte {
	for i := len(stat) - 1; i >= 0; i-- {
		if stat[i] == ')' && i+2 < len(stat) {
			return stat[i+2]
		}
	}
	return 0
}
