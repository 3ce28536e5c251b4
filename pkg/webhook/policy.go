package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrRefused is the error of a URL or address the policy does not allow.
var ErrRefused = errors.New("webhook destination refused")

// MaxURLLength bounds a webhook URL.
const MaxURLLength = 2048

// Policy is the operator's rule for where webhooks may go (agentd's
// `webhooks:` section). The zero Policy allows https to public addresses
// only.
type Policy struct {
	// AllowHTTP allows http:// URLs (https only otherwise).
	AllowHTTP bool
	// AllowPrivateNetworks allows private unicast ranges (RFC 1918,
	// RFC 6598 shared space, IPv6 unique local). Loopback, link-local
	// (where cloud metadata lives), unspecified, multicast and reserved
	// addresses still need Allow.
	AllowPrivateNetworks bool
	// Allow are CIDRs that are allowed whatever they are (127.0.0.0/8 for
	// a receiver on the same host).
	Allow []netip.Prefix
	// AllowHosts are host names (exact, lower case) whose addresses are
	// all allowed.
	AllowHosts []string
}

// ParseAllow splits allow entries into CIDRs (an address alone is a /32
// or /128) and host names.
func ParseAllow(entries []string) ([]netip.Prefix, []string, error) {
	var (
		cidrs []netip.Prefix
		hosts []string
	)
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if p, err := netip.ParsePrefix(e); err == nil {
			cidrs = append(cidrs, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(e); err == nil {
			cidrs = append(cidrs, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		if e == "" || strings.ContainsAny(e, "/:@ ") {
			return nil, nil, fmt.Errorf("%q is neither a CIDR, an address nor a host name", e)
		}
		hosts = append(hosts, strings.ToLower(strings.TrimSuffix(e, ".")))
	}
	return cidrs, hosts, nil
}

// reserved are ranges that are never a public receiver.
var reserved = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// shared is RFC 6598 carrier-grade NAT space: private for this policy.
var shared = netip.MustParsePrefix("100.64.0.0/10")

// CheckAddr returns nil when the policy allows a connection to a.
func (p Policy) CheckAddr(a netip.Addr) error {
	a = a.Unmap()
	for _, c := range p.Allow {
		if c.Contains(a) {
			return nil
		}
	}
	what := ""
	switch {
	case !a.IsValid():
		what = "an invalid address"
	case a.IsUnspecified():
		what = "an unspecified address"
	case a.IsLoopback():
		what = "a loopback address"
	case a.IsLinkLocalUnicast():
		what = "a link-local address (cloud metadata lives there)"
	case a.IsMulticast() || a.IsInterfaceLocalMulticast() || a.IsLinkLocalMulticast():
		what = "a multicast address"
	case a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		what = "the broadcast address"
	case (a.IsPrivate() || shared.Contains(a)) && !p.AllowPrivateNetworks:
		what = "a private address"
	case !a.IsGlobalUnicast():
		what = "not a unicast address"
	}
	if what == "" {
		for _, r := range reserved {
			if r.Contains(a) {
				what = "a reserved address"
				break
			}
		}
	}
	if what != "" {
		return fmt.Errorf("%w: %s is %s", ErrRefused, a, what)
	}
	return nil
}

func (p Policy) hostAllowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range p.AllowHosts {
		if h == host {
			return true
		}
	}
	return false
}

// CheckURL parses a webhook URL and checks what can be checked without
// the network: absolute, http(s) as allowed, a host, no user info, and a
// literal address the policy allows. Host names are checked by Resolve
// and again at dial time.
func (p Policy) CheckURL(raw string) (*url.URL, error) {
	if raw == "" || len(raw) > MaxURLLength {
		return nil, fmt.Errorf("%w: a webhook URL has 1..%d bytes", ErrRefused, MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && p.AllowHTTP:
	case u.Scheme == "http":
		return nil, fmt.Errorf("%w: http is not allowed here; use https", ErrRefused)
	default:
		return nil, fmt.Errorf("%w: scheme %q; want https", ErrRefused, u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" || u.Opaque != "" {
		return nil, fmt.Errorf("%w: the URL has no host", ErrRefused)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: user info in a webhook URL", ErrRefused)
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("%w: a fragment in a webhook URL", ErrRefused)
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		if err := p.CheckAddr(a); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// Resolve checks a URL's host name with r: every address it resolves to
// must be allowed (a host of AllowHosts always is). It is the early check,
// when a request names the URL; the dial-time check in Client is the one
// that holds.
func (p Policy) Resolve(ctx context.Context, r *net.Resolver, u *url.URL) error {
	host := u.Hostname()
	if _, err := netip.ParseAddr(host); err == nil || p.hostAllowed(host) {
		return nil
	}
	if r == nil {
		r = net.DefaultResolver
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("%w: resolve %s: %v", ErrRefused, host, err)
	}
	for _, a := range addrs {
		if err := p.CheckAddr(a); err != nil {
			return fmt.Errorf("%s resolves to %w", host, err)
		}
	}
	return nil
}

// Client returns the HTTP client deliveries go through: every connection's
// address is checked when it is dialled (after DNS resolution, so a name
// that resolves to a public address once and to 127.0.0.1 the next time
// cannot get in), no proxy from the environment, no redirects followed
// (a 3xx is an answer, and not a success), each request bounded by
// timeout. resolver, if set, resolves host names (tests).
func (p Policy) Client(timeout time.Duration, resolver *net.Resolver) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           p.dialContext(resolver),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func (p Policy) dialContext(resolver *net.Resolver) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		trusted := p.hostAllowed(host)
		d := &net.Dialer{
			Timeout:  30 * time.Second,
			Resolver: resolver,
			Control: func(_, address string, _ syscall.RawConn) error {
				if trusted {
					return nil
				}
				ap, err := netip.ParseAddrPort(address)
				if err != nil {
					return fmt.Errorf("%w: dial %s: %v", ErrRefused, address, err)
				}
				return p.CheckAddr(ap.Addr())
			},
		}
		return d.DialContext(ctx, network, addr)
	}
}
