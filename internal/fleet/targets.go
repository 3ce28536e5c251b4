package fleet

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// dnsScheme prefixes a target that names a DNS name to re-resolve.
const dnsScheme = "dns:///"

// target is one parsed entry of the --sandboxd list.
type target struct {
	// addr is a static "host:port"; empty for a DNS target.
	addr string
	// host and port of a DNS target.
	host, port string
}

func (t target) String() string {
	if t.addr != "" {
		return t.addr
	}
	return dnsScheme + net.JoinHostPort(t.host, t.port)
}

// ParseTargets splits a comma-separated worker list ("host:port" and
// "dns:///name:port" entries; blanks ignored) and checks every entry. The
// error names the first bad entry.
func ParseTargets(list string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if _, err := parseTarget(s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func parseTarget(s string) (target, error) {
	rest, isDNS := strings.CutPrefix(s, dnsScheme)
	if !isDNS && strings.Contains(s, "://") {
		return target{}, fmt.Errorf("sandboxd target %q: want host:port or dns:///name:port", s)
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return target{}, fmt.Errorf("sandboxd target %q: want host:port or dns:///name:port: %v", s, err)
	}
	if host == "" || strings.ContainsAny(host, "/ \t") {
		return target{}, fmt.Errorf("sandboxd target %q: missing or bad host", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return target{}, fmt.Errorf("sandboxd target %q: port %q is not a number from 1 to 65535", s, port)
	}
	if isDNS {
		return target{host: host, port: port}, nil
	}
	return target{addr: net.JoinHostPort(host, port)}, nil
}
