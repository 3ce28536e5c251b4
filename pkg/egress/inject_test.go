package egress

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestScrubber(t *testing.T) {
	tests := []struct {
		name, in, want string
		needles        []string
	}{
		{name: "none", in: "hello world", needles: []string{"s3cret"}, want: "hello world"},
		{name: "one", in: "a s3cret b", needles: []string{"s3cret"}, want: "a [plumb-secret] b"},
		{name: "edges", in: "s3crets3cret", needles: []string{"s3cret"}, want: "[plumb-secret][plumb-secret]"},
		{name: "partial at end", in: "xx s3cre", needles: []string{"s3cret"}, want: "xx s3cre"},
		{name: "two needles", in: "aa-bbbb-aa", needles: []string{"aa", "bbbb"}, want: "[plumb-secret]-[plumb-secret]-[plumb-secret]"},
		{name: "longest first", in: "tokentoken2", needles: []string{"token", "token2"}, want: "[plumb-secret][plumb-secret]"},
		{name: "empty", in: "", needles: []string{"x"}, want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in)), iotest.HalfReader(strings.NewReader(tc.in))} {
				got, err := io.ReadAll(newScrubber(r, tc.needles))
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != tc.want {
					t.Fatalf("scrub(%q) = %q, want %q", tc.in, got, tc.want)
				}
			}
		})
	}
}

func FuzzScrubber(f *testing.F) {
	f.Add([]byte("a s3cret b s3cr"), "s3cret")
	f.Fuzz(func(t *testing.T, in []byte, needle string) {
		if needle == "" {
			return
		}
		got, err := io.ReadAll(newScrubber(iotest.OneByteReader(bytes.NewReader(in)), []string{needle}))
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.ReplaceAll(string(in), needle, Placeholder); !strings.Contains(Placeholder, needle) && string(got) != want {
			t.Fatalf("scrub(%q, %q) = %q, want %q", in, needle, got, want)
		}
	})
}

func TestCheckRule(t *testing.T) {
	ok := InjectRule{Name: "gh", Hosts: []string{"api.example.com", "API.example.com:8443", "203.0.113.7"}, Header: "Authorization", Value: "Bearer abc", Secret: "abc"}
	tests := []struct {
		name   string
		change func(r *InjectRule)
		err    string
	}{
		{name: "ok", change: func(*InjectRule) {}},
		{name: "no hosts", change: func(r *InjectRule) { r.Hosts = nil }, err: "no hosts"},
		{name: "wildcard", change: func(r *InjectRule) { r.Hosts = []string{"*.example.com"} }, err: "exact host"},
		{name: "url", change: func(r *InjectRule) { r.Hosts = []string{"https://example.com"} }, err: "https://example.com"},
		{name: "port 0", change: func(r *InjectRule) { r.Hosts = []string{"example.com:0"} }, err: "port"},
		{name: "host header", change: func(r *InjectRule) { r.Header = "Host" }, err: "header"},
		{name: "bad header", change: func(r *InjectRule) { r.Header = "X Bad" }, err: "header"},
		{name: "newline", change: func(r *InjectRule) { r.Value = "Bearer abc\r\nX: y" }, err: "line break"},
		{name: "no secret", change: func(r *InjectRule) { r.Value = "Bearer" }, err: "contain the secret"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.change(&r)
			err := CheckRule(r)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("CheckRule = %v, want %q", err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "abc") {
				t.Fatalf("the error shows the value: %v", err)
			}
		})
	}
}

// TestBoxCANameConstrained: a certificate the box CA signs for a name it
// was not made for does not verify, so a leaked key impersonates nothing
// else.
func TestBoxCANameConstrained(t *testing.T) {
	caPEM, keyPEM, err := NewCA([]string{"api.example.com:8443"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewInjector(InjectConfig{CACert: caPEM, CAKey: keyPEM, UpstreamRoots: caPEM})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(caPEM))
	for _, tc := range []struct {
		host string
		ok   bool
	}{{"api.example.com", true}, {"evil.example", false}, {"example.com", false}, {"127.0.0.1", false}} {
		c, err := in.leaf(tc.host)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: tc.host})
		if (err == nil) != tc.ok {
			t.Errorf("leaf for %s verifies: %v, want %v", tc.host, err, tc.ok)
		}
	}
}

// tlsUpstream is a real TLS server with a certificate of its own CA for
// names, recording the Authorization header of each request it serves and
// echoing it back in a header and the body.
type tlsUpstream struct {
	srv   *httptest.Server
	roots string // PEM of its CA
	mu    sync.Mutex
	seen  []string
}

func newTLSUpstream(t *testing.T, names ...string) *tlsUpstream {
	t.Helper()
	u := &tlsUpstream{}
	caPEM, keyPEM, err := NewCA(names, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := tls.X509KeyPair([]byte(caPEM), []byte(keyPEM))
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(ca.Certificate[0])
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, n := range names {
		if a, err := netip.ParseAddr(n); err == nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	u.roots = caPEM
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		u.mu.Lock()
		u.seen = append(u.seen, a)
		u.mu.Unlock()
		w.Header().Set("X-Echo", a)
		fmt.Fprintf(w, "path=%s auth=%s accept-encoding=%q", r.URL.Path, a, r.Header.Get("Accept-Encoding"))
	}))
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

func (u *tlsUpstream) port() string {
	_, p, _ := net.SplitHostPort(u.srv.Listener.Addr().String())
	return p
}

func (u *tlsUpstream) headers() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

func pool(t *testing.T, pems ...string) *x509.CertPool {
	p := x509.NewCertPool()
	for _, s := range pems {
		if !p.AppendCertsFromPEM([]byte(s)) {
			t.Fatal("no certificate")
		}
	}
	return p
}

// TestInject: through the proxy, a request to an injected host reaches the
// real TLS server with the header set (over the box's own value), and the
// value the server echoes back reaches the box as the placeholder; a host
// without a rule is tunnelled (the box sees the server's real certificate,
// the server no header); an injected host whose certificate does not
// verify gets no request at all.
func TestInject(t *testing.T) {
	const secret = "s3cr3t-value-1234"
	real := newTLSUpstream(t, "api.test", "127.0.0.1")
	impostor := newTLSUpstream(t, "evil.test") // its cert names another host
	loop := netip.MustParseAddr("127.0.0.1")

	hosts := []string{"api.test:" + real.port(), "fake.test:" + impostor.port()}
	caPEM, keyPEM, err := NewCA(hosts, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewInjector(InjectConfig{
		Rules:  []InjectRule{{Name: "api-token", Hosts: hosts, Header: "Authorization", Value: "Bearer " + secret, Secret: secret}},
		CACert: caPEM, CAKey: keyPEM, UpstreamRoots: real.roots + impostor.roots,
	})
	if err != nil {
		t.Fatal(err)
	}
	boxCA := in.ca
	core, logs := observer.New(zap.DebugLevel)
	_, purl := startProxy(t, Config{
		Sandbox:  "sbx-w-inject",
		Policy:   Policy{Allow: []Rule{{Host: "api.test"}, {Host: "fake.test"}, {Prefix: netip.MustParsePrefix("127.0.0.1/32")}}, allowLoopback: true},
		Resolver: mapResolver{"api.test": {loop}, "fake.test": {loop}},
		Inject:   in,
	}, zap.New(core))
	// The box trusts its CA and, for tunnelled hosts, the real roots.
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(purl),
		TLSClientConfig: &tls.Config{RootCAs: pool(t, caPEM, real.roots)}}}
	defer client.CloseIdleConnections()

	do := func(target, auth string) (*http.Response, string, error) {
		req, _ := http.NewRequest(http.MethodGet, target, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := client.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, string(b), err
	}

	t.Run("injected", func(t *testing.T) {
		for _, boxAuth := range []string{"", "Bearer box-chosen", secret} {
			resp, body, err := do("https://api.test:"+real.port()+"/echo", boxAuth)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if err := resp.TLS.PeerCertificates[0].CheckSignatureFrom(boxCA); err != nil {
				t.Errorf("the box saw a certificate not of the box CA: %v", err)
			}
			h := real.headers()
			if got := h[len(h)-1]; got != "Bearer "+secret {
				t.Errorf("the server saw Authorization %q, want the injected value", got)
			}
			if strings.Contains(body, secret) || strings.Contains(resp.Header.Get("X-Echo"), secret) {
				t.Errorf("the box saw the secret: body %q, X-Echo %q", body, resp.Header.Get("X-Echo"))
			}
			if want := "auth=Bearer " + Placeholder; !strings.Contains(body, want) || resp.Header.Get("X-Echo") != "Bearer "+Placeholder {
				t.Errorf("body %q, X-Echo %q: want the placeholder", body, resp.Header.Get("X-Echo"))
			}
			if !strings.Contains(body, `accept-encoding=""`) {
				t.Errorf("the upstream was asked for a compressed answer: %q", body)
			}
		}
	})

	t.Run("not injected: tunnelled with the real certificate", func(t *testing.T) {
		n := len(real.headers())
		resp, body, err := do("https://127.0.0.1:"+real.port()+"/plain", "")
		if err != nil {
			t.Fatal(err)
		}
		if resp.TLS.PeerCertificates[0].CheckSignatureFrom(boxCA) == nil {
			t.Errorf("a host without a rule was intercepted")
		}
		if h := real.headers(); len(h) != n+1 || h[n] != "" {
			t.Errorf("the server saw %q, want one request without Authorization (%s)", h[n:], body)
		}
	})

	t.Run("impostor upstream gets nothing", func(t *testing.T) {
		resp, body, err := do("https://fake.test:"+impostor.port()+"/", "")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "does not verify") {
			t.Errorf("status %d %q, want 502 naming the certificate", resp.StatusCode, body)
		}
		if h := impostor.headers(); len(h) != 0 {
			t.Errorf("the impostor got %d requests", len(h))
		}
	})

	for _, e := range logs.All() {
		if s := fmt.Sprint(e.Message, e.ContextMap()); strings.Contains(s, secret) {
			t.Errorf("a log line holds the secret: %s", s)
		}
	}
}
