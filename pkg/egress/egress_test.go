package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseRule(t *testing.T) {
	tests := []struct {
		in, want string
		err      bool
	}{
		{in: "example.com", want: "example.com"},
		{in: "Example.COM.", want: "example.com"},
		{in: "*.example.com", want: "*.example.com"},
		{in: "example.com:443", want: "example.com:443"},
		{in: "203.0.113.7", want: "203.0.113.7/32"},
		{in: "203.0.113.0/24", want: "203.0.113.0/24"},
		{in: "203.0.113.9/24:443", want: "203.0.113.0/24:443"},
		{in: "2001:db8::/32", want: "2001:db8::/32"},
		{in: "2001:db8::1", want: "2001:db8::1/128"},
		{in: "[2001:db8::1]:443", want: "[2001:db8::1/128]:443"},
		{in: "[2001:db8::/32]:8080", want: "[2001:db8::/32]:8080"},
		{in: "::ffff:10.0.0.1", want: "10.0.0.1/32"},
		{in: "", err: true},
		{in: "example.com:0", err: true},
		{in: "example.com:99999", err: true},
		{in: "example.com:", err: true},
		{in: "[2001:db8::1]", err: true},
		{in: "exa mple.com", err: true},
		{in: "*", err: true},
		{in: "-bad.example", err: true},
		{in: "http://example.com", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			r, err := ParseRule(tc.in)
			if tc.err {
				if err == nil {
					t.Fatalf("ParseRule(%q) = %v, want an error", tc.in, r)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.String() != tc.want {
				t.Fatalf("ParseRule(%q) = %q, want %q", tc.in, r.String(), tc.want)
			}
		})
	}
}

func TestPolicyCheck(t *testing.T) {
	rules := func(s ...string) []Rule {
		r, err := ParseRules(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	host := []netip.Prefix{netip.MustParsePrefix("8.8.4.4/32")} // pretend the host is public
	tests := []struct {
		name   string
		allow  []Rule
		host   string
		port   uint16
		addr   string
		reason string // "" = allowed
	}{
		{name: "public, no allow-list", host: "pkg.example", port: 443, addr: "93.184.216.34"},
		{name: "metadata v4", host: "169.254.169.254", port: 80, addr: "169.254.169.254", reason: "metadata"},
		{name: "metadata v6", host: "fd00:ec2::254", port: 80, addr: "fd00:ec2::254", reason: "metadata"},
		{name: "metadata even when allowed by cidr", allow: rules("169.254.0.0/16"), host: "x", port: 80, addr: "169.254.169.254", reason: "metadata"},
		{name: "loopback", host: "localhost", port: 80, addr: "127.0.0.1", reason: "loopback"},
		{name: "loopback v6", host: "ip6-localhost", port: 80, addr: "::1", reason: "loopback"},
		{name: "mapped loopback", host: "x", port: 80, addr: "::ffff:127.0.0.1", reason: "loopback"},
		{name: "link-local v6", host: "x", port: 80, addr: "fe80::1", reason: "link-local"},
		{name: "rfc1918 10", host: "x", port: 80, addr: "10.1.2.3", reason: "private"},
		{name: "rfc1918 172", host: "x", port: 80, addr: "172.17.0.1", reason: "private"},
		{name: "rfc1918 192.168", host: "x", port: 80, addr: "192.168.1.1", reason: "private"},
		{name: "cgnat", host: "x", port: 80, addr: "100.64.0.1", reason: "carrier-grade"},
		{name: "ula", host: "x", port: 80, addr: "fd00::2", reason: "unique local"},
		{name: "nat64", host: "x", port: 80, addr: "64:ff9b::a00:1", reason: "NAT64"},
		{name: "6to4", host: "x", port: 80, addr: "2002:a00:1::1", reason: "6to4"},
		{name: "documentation", host: "x", port: 80, addr: "192.0.2.2", reason: "documentation"},
		{name: "multicast", host: "x", port: 80, addr: "224.0.0.1", reason: "multicast"},
		{name: "unspecified", host: "x", port: 80, addr: "0.0.0.0", reason: "unspecified"},
		{name: "host address", host: "x", port: 80, addr: "8.8.4.4", reason: "worker's host"},
		{name: "host address allowed by cidr", allow: rules("8.8.4.4/32"), host: "x", port: 80, addr: "8.8.4.4"},
		{name: "private allowed by cidr", allow: rules("172.17.0.1:8080"), host: "172.17.0.1", port: 8080, addr: "172.17.0.1"},
		{name: "private cidr other port", allow: rules("172.17.0.1:8080"), host: "172.17.0.1", port: 8081, addr: "172.17.0.1", reason: "allow-list"},
		{name: "host pattern never unlocks private", allow: rules("*.corp.example"), host: "db.corp.example", port: 5432, addr: "10.0.0.5", reason: "private"},
		{name: "host pattern", allow: rules("*.pypi.example"), host: "files.pypi.example", port: 443, addr: "93.184.216.34"},
		{name: "host pattern apex not matched", allow: rules("*.pypi.example"), host: "pypi.example", port: 443, addr: "93.184.216.34", reason: "allow-list"},
		{name: "host with port", allow: rules("pypi.example:443"), host: "pypi.example", port: 80, addr: "93.184.216.34", reason: "allow-list"},
		{name: "not on list", allow: rules("pypi.example"), host: "evil.example", port: 443, addr: "93.184.216.34", reason: "allow-list"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{Allow: tc.allow, Deny: host}
			err := p.Check(tc.host, tc.port, netip.MustParseAddr(tc.addr))
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ref *Refusal
			if !errors.As(err, &ref) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("got %v, want a refusal naming %q", err, tc.reason)
			}
		})
	}
}

// mapResolver resolves names from a map.
type mapResolver map[string][]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

// startProxy serves a proxy on loopback and returns its URL.
func startProxy(t *testing.T, cfg Config, lg *zap.Logger) (*Proxy, *url.URL) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := New(cfg, lg)
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		p.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return p, &url.URL{Scheme: "http", Host: ln.Addr().String()}
}

func TestProxy(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s proxy-auth=%q", r.URL.Path, r.Header.Get("Proxy-Authorization"))
	}))
	defer upstream.Close()
	up := netip.MustParseAddrPort(upstream.Listener.Addr().String())

	core, logs := observer.New(zap.InfoLevel)
	res := mapResolver{
		"allowed.test": {up.Addr()},
		"mixed.test":   {up.Addr(), netip.MustParseAddr("10.0.0.1")},
		"meta.test":    {netip.MustParseAddr("169.254.169.254")},
	}
	_, purl := startProxy(t, Config{
		Sandbox:  "sbx-w-test",
		Policy:   Policy{Allow: []Rule{{Host: "allowed.test"}, {Host: "mixed.test"}, {Host: "meta.test"}}, allowLoopback: true},
		Resolver: res,
	}, zap.New(core))
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(purl)}}
	defer client.CloseIdleConnections()

	get := func(target string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, target, nil)
		req.Header.Set("Proxy-Authorization", "secret")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	port := up.Port()
	tests := []struct {
		name   string
		target string
		code   int
		body   string
	}{
		{name: "allowed", target: fmt.Sprintf("http://allowed.test:%d/x", port), code: 200, body: `hello /x proxy-auth=""`},
		{name: "not on list", target: fmt.Sprintf("http://other.test:%d/", port), code: 403, body: "allow-list"},
		{name: "literal not on list", target: fmt.Sprintf("http://%s/", up), code: 403, body: "allow-list"},
		{name: "one inside address refuses the name", target: fmt.Sprintf("http://mixed.test:%d/", port), code: 403, body: "10.0.0.1 is a private"},
		{name: "metadata", target: "http://meta.test/latest/meta-data/", code: 403, body: "metadata"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(tc.target)
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Fatalf("GET %s = %d %q, want %d with %q", tc.target, code, body, tc.code, tc.body)
			}
		})
	}
	if n := logs.FilterMessage("egress refused").FilterField(zap.String("sandbox-id", "sbx-w-test")).Len(); n != 4 {
		t.Errorf("%d refusals logged with the sandbox id, want 4: %v", n, logs.All())
	}

	t.Run("connect", func(t *testing.T) {
		c, err := net.Dial("tcp", purl.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n", port, port)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		fmt.Fprintf(c, "GET /tunnel HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		resp, err = http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), "hello /tunnel") {
			t.Fatalf("through the tunnel: %q", b)
		}
	})
	t.Run("connect refused", func(t *testing.T) {
		if code, body := connect(t, purl.Host, "169.254.169.254:443"); code != 403 || !strings.Contains(body, "metadata") {
			t.Fatalf("CONNECT metadata = %d %q", code, body)
		}
	})
}

// TestProxyBounds checks the per-box limits: connections beyond MaxConns
// wait, an idle tunnel is closed, clients outside the box's network are
// dropped, and Close ends open tunnels.
func TestProxyBounds(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	target := echo.Addr().String()
	tunnel := func(t *testing.T, proxy string) (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		return c, br
	}

	t.Run("max conns and close", func(t *testing.T) {
		p, purl := startProxy(t, Config{MaxConns: 1, Policy: Policy{allowLoopback: true}}, nil)
		c1, br1 := tunnel(t, purl.Host)
		defer c1.Close()
		// A second client is accepted by the kernel but not served while
		// the first holds the only slot.
		c2, err := net.Dial("tcp", purl.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		fmt.Fprintf(c2, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		_ = c2.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if n, err := c2.Read(make([]byte, 1)); n != 0 || !isTimeout(err) {
			t.Fatalf("second client served while the first holds the only slot: n=%d err=%v", n, err)
		}
		fmt.Fprint(c1, "ping")
		if b := make([]byte, 4); func() bool { _, err := io.ReadFull(br1, b); return err != nil || string(b) != "ping" }() {
			t.Fatal("tunnel does not echo")
		}
		p.Close()
		_ = c1.SetReadDeadline(time.Now().Add(time.Minute))
		if _, err := br1.ReadByte(); err == nil {
			t.Fatal("tunnel still open after Close")
		}
	})
	t.Run("idle timeout", func(t *testing.T) {
		_, purl := startProxy(t, Config{IdleTimeout: 100 * time.Millisecond, Policy: Policy{allowLoopback: true}}, nil)
		c, br := tunnel(t, purl.Host)
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		if _, err := br.ReadByte(); err == nil || isTimeout(err) {
			t.Fatalf("idle tunnel not closed by the proxy: %v", err)
		}
	})
	t.Run("outside client", func(t *testing.T) {
		_, purl := startProxy(t, Config{Clients: []netip.Prefix{netip.MustParsePrefix("172.31.0.0/16")}, Policy: Policy{allowLoopback: true}}, nil)
		c, err := net.Dial("tcp", purl.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
			t.Fatalf("client outside the box network served: n=%d err=%v", n, err)
		}
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// connect sends CONNECT target to the proxy at addr and returns the
// answer's status and body (a refusal's body names why).
func connect(t *testing.T, addr, target string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
