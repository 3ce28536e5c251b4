package egress

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// controller is the test's end of a proxy's control channel.
type controller struct {
	t      *testing.T
	in     *io.PipeWriter
	frames chan Frame
}

func control(t *testing.T, p *Proxy) *controller {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &controller{t: t, in: inW, frames: make(chan Frame, 64)}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = p.Control(context.Background(), inR, outW)
		outW.Close()
	}()
	go func() {
		defer wg.Done()
		defer close(c.frames)
		dec := json.NewDecoder(outR)
		for {
			var f Frame
			if err := dec.Decode(&f); err != nil {
				return
			}
			c.frames <- f
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		wg.Wait()
	})
	return c
}

func (c *controller) send(f Frame) {
	c.t.Helper()
	b, _ := json.Marshal(f)
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		c.t.Fatal(err)
	}
}

// next returns the next frame of type typ (skipping others).
func (c *controller) next(typ string) Frame {
	c.t.Helper()
	deadline := time.After(time.Minute) // hang guard
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("control channel ended waiting for %s", typ)
			}
			if f.Type == typ {
				return f
			}
		case <-deadline:
			c.t.Fatalf("no %s frame", typ)
		}
	}
}

type result struct {
	code int
	body string
}

// TestAsk: a destination refused only for not being on the allow-list is
// held and asked about; granting once lets the waiting request through
// (and the next one asks again), remembering admits later requests
// without asking, rejection and timeout end in 403, a grant never admits
// an inside address, sync re-sends pending asks, and the pending asks and
// their rate are bounded.
func TestAsk(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream %s", r.URL.Path)
	}))
	defer upstream.Close()
	up := netip.MustParseAddrPort(upstream.Listener.Addr().String())
	res := mapResolver{
		"allowed.test": {up.Addr()},
		"asked.test":   {up.Addr()},
		"other.test":   {up.Addr()},
		"inside.test":  {netip.MustParseAddr("10.0.0.1")},
	}
	newProxy := func(t *testing.T, ask AskConfig) (*controller, func(target string) <-chan result, string) {
		p, purl := startProxy(t, Config{Sandbox: "sbx-ask", Policy: Policy{Allow: []Rule{{Host: "allowed.test"}}, allowLoopback: true},
			Resolver: res, Ask: ask}, zaptest.NewLogger(t))
		client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(purl)}}
		t.Cleanup(client.CloseIdleConnections)
		get := func(target string) <-chan result {
			ch := make(chan result, 1)
			go func() {
				resp, err := client.Get(target)
				if err != nil {
					ch <- result{body: err.Error()}
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				ch <- result{resp.StatusCode, string(b)}
			}()
			return ch
		}
		return control(t, p), get, purl.Host
	}
	port := up.Port()
	url := func(host string) string { return fmt.Sprintf("http://%s:%d/p", host, port) }
	want := func(t *testing.T, ch <-chan result, code int, body string) {
		t.Helper()
		r := <-ch
		if r.code != code || !strings.Contains(r.body, body) {
			t.Fatalf("got %d %q, want %d with %q", r.code, r.body, code, body)
		}
	}

	t.Run("once, reject, remember", func(t *testing.T) {
		c, get, _ := newProxy(t, AskConfig{Timeout: time.Hour})
		ch := get(url("asked.test"))
		a := c.next(FrameAsk)
		if a.Host != "asked.test" || a.Port != port || a.ID == "" {
			t.Fatalf("ask %+v", a)
		}
		// A second request for the same destination shares the ask.
		ch2 := get(url("asked.test"))
		c.send(Frame{Type: FrameSync})
		if s := c.next(FrameAsk); s.ID != a.ID {
			t.Fatalf("sync re-sent %+v, want the pending ask %s", s, a.ID)
		}
		c.send(Frame{Type: FrameDecide, ID: a.ID, Allow: true})
		want(t, ch, 200, "upstream /p")
		if f := c.next(FrameClosed); f.ID != a.ID || !f.Allow {
			t.Fatalf("closed %+v", f)
		}
		// The second request shared the ask unless it came after the
		// decision (then it asks anew).
		for r := range 2 {
			select {
			case res := <-ch2:
				ch2 = nil
				if res.code != 200 {
					t.Fatalf("second request: %d %q", res.code, res.body)
				}
			case f := <-c.frames:
				if f.Type == FrameAsk && r == 0 {
					c.send(Frame{Type: FrameDecide, ID: f.ID, Allow: true})
				}
			}
			if ch2 == nil {
				break
			}
		}

		// Once: the next request asks again; rejected by host:port.
		ch = get(url("asked.test"))
		a = c.next(FrameAsk)
		c.send(Frame{Type: FrameDecide, Host: "asked.test", Port: port, Reason: "not today"})
		want(t, ch, 403, "rejected: not today")

		// Remembered: later requests, GET and CONNECT, pass unasked.
		ch = get(url("asked.test"))
		a = c.next(FrameAsk)
		c.send(Frame{Type: FrameDecide, ID: a.ID, Allow: true, Remember: true})
		want(t, ch, 200, "upstream /p")
		want(t, get(url("asked.test")), 200, "upstream /p")
		// A grant frame admits a destination nobody asked about.
		c.send(Frame{Type: FrameGrant, Host: "Other.Test", Port: port})
		for try := 0; ; try++ {
			ch := get(url("other.test"))
			var r result
		wait:
			for {
				select {
				case r = <-ch:
					break wait
				case f, ok := <-c.frames: // not applied yet: reject the ask it made
					if !ok {
						t.Fatal("control channel ended")
					}
					if f.Type == FrameAsk {
						c.send(Frame{Type: FrameDecide, ID: f.ID})
					}
				}
			}
			if r.code == 200 {
				break
			}
			if try > 100 {
				t.Fatalf("granted destination still refused: %d %q", r.code, r.body)
			}
		}
	})
	t.Run("a grant admits no inside address", func(t *testing.T) {
		c, get, _ := newProxy(t, AskConfig{Timeout: time.Hour})
		ch := get(url("inside.test"))
		a := c.next(FrameAsk)
		c.send(Frame{Type: FrameDecide, ID: a.ID, Allow: true, Remember: true})
		want(t, ch, 403, "10.0.0.1 is a private")
		// An inside address literal is refused without an ask.
		want(t, get("http://10.0.0.1/"), 403, "allow-list")
		c.send(Frame{Type: FrameSync})
		select {
		case f := <-c.frames:
			if f.Type == FrameAsk {
				t.Fatalf("asked about an inside address: %+v", f)
			}
		case <-time.After(200 * time.Millisecond):
		}
	})
	t.Run("timeout", func(t *testing.T) {
		c, get, _ := newProxy(t, AskConfig{Timeout: 100 * time.Millisecond})
		ch := get(url("asked.test"))
		c.next(FrameAsk)
		want(t, ch, 403, "nobody approved it within 100ms")
		if f := c.next(FrameClosed); f.Allow {
			t.Fatalf("closed %+v", f)
		}
	})
	t.Run("config turns asking on and off", func(t *testing.T) {
		c, get, _ := newProxy(t, AskConfig{})
		want(t, get(url("asked.test")), 403, "allow-list")
		c.send(Frame{Type: FrameConfig, TimeoutMS: time.Hour.Milliseconds()})
		var ch <-chan result
		for try := 0; ; try++ { // the config frame may not be applied yet
			ch = get(url("asked.test"))
			select {
			case f := <-c.frames:
				if f.Type != FrameAsk {
					t.Fatalf("frame %+v", f)
				}
			case r := <-ch:
				if try > 100 {
					t.Fatalf("no ask after config: %d %q", r.code, r.body)
				}
				continue
			}
			break
		}
		c.send(Frame{Type: FrameConfig})
		want(t, ch, 403, "nobody is there to approve it")
	})
	t.Run("connect asks", func(t *testing.T) {
		c, _, proxy := newProxy(t, AskConfig{Timeout: time.Hour})
		done := make(chan int, 1)
		go func() {
			c, err := net.Dial("tcp", proxy)
			if err != nil {
				done <- 0
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "CONNECT asked.test:%d HTTP/1.1\r\nHost: asked.test\r\n\r\n", port)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				done <- 0
				return
			}
			done <- resp.StatusCode
		}()
		a := c.next(FrameAsk)
		c.send(Frame{Type: FrameDecide, ID: a.ID, Allow: true})
		if code := <-done; code != 200 {
			t.Fatalf("CONNECT after approval: %d", code)
		}
	})
	t.Run("bounds", func(t *testing.T) {
		c, get, _ := newProxy(t, AskConfig{Timeout: time.Hour, MaxPending: 2, Rate: 0.001, Burst: 3})
		var held []<-chan result
		for i := range 2 {
			held = append(held, get(url(fmt.Sprintf("h%d.test", i))))
			c.next(FrameAsk)
		}
		want(t, get(url("h2.test")), 403, "too many destinations (2) await approval")
		c.send(Frame{Type: FrameDecide, Host: "h0.test", Port: port})
		want(t, held[0], 403, "rejected")
		ch := get(url("h3.test")) // the third token
		a := c.next(FrameAsk)
		c.send(Frame{Type: FrameDecide, ID: a.ID})
		want(t, ch, 403, "rejected")
		want(t, get(url("h4.test")), 403, "asking for approval too fast")
		c.send(Frame{Type: FrameDecide, Host: "h1.test", Port: port})
		want(t, held[1], 403, "rejected")
	})
}

func TestParseGrant(t *testing.T) {
	for in, want := range map[string]string{
		"API.example.com:443": "api.example.com:443",
		"203.0.113.7:80":      "203.0.113.7:80",
		"[2001:db8::1]:443":   "[2001:db8::1]:443",
		"example.com":         "",
		"*.example.com:443":   "",
		"10.0.0.0/8:80":       "",
		"example.com:0":       "",
	} {
		g, err := ParseGrant(in)
		if want == "" {
			if err == nil {
				t.Errorf("ParseGrant(%q) = %v, want an error", in, g)
			}
			continue
		}
		if err != nil || g.String() != want {
			t.Errorf("ParseGrant(%q) = %v, %v; want %s", in, g, err, want)
		}
	}
}
