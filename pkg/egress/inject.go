package egress

import (
	"bufio"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Placeholder replaces a secret value wherever an injected host's response
// would show it to the box.
const Placeholder = "[plumb-secret]"

// MaxInjectConfigBytes bounds a serialized InjectConfig (the upstream roots
// are most of it).
const MaxInjectConfigBytes = 4 << 20

// InjectRule adds one header to the requests a box sends to some hosts.
// It holds a secret: never log it.
type InjectRule struct {
	// Name names the rule (the secret's name) in logs and errors.
	Name string `json:"name"`
	// Hosts are exact host names or addresses, each with an optional
	// port (default 443): "api.example.com", "api.example.com:8443".
	Hosts []string `json:"hosts"`
	// Header is the request header that is set (overwriting the box's).
	Header string `json:"header"`
	// Value is the header's whole value (the secret, formatted).
	Value string `json:"value"`
	// Secret is the raw secret, replaced in responses (Placeholder).
	Secret string `json:"secret"`
}

// InjectConfig is what a proxy needs to inject secrets: the rules, the
// box's CA that signs the certificates the proxy answers injected hosts
// with, and the roots it verifies the real upstreams against. sandboxd
// writes it as JSON into the proxy container; plumb-egress reads it.
type InjectConfig struct {
	Rules []InjectRule `json:"rules"`
	// CACert and CAKey are PEM (the key PKCS#8).
	CACert string `json:"ca_cert"`
	CAKey  string `json:"ca_key"`
	// UpstreamRoots is a PEM bundle of the roots upstream certificates
	// must chain to.
	UpstreamRoots string `json:"upstream_roots"`
}

// ParseInjectConfig decodes and checks a serialized InjectConfig.
func ParseInjectConfig(b []byte) (*Injector, error) {
	if len(b) > MaxInjectConfigBytes {
		return nil, fmt.Errorf("inject config: %d bytes exceed %d", len(b), MaxInjectConfigBytes)
	}
	var c InjectConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("inject config: %w", err)
	}
	return NewInjector(c)
}

// injectHost is a host:port that rules inject into.
type injectHost struct {
	host string
	port uint16
}

// ParseInjectHost parses a rule's host entry: an exact name or address,
// with an optional port (443 when it names none).
func ParseInjectHost(s string) (host string, port uint16, err error) {
	host, port = strings.ToLower(strings.TrimSpace(s)), 443
	if h, p, err := net.SplitHostPort(host); err == nil {
		n, perr := strconv.ParseUint(p, 10, 16)
		if perr != nil || n == 0 {
			return "", 0, fmt.Errorf("host %q: port %q is not 1..65535", s, p)
		}
		host, port = h, uint16(n)
	}
	host = strings.TrimSuffix(host, ".")
	if _, err := netip.ParseAddr(host); err == nil {
		return host, port, nil
	}
	if strings.Contains(host, "*") || !validHostPattern(host) {
		return "", 0, fmt.Errorf("host %q: want an exact host name or address, with an optional :port", s)
	}
	return host, port, nil
}

// validHeaderName reports whether s is an HTTP token a rule may set.
func validHeaderName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)) {
			return false
		}
	}
	switch http.CanonicalHeaderKey(s) {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Te", "Trailer", "Upgrade", "Proxy-Authorization", "Proxy-Connection", "Keep-Alive":
		return false
	}
	return true
}

// CheckRule checks a rule's shape (not its value's secrecy).
func CheckRule(r InjectRule) error {
	if len(r.Hosts) == 0 {
		return fmt.Errorf("rule %q: no hosts", r.Name)
	}
	for _, h := range r.Hosts {
		if _, _, err := ParseInjectHost(h); err != nil {
			return fmt.Errorf("rule %q: %w", r.Name, err)
		}
	}
	if !validHeaderName(r.Header) {
		return fmt.Errorf("rule %q: header %q is not a header a rule may set", r.Name, r.Header)
	}
	if strings.ContainsAny(r.Value, "\r\n\x00") {
		return fmt.Errorf("rule %q: the header value holds a line break or NUL", r.Name)
	}
	if r.Secret == "" || !strings.Contains(r.Value, r.Secret) {
		return fmt.Errorf("rule %q: the header value must contain the secret", r.Name)
	}
	return nil
}

// Injector terminates TLS for injected hosts and sets their headers.
type Injector struct {
	rules   map[injectHost][]InjectRule
	secrets []string
	ca      *x509.Certificate
	caKey   crypto.Signer
	roots   *x509.CertPool
	leafKey *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// NewInjector checks c and returns its injector.
func NewInjector(c InjectConfig) (*Injector, error) {
	in := &Injector{rules: map[injectHost][]InjectRule{}, leaves: map[string]*tls.Certificate{}}
	seen := map[string]bool{}
	for _, r := range c.Rules {
		if err := CheckRule(r); err != nil {
			return nil, err
		}
		for _, h := range r.Hosts {
			host, port, _ := ParseInjectHost(h)
			k := injectHost{host, port}
			in.rules[k] = append(in.rules[k], r)
		}
		if !seen[r.Secret] {
			seen[r.Secret] = true
			in.secrets = append(in.secrets, r.Secret)
		}
	}
	cert, err := tls.X509KeyPair([]byte(c.CACert), []byte(c.CAKey))
	if err != nil {
		return nil, fmt.Errorf("inject config: CA: %w", err)
	}
	signer, ok := cert.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("inject config: CA key cannot sign")
	}
	if in.ca, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
		return nil, fmt.Errorf("inject config: CA: %w", err)
	}
	in.caKey = signer
	in.roots = x509.NewCertPool()
	if !in.roots.AppendCertsFromPEM([]byte(c.UpstreamRoots)) {
		return nil, errors.New("inject config: no upstream root certificate")
	}
	if in.leafKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, err
	}
	return in, nil
}

// Hosts lists the injected host:port pairs (for logs).
func (in *Injector) Hosts() []string {
	var out []string
	for k := range in.rules {
		out = append(out, net.JoinHostPort(k.host, strconv.Itoa(int(k.port))))
	}
	return out
}

func (in *Injector) match(host string, port uint16) []InjectRule {
	if in == nil {
		return nil
	}
	return in.rules[injectHost{strings.ToLower(strings.TrimSuffix(host, ".")), port}]
}

// leaf returns a certificate for host signed by the box CA.
func (in *Injector) leaf(host string) (*tls.Certificate, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	now := time.Now()
	if c, ok := in.leaves[host]; ok && now.Before(c.Leaf.NotAfter.Add(-time.Hour)) {
		return c, nil
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     minTime(now.Add(7*24*time.Hour), in.ca.NotAfter),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{a.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, in.ca, &in.leafKey.PublicKey, in.caKey)
	if err != nil {
		return nil, fmt.Errorf("mint certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, in.ca.Raw}, PrivateKey: in.leafKey, Leaf: leaf}
	in.leaves[host] = c
	return c, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// intercept serves a CONNECT to an injected host: it terminates the box's
// TLS with a certificate of the box CA, and forwards each request, with
// the rules' headers set, over a verified TLS connection to the upstream.
func (p *Proxy) intercept(w http.ResponseWriter, r *http.Request, target *vetted, host string, rules []InjectRule) {
	leaf, err := p.cfg.Inject.leaf(host)
	if err != nil {
		p.lg.Error("egress intercept", zap.String("host", host), zap.Error(err))
		p.fail(w, r, http.StatusInternalServerError, "cannot intercept "+host)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		p.fail(w, r, http.StatusInternalServerError, "cannot take over the connection")
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	if !p.track(client) {
		client.Close()
		return
	}
	defer p.untrack(client)
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	idle := &idleConn{Conn: client, d: p.cfg.IdleTimeout}
	raw := &prefixConn{Conn: idle, r: io.MultiReader(io.LimitReader(buf.Reader, int64(buf.Reader.Buffered())), idle)}
	tc := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	defer tc.Close()
	hctx, cancel := context.WithTimeout(r.Context(), headerTimeout)
	err = tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		p.lg.Info("egress intercept: box handshake failed", zap.String("host", host), zap.Error(err))
		return
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return p.connectTo(ctx, target)
		},
		TLSClientConfig:        &tls.Config{RootCAs: p.cfg.Inject.roots, ServerName: host, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:      false,
		DisableCompression:     true,
		ResponseHeaderTimeout:  p.cfg.IdleTimeout,
		MaxResponseHeaderBytes: 1 << 20,
		MaxIdleConnsPerHost:    1,
		IdleConnTimeout:        p.cfg.IdleTimeout,
	}
	defer tr.CloseIdleConnections()
	br := bufio.NewReader(tc)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if !p.forwardInjected(r.Context(), tc, req, tr, r.Host, host, rules) || req.Close {
			return
		}
	}
}

// forwardInjected sends one request of an intercepted connection upstream
// and writes the scrubbed response to the box; false ends the connection.
func (p *Proxy) forwardInjected(ctx context.Context, box net.Conn, req *http.Request, tr *http.Transport, hostport, host string, rules []InjectRule) bool {
	defer req.Body.Close()
	out := req.Clone(ctx)
	out.RequestURI = ""
	out.URL.Scheme = "https"
	out.URL.Host = hostport
	out.Host = hostport
	if strings.HasSuffix(hostport, ":443") {
		out.Host = strings.TrimSuffix(hostport, ":443")
	}
	removeHopHeaders(out.Header)
	// A compressed answer would hide an echoed value from the scrubber.
	out.Header.Del("Accept-Encoding")
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "")
	}
	for _, ru := range rules {
		out.Header.Set(ru.Header, ru.Value)
	}
	resp, err := tr.RoundTrip(out)
	if err != nil {
		// The error may name the host, never a header value.
		p.lg.Info("egress injected request failed", zap.String("host", host), zap.Error(err))
		msg := "egress to " + hostport + " failed: " + err.Error() + "\n"
		var cv *tls.CertificateVerificationError
		if errors.As(err, &cv) {
			msg = "egress to " + hostport + " refused: the upstream certificate does not verify (" + err.Error() + ")\n"
		}
		msg = p.scrub(msg)
		_, _ = fmt.Fprintf(box, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\nX-Plumb-Egress: refused\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
		return false
	}
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	for k, vs := range resp.Header {
		for i, v := range vs {
			vs[i] = p.scrub(v)
		}
		resp.Header[k] = vs
	}
	// Scrubbing can change the length: the body goes chunked.
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.TransferEncoding = []string{"chunked"}
	resp.Body = io.NopCloser(newScrubber(resp.Body, p.cfg.Inject.secrets))
	resp.Close = req.Close
	if req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified || resp.StatusCode < 200 {
		resp.ContentLength, resp.TransferEncoding, resp.Body = 0, nil, http.NoBody
	}
	if err := resp.Write(box); err != nil {
		return false
	}
	return true
}

// scrub replaces every secret in s.
func (p *Proxy) scrub(s string) string {
	for _, v := range p.cfg.Inject.secrets {
		s = strings.ReplaceAll(s, v, Placeholder)
	}
	return s
}

// prefixConn reads from r (bytes already buffered, then the conn).
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// scrubber replaces every occurrence of its needles in a stream with
// Placeholder. It holds back at most the longest needle's length minus one
// byte, so a needle split across reads is still found.
type scrubber struct {
	src     io.Reader
	needles []string
	max     int
	pending []byte // raw bytes not yet scanned to the end
	out     []byte // scrubbed bytes ready for the reader
	eof     bool
}

func newScrubber(src io.Reader, needles []string) *scrubber {
	s := &scrubber{src: src}
	for _, n := range needles {
		if n != "" {
			s.needles = append(s.needles, n)
			s.max = max(s.max, len(n))
		}
	}
	return s
}

func (s *scrubber) Read(b []byte) (int, error) {
	for len(s.out) == 0 {
		if s.eof {
			return 0, io.EOF
		}
		var chunk [32 << 10]byte
		n, err := s.src.Read(chunk[:])
		s.pending = append(s.pending, chunk[:n]...)
		if err != nil {
			if err != io.EOF {
				return 0, err
			}
			s.eof = true
		}
		s.scan()
	}
	n := copy(b, s.out)
	s.out = s.out[n:]
	return n, nil
}

// longerMayFollow reports whether a needle longer than l could still
// match at pending[at:] once more bytes arrive.
func (s *scrubber) longerMayFollow(at, l int) bool {
	rest := string(s.pending[at:])
	for _, n := range s.needles {
		if len(n) > l && len(n) > len(rest) && strings.HasPrefix(n, rest) {
			return true
		}
	}
	return false
}

// scan moves to out every pending byte no needle can still begin at.
func (s *scrubber) scan() {
	for {
		at, l := -1, 0
		for _, n := range s.needles {
			if i := strings.Index(string(s.pending), n); i >= 0 && (at < 0 || i < at || i == at && len(n) > l) {
				at, l = i, len(n)
			}
		}
		if at < 0 || !s.eof && s.longerMayFollow(at, l) {
			break
		}
		s.out = append(s.out, s.pending[:at]...)
		s.out = append(s.out, Placeholder...)
		s.pending = s.pending[at+l:]
	}
	keep := 0
	if !s.eof && s.max > 0 {
		// A match waiting for a longer needle starts within the kept tail.
		keep = min(len(s.pending), s.max-1)
	}
	cut := len(s.pending) - keep
	s.out = append(s.out, s.pending[:cut]...)
	s.pending = append([]byte(nil), s.pending[cut:]...)
}

// NewCA returns a fresh CA (PEM certificate and PKCS#8 key) for one box,
// name constrained to hosts (ParseInjectHost entries): a certificate it
// signs for any other name does not verify.
func NewCA(hosts []string, validity time.Duration) (certPEM, keyPEM string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return "", "", err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "plumb egress box CA", Organization: []string{"plumb"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		host, _, err := ParseInjectHost(h)
		if err != nil {
			return "", "", err
		}
		if seen[host] {
			continue
		}
		seen[host] = true
		if a, err := netip.ParseAddr(host); err == nil {
			tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges, &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())})
		} else {
			tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, host)
		}
	}
	if len(seen) == 0 {
		return "", "", errors.New("a box CA needs at least one host")
	}
	// A constraint binds only the name types it names: close the other.
	if len(tmpl.PermittedIPRanges) == 0 {
		tmpl.ExcludedIPRanges = []*net.IPNet{{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, {IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}}
	}
	if len(tmpl.PermittedDNSDomains) == 0 {
		tmpl.PermittedDNSDomains = []string{"plumb.invalid"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})), nil
}
