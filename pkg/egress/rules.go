package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one allow-list entry: a host pattern or an address prefix,
// optionally bound to one port.
//
// Syntax (ParseRule):
//
//	example.com            exactly this host name, any port
//	*.example.com          any name under example.com (not example.com itself)
//	example.com:443        this name, port 443 only
//	203.0.113.7            this address (a /32 or /128)
//	203.0.113.0/24         any address in the prefix
//	203.0.113.0/24:443     the prefix, port 443 only
//	2001:db8::/32          an IPv6 prefix
//	[2001:db8::1]:443      an IPv6 address or prefix with a port
//
// A host pattern admits a name whose addresses are all public; only an
// address rule can admit a private, reserved or host address (the operator
// naming it on purpose), and nothing admits loopback, link-local or the
// metadata addresses. Only a host pattern admits a name: an address rule
// admits a destination given by address, and a name no host pattern
// matches is refused before it is resolved.
type Rule struct {
	// Host is a lower-case host pattern ("" for an address rule).
	Host string
	// Prefix is the address range of an address rule.
	Prefix netip.Prefix
	// Port limits the rule to one port (0 = any).
	Port uint16
}

// String returns the rule in ParseRule's syntax.
func (r Rule) String() string {
	var s string
	switch {
	case r.Host != "":
		s = r.Host
	case r.Port != 0 && r.Prefix.Addr().Is6():
		s = "[" + r.Prefix.String() + "]"
	default:
		s = r.Prefix.String()
	}
	if r.Port != 0 {
		s += ":" + strconv.Itoa(int(r.Port))
	}
	return s
}

// ParseRule parses one allow-list entry (see Rule for the syntax).
func ParseRule(s string) (Rule, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return Rule{}, fmt.Errorf("egress rule %q: empty", s)
	}
	if p, ok := parsePrefix(in); ok {
		return Rule{Prefix: p}, nil
	}
	host, port := in, ""
	if rest, ok := strings.CutPrefix(in, "["); ok {
		inner, after, found := strings.Cut(rest, "]")
		if !found || (after != "" && !strings.HasPrefix(after, ":")) {
			return Rule{}, fmt.Errorf("egress rule %q: want [address]:port", s)
		}
		host, port = inner, strings.TrimPrefix(after, ":")
		if after == "" {
			return Rule{}, fmt.Errorf("egress rule %q: brackets need a port", s)
		}
	} else if i := strings.LastIndexByte(in, ':'); i >= 0 {
		host, port = in[:i], in[i+1:]
	}
	var r Rule
	if port != "" || strings.HasSuffix(in, ":") {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return Rule{}, fmt.Errorf("egress rule %q: port %q is not 1..65535", s, port)
		}
		r.Port = uint16(n)
	}
	if p, ok := parsePrefix(host); ok {
		r.Prefix = p
		return r, nil
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if !validHostPattern(h) {
		return Rule{}, fmt.Errorf("egress rule %q: %q is neither a host name, *.domain, an address nor a prefix", s, host)
	}
	r.Host = h
	return r, nil
}

// ParseRules parses every entry; the error names the first bad one.
func ParseRules(entries []string) ([]Rule, error) {
	out := make([]Rule, 0, len(entries))
	for _, e := range entries {
		r, err := ParseRule(e)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// parsePrefix accepts an address (as a full-length prefix) or a prefix.
func parsePrefix(s string) (netip.Prefix, bool) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		if p.Addr().Is4In6() {
			if p.Bits() < 96 {
				return netip.Prefix{}, false
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), true
	}
	return netip.Prefix{}, false
}

func validHostPattern(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// matchHost reports whether host (lower case, no trailing dot) matches the
// pattern.
func matchHost(pattern, host string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(host, "."+suffix)
	}
	return pattern == host
}

func (r Rule) portOK(port uint16) bool { return r.Port == 0 || r.Port == port }

// Always-refused addresses: no rule admits them.
var alwaysRefused = []struct {
	p      netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "the cloud metadata address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "the cloud metadata address"},
	{netip.MustParsePrefix("100.100.100.200/32"), "a cloud metadata address"},
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified (\"this network\") address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "the broadcast address"},
	{netip.MustParsePrefix("::/128"), "the unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

// Private and reserved ranges: refused unless an address rule names them
// (IANA special-purpose registries, IPv4 and IPv6).
var special = []struct {
	p      netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("10.0.0.0/8"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (carrier-grade NAT) address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "a reserved (IETF protocol) address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a reserved (documentation) address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a reserved (documentation) address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a reserved (documentation) address"},
	{netip.MustParsePrefix("192.88.99.0/24"), "a reserved (6to4 relay) address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a reserved (benchmarking) address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("fc00::/7"), "a private (unique local) address"},
	{netip.MustParsePrefix("fec0::/10"), "a reserved (site-local) address"},
	{netip.MustParsePrefix("64:ff9b::/96"), "a NAT64 address (may map to a private IPv4 address)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a NAT64 address (may map to a private IPv4 address)"},
	{netip.MustParsePrefix("100::/64"), "a reserved (discard) address"},
	{netip.MustParsePrefix("2001::/23"), "a reserved (IETF protocol) address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a reserved (documentation) address"},
	{netip.MustParsePrefix("2002::/16"), "a 6to4 address (may map to a private IPv4 address)"},
	{netip.MustParsePrefix("::/96"), "a reserved (IPv4-compatible) address"},
}

// Policy decides which destinations the proxy may dial.
type Policy struct {
	// Allow is the operator's allow-list; empty admits every public
	// destination.
	Allow []Rule
	// Deny lists addresses refused unless an address rule of Allow names
	// them: the worker host's own addresses, other boxes' networks, the
	// operator's extra ranges.
	Deny []netip.Prefix
	// Granted are rules grants added (Host is a name or an address
	// literal, Port set): they admit like host patterns, never an inside
	// address, and only when Allow is not empty (an empty list admits
	// every public destination already).
	Granted []Rule
	// allowLoopback lets tests reach listeners on 127.0.0.1.
	allowLoopback bool
}

// Refusal is why a destination is refused; its text is the reason the
// client reads in the 403 body.
type Refusal struct {
	Host   string
	Port   uint16
	Addr   netip.Addr // zero when the refusal does not depend on an address
	Reason string
	// offList is set when the only reason is the allow-list (a refusal
	// asking may turn into a grant).
	offList bool
}

func offList(host string, port uint16) *Refusal {
	return &Refusal{Host: host, Port: port, Reason: "the destination is not on this worker's egress allow-list", offList: true}
}

func (r *Refusal) Error() string {
	if r.Addr.IsValid() {
		return fmt.Sprintf("egress to %s:%d refused: %s is %s", r.Host, r.Port, r.Addr, r.Reason)
	}
	return fmt.Sprintf("egress to %s:%d refused: %s", r.Host, r.Port, r.Reason)
}

// hostAllowed reports whether the allow-list admits host by name (an empty
// allow-list admits every name).
func (p *Policy) hostAllowed(host string, port uint16) bool {
	if len(p.Allow) == 0 {
		return true
	}
	for _, r := range p.Allow {
		if r.Host != "" && r.portOK(port) && matchHost(r.Host, host) {
			return true
		}
	}
	for _, r := range p.Granted {
		if r.portOK(port) && r.Host == host {
			return true
		}
	}
	return false
}

// addrAllowed reports whether an address rule admits a.
func (p *Policy) addrAllowed(a netip.Addr, port uint16) bool {
	for _, r := range p.Allow {
		if r.Host == "" && r.portOK(port) && r.Prefix.Contains(a) {
			return true
		}
	}
	return false
}

// Check decides whether the proxy may connect to addr for a request to
// host:port. host is the name the client asked for (an address literal
// when it asked for one).
func (p *Policy) Check(host string, port uint16, addr netip.Addr) error {
	a := addr.Unmap().WithZone("")
	refuse := func(reason string) error { return &Refusal{Host: host, Port: port, Addr: a, Reason: reason} }
	for _, s := range alwaysRefused {
		if s.p.Contains(a) && !(p.allowLoopback && a.IsLoopback()) {
			return refuse(s.reason)
		}
	}
	if p.addrAllowed(a, port) {
		return nil
	}
	if !p.hostAllowed(host, port) {
		return offList(host, port)
	}
	if p.allowLoopback && a.IsLoopback() {
		return nil
	}
	for _, s := range special {
		if s.p.Contains(a) {
			return refuse(s.reason)
		}
	}
	for _, d := range p.Deny {
		if d.Contains(a) {
			return refuse("an address of this worker's host or of its sandboxes")
		}
	}
	return nil
}
