package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
	"go.uber.org/zap/zaptest"
)

// listener is an HTTP server the test opens on the host, counting the
// connections it accepts.
type listener struct {
	addr  string
	conns atomic.Int64
}

func listen(t *testing.T, ip, body string) *listener {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	l := &listener{addr: ln.Addr().String()}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				l.conns.Add(1)
			}
		},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return l
}

// bridgeHostAddr is the default bridge's address on the host side (its
// IPAM config may not name the gateway): the interface address inside its
// subnet.
func bridgeHostAddr(ctx context.Context, t *testing.T, cli *client.Client) string {
	t.Helper()
	br, err := cli.NetworkInspect(ctx, "bridge", client.NetworkInspectOptions{})
	if err != nil || len(br.Network.IPAM.Config) == 0 {
		t.Fatalf("default bridge: %v", err)
	}
	subnet := br.Network.IPAM.Config[0].Subnet
	addrs, _ := net.InterfaceAddrs()
	for _, ad := range addrs {
		if p, err := netip.ParsePrefix(ad.String()); err == nil && subnet.Contains(p.Addr()) {
			return p.Addr().String()
		}
	}
	t.Fatalf("no host address in the default bridge's subnet %s", subnet)
	return ""
}

// TestEgressCannotReachTheInside: an egress box sits on a network of its
// own with its proxy. It has no route to the host (listeners on the
// default bridge's gateway), to a second egress box (a listener inside
// it), or to the metadata address; through the proxy those are refused
// with 403 and a reason, logged with the box's id; an address on the
// operator's allow-list is reached through the proxy. A none-network box
// has no interface but loopback. A restarted worker re-creates a missing
// proxy and collects the network and proxy of a box that is gone; deleting
// a box removes its network and proxy.
func TestEgressCannotReachTheInside(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // hang guard
	defer cancel()
	gw := bridgeHostAddr(ctx, t, e.cli)
	allowed := listen(t, gw, "allowed-ok")
	denied := listen(t, gw, "denied-reached")

	e.cfg.EgressProxy = sandboxtest.EgressProxy(t)
	e.cfg.Policy.EgressAllow = []string{allowed.addr} // the gateway, this port only
	m := e.manager(t)
	egress := sandbox.CreateSpec{Overrides: sandbox.Template{Network: sandbox.NetworkEgress}}
	a := e.create(t, m, egress)
	b := e.create(t, m, egress)
	none := e.create(t, m, sandbox.CreateSpec{})

	// A listener inside the second box.
	if r := exec(t, m, b.ID, "mkdir -p /tmp/www && echo inside-b > /tmp/www/index.html && httpd -p 8080 -h /tmp/www", 10); exitCode(r) != 0 {
		t.Fatalf("start httpd in the second box: %s", r.Output)
	}
	bi, err := e.cli.ContainerInspect(ctx, b.ContainerID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bIP := bi.Container.NetworkSettings.Networks["plumb-egress-"+b.ID].IPAddress.String()
	if r := exec(t, m, b.ID, "wget -q -O- -Y off http://127.0.0.1:8080/", 10); !strings.Contains(r.Output, "inside-b") {
		t.Fatalf("the second box's listener does not serve: %s", r.Output)
	}

	direct := func(id, url string) {
		t.Helper()
		r := exec(t, m, id, "timeout 10 wget -q -O- -Y off "+url+" 2>&1", 20)
		if exitCode(r) == 0 || strings.Contains(r.Output, "-ok") || strings.Contains(r.Output, "inside-b") {
			t.Errorf("box %s reached %s directly: exit %d %q", id, url, exitCode(r), r.Output)
		}
	}
	// proxied sends one request to the proxy by hand (nc), so the test
	// reads the status line and the reason whatever the client does.
	proxied := func(id, url string) string {
		t.Helper()
		cmd := fmt.Sprintf(`printf 'GET %s HTTP/1.0\r\n\r\n' | timeout 20 nc %s %d`, url, sandbox.EgressProxyHost, sandbox.EgressProxyPort)
		return exec(t, m, id, cmd, 30).Output
	}

	t.Run("direct: no route", func(t *testing.T) {
		direct(a.ID, "http://"+allowed.addr+"/")
		direct(a.ID, "http://"+denied.addr+"/")
		direct(a.ID, "http://"+bIP+":8080/")
		direct(a.ID, "http://169.254.169.254/latest/meta-data/")
		if n := allowed.conns.Load() + denied.conns.Load(); n != 0 {
			t.Fatalf("host listeners saw %d connections from a box", n)
		}
	})
	t.Run("through the proxy: refused", func(t *testing.T) {
		for _, tc := range []struct{ url, reason string }{
			{"http://" + denied.addr + "/", "not on this worker's egress allow-list"},
			{"http://" + bIP + ":8080/", "not on this worker's egress allow-list"},
			{"http://169.254.169.254/latest/meta-data/", "cloud metadata"},
			{"http://[fd00:ec2::254]/", "cloud metadata"},
			{"http://127.0.0.1:" + strings.Split(allowed.addr, ":")[1] + "/", "loopback"},
		} {
			out := proxied(a.ID, tc.url)
			if !strings.Contains(out, " 403 ") || !strings.Contains(out, tc.reason) {
				t.Errorf("GET %s through the proxy: %q, want 403 naming %q", tc.url, out, tc.reason)
			}
		}
		if n := denied.conns.Load(); n != 0 {
			t.Fatalf("the denied listener saw %d connections", n)
		}
		logs := proxyLogs(t, e.cli, a.ID)
		if !strings.Contains(logs, `"egress refused"`) || !strings.Contains(logs, a.ID) {
			t.Fatalf("refusals not logged with the sandbox id: %s", logs)
		}
	})
	t.Run("through the proxy: allow-listed", func(t *testing.T) {
		r := exec(t, m, a.ID, "timeout 20 wget -q -O- http://"+allowed.addr+"/ 2>&1", 30)
		if exitCode(r) != 0 || r.Output != "allowed-ok" {
			t.Fatalf("allow-listed destination through HTTP_PROXY: exit %d %q", exitCode(r), r.Output)
		}
	})
	t.Run("none has no network", func(t *testing.T) {
		r := exec(t, m, none.ID, "ip -o link show | grep -v ' lo:' | wc -l", 10)
		if strings.TrimSpace(r.Output) != "0" {
			t.Fatalf("a none-network box has interfaces beyond loopback: %q", r.Output)
		}
		direct(none.ID, "http://"+allowed.addr+"/")
	})

	// Restart: the first box's proxy is gone, the second box's container
	// too. The new worker re-creates the proxy and collects the second
	// box's network and proxy.
	m.Close()
	if _, err := e.cli.ContainerRemove(ctx, a.ID+"-egress", client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.ContainerRemove(ctx, b.ContainerID, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	m2, err := sandbox.NewManager(ctx, e.cli, e.cfg, sandbox.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if r := exec(t, m2, a.ID, "timeout 20 wget -q -O- http://"+allowed.addr+"/ 2>&1", 30); r.Output != "allowed-ok" {
		t.Fatalf("after a restart the adopted egress box gets %q", r.Output)
	}
	gone := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			if _, err := e.cli.NetworkInspect(ctx, "plumb-egress-"+id, client.NetworkInspectOptions{}); !cerrdefs.IsNotFound(err) {
				t.Errorf("network of %s still there: %v", id, err)
			}
			if _, err := e.cli.ContainerInspect(ctx, id+"-egress", client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
				t.Errorf("proxy of %s still there: %v", id, err)
			}
		}
	}
	gone(b.ID)
	if err := m2.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	gone(a.ID)
	if err := m2.DeleteAll(ctx); err != nil {
		t.Fatal(err)
	}
	if ns, err := sandboxtest.Networks(ctx, e.cli, sandboxtest.Label(sandbox.LabelEgressWorker, e.worker)); err != nil || len(ns) > 0 {
		t.Fatalf("networks left: %v %v", ns, err)
	}
}

// proxyLogs returns what sandbox id's proxy logged.
func proxyLogs(t *testing.T, cli *client.Client, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := cli.ContainerLogs(ctx, id+"-egress", client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var out strings.Builder
	if _, err := stdcopy.StdCopy(&out, &out, rc); err != nil {
		t.Fatal(err)
	}
	return out.String()
}
