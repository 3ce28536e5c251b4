package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"go.uber.org/zap/zaptest"
)

// upstream runs a real HTTP server (busybox httpd in the test image) in a
// container on a network of the test's own, and returns its name (which
// the proxy resolves through the engine once joined to the network) and
// the network's name and subnet.
func upstream(ctx context.Context, t *testing.T, e *env, body string) (name, netName, subnet string) {
	t.Helper()
	netName = "plumb-test-up-" + e.worker
	if _, err := e.cli.NetworkCreate(ctx, netName, client.NetworkCreateOptions{Driver: "bridge", Labels: sandboxtest.Labels(testRun)}); err != nil {
		t.Fatal(err)
	}
	name = "plumb-test-upstream-" + e.worker
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = e.cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
		if _, err := e.cli.NetworkRemove(ctx, netName, client.NetworkRemoveOptions{}); err != nil {
			t.Errorf("remove the upstream network: %v", err)
		}
	})
	ni, err := e.cli.NetworkInspect(ctx, netName, client.NetworkInspectOptions{})
	if err != nil || len(ni.Network.IPAM.Config) == 0 {
		t.Fatalf("upstream network: %v", err)
	}
	script := fmt.Sprintf("mkdir -p /tmp/www && echo %s > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www", body)
	c, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:             name,
		Config:           &container.Config{Image: e.image, Entrypoint: []string{"sh", "-c", script}, Cmd: nil, User: "1000:1000", Labels: sandboxtest.Labels(testRun)},
		HostConfig:       &container.HostConfig{NetworkMode: container.NetworkMode(netName)},
		NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{netName: {}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	return name, netName, ni.Network.IPAM.Config[0].Subnet.String()
}

// boxRun runs cmd in box id from a goroutine and delivers its output.
func boxRun(m *sandbox.Manager, id, cmd string) <-chan string {
	out := make(chan string, 1)
	go func() {
		f, err := m.Files(id)
		if err != nil {
			out <- err.Error()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		timeout := 150
		r, err := f.Execute(ctx, backend.ExecuteRequest{Command: cmd, TimeoutSeconds: &timeout})
		if err != nil {
			out <- err.Error()
			return
		}
		out <- r.Output
	}()
	return out
}

// watcher is a WatchEgress in the background.
type watcher struct {
	events chan sandbox.EgressRequest
	stop   context.CancelFunc
	done   chan error
}

func watch(m *sandbox.Manager, id string, timeout time.Duration) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{events: make(chan sandbox.EgressRequest, 64), stop: cancel, done: make(chan error, 1)}
	go func() {
		w.done <- m.WatchEgress(ctx, id, timeout, nil, func(r sandbox.EgressRequest) error { w.events <- r; return nil })
	}()
	return w
}

func (w *watcher) close(t *testing.T) {
	t.Helper()
	w.stop()
	if err := <-w.done; !errors.Is(err, context.Canceled) {
		t.Errorf("watch ended with %v", err)
	}
}

// ask runs cmd in the box until it makes an ask (the watcher's attach may
// still be under way when the first command runs: that one is refused at
// once and tried again) and returns the ask and the command's output.
func (w *watcher) ask(t *testing.T, m *sandbox.Manager, id, cmd string) (sandbox.EgressRequest, <-chan string) {
	t.Helper()
	for try := 0; ; try++ {
		out := boxRun(m, id, cmd)
		select {
		case r := <-w.events:
			if r.Closed {
				t.Fatalf("unexpected end of a request: %+v", r)
			}
			return r, out
		case o := <-out:
			if try > 60 {
				t.Fatalf("no ask for %q: %q", cmd, o)
			}
			time.Sleep(time.Second)
		case err := <-w.done:
			t.Fatalf("watch ended: %v", err)
		}
	}
}

func (w *watcher) closed(t *testing.T, id string) sandbox.EgressRequest {
	t.Helper()
	select {
	case r := <-w.events:
		if !r.Closed || r.ID != id {
			t.Fatalf("event %+v, want the end of %s", r, id)
		}
		return r
	case <-time.After(2 * time.Minute): // hang guard
		t.Fatalf("request %s never ended", id)
	}
	return sandbox.EgressRequest{}
}

// TestEgressAsk: a box's connection to a real upstream that is off the
// allow-list (by name; the operator's address rule admits the upstream's
// subnet) waits while someone watches, shows up in WatchEgress, and
// completes when approved; a rejection and a timeout end in 403 with the
// reason; a remembered grant admits the next connection unasked; nobody
// watching means an immediate 403; a pending request survives a restart of
// the worker (the new one re-attaches and the proxy re-sends it) and is
// approved there.
func TestEgressAsk(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // hang guard
	defer cancel()
	up, upNet, subnet := upstream(ctx, t, e, "upstream-ok")
	e.cfg.EgressProxy = sandboxtest.EgressProxy(t)
	e.cfg.Policy.EgressAllow = []string{subnet, "example.invalid"} // by address only
	m := e.manager(t)
	box := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{Network: sandbox.NetworkEgress}})
	proxy := box.ID + "-egress"
	if _, err := e.cli.NetworkConnect(ctx, upNet, client.NetworkConnectOptions{Container: proxy}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before the upstream network goes
		_, _ = e.cli.NetworkDisconnect(context.Background(), upNet, client.NetworkDisconnectOptions{Container: proxy, Force: true})
	})
	url := fmt.Sprintf("http://%s:8080/", up)
	wget := "timeout 120 wget -q -O- " + url + " 2>&1"
	raw := fmt.Sprintf(`printf 'GET %s HTTP/1.0\r\n\r\n' | timeout 120 nc %s %d`, url, sandbox.EgressProxyHost, sandbox.EgressProxyPort)

	// Nobody watching: refused at once, as before.
	if out := <-boxRun(m, box.ID, raw); !strings.Contains(out, " 403 ") || !strings.Contains(out, "allow-list") {
		t.Fatalf("unwatched: %q", out)
	}

	w := watch(m, box.ID, 10*time.Minute)
	t.Run("approve once", func(t *testing.T) {
		r, out := w.ask(t, m, box.ID, wget)
		if r.Host != up || r.Port != 8080 || r.ID == "" {
			t.Fatalf("request %+v", r)
		}
		if err := m.DecideEgress(ctx, box.ID, sandbox.EgressDecision{RequestID: r.ID, Allow: true, By: "test"}); err != nil {
			t.Fatal(err)
		}
		if o := <-out; strings.TrimSpace(o) != "upstream-ok" {
			t.Fatalf("approved connection: %q", o)
		}
		if c := w.closed(t, r.ID); !c.Allowed {
			t.Fatalf("closed %+v", c)
		}
		if err := m.DecideEgress(ctx, box.ID, sandbox.EgressDecision{RequestID: r.ID, Allow: true}); sandbox.CodeOf(err) != sandbox.CodeNotFound {
			t.Fatalf("deciding a closed request: %v", err)
		}
	})
	t.Run("reject", func(t *testing.T) {
		// (A client that half-closes, as nc does at the end of its input,
		// gives up waiting: the reasons in the 403 bodies are checked in
		// pkg/egress; here the events carry them.)
		r, out := w.ask(t, m, box.ID, wget) // once did not remember
		if err := m.DecideEgress(ctx, box.ID, sandbox.EgressDecision{RequestID: r.ID, Reason: "not this one"}); err != nil {
			t.Fatal(err)
		}
		if o := <-out; !strings.Contains(o, "403") {
			t.Fatalf("rejected connection: %q", o)
		}
		if c := w.closed(t, r.ID); c.Allowed || !strings.Contains(c.Reason, "rejected: not this one") {
			t.Fatalf("closed %+v", c)
		}
	})
	t.Run("bad decisions", func(t *testing.T) {
		for _, d := range []sandbox.EgressDecision{{}, {Host: "*.x.example", Port: 1}, {Host: up}, {RequestID: "x", Host: up, Port: 1}} {
			if err := m.DecideEgress(ctx, box.ID, d); sandbox.CodeOf(err) != sandbox.CodeInvalid {
				t.Errorf("DecideEgress(%+v) = %v, want invalid", d, err)
			}
		}
		if err := m.DecideEgress(ctx, "nope", sandbox.EgressDecision{Host: up, Port: 80}); sandbox.CodeOf(err) != sandbox.CodeNotFound {
			t.Errorf("unknown sandbox: %v", err)
		}
	})
	w.close(t)

	t.Run("timeout", func(t *testing.T) {
		w := watch(m, box.ID, time.Second)
		defer w.close(t)
		r, out := w.ask(t, m, box.ID, wget)
		if o := <-out; !strings.Contains(o, "403") {
			t.Fatalf("timed-out connection: %q", o)
		}
		if c := w.closed(t, r.ID); c.Allowed || !strings.Contains(c.Reason, "nobody approved it within 1s") {
			t.Fatalf("closed %+v", c)
		}
	})

	t.Run("restart", func(t *testing.T) {
		w := watch(m, box.ID, 10*time.Minute)
		r, out := w.ask(t, m, box.ID, wget)
		// The worker goes away: its channel to the box ends, and with it
		// the waiting client (the box's agent ends a command whose channel
		// closed); the proxy keeps the ask until it times out.
		m.Close()
		<-out
		<-w.done
		m2, err := sandbox.NewManager(ctx, e.cli, e.cfg, sandbox.WithLogger(zaptest.NewLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		defer m2.Close()
		w2 := watch(m2, box.ID, 10*time.Minute)
		defer w2.close(t)
		select {
		case r2 := <-w2.events:
			if r2.ID != r.ID || r2.Closed {
				t.Fatalf("after the restart %+v, want %+v re-sent", r2, r)
			}
		case err := <-w2.done:
			t.Fatalf("watch ended: %v", err)
		case <-time.After(2 * time.Minute): // hang guard
			t.Fatal("the pending ask was not re-sent to the restarted worker within 2 minutes")
		}
		// Approve for the box's life: the next connection is not asked
		// about.
		if err := m2.DecideEgress(ctx, box.ID, sandbox.EgressDecision{RequestID: r.ID, Allow: true, Remember: true}); err != nil {
			t.Fatal(err)
		}
		w2.closed(t, r.ID)
		if o := <-boxRun(m2, box.ID, wget); strings.TrimSpace(o) != "upstream-ok" {
			t.Fatalf("remembered destination: %q", o)
		}
		select {
		case ev := <-w2.events:
			t.Fatalf("asked about a remembered destination: %+v", ev)
		default:
		}
		if err := m2.Delete(ctx, box.ID); err != nil {
			t.Fatal(err)
		}
	})
}
