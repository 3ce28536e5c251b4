package egress

import (
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/zap"
)

// FuzzParseGrant: no input panics, and a grant prints as text that parses
// back to itself.
func FuzzParseGrant(f *testing.F) {
	for _, s := range []string{"api.example.com:443", "[2001:db8::1]:443", "203.0.113.7:80", "*.x:1", "x", ":", "[::]:0", "a..b:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseGrant(s)
		if err != nil {
			return
		}
		if g.Port == 0 || g.Host == "" {
			t.Fatalf("ParseGrant(%q) = %+v", s, g)
		}
		again, err := ParseGrant(g.String())
		if err != nil || again != g {
			t.Fatalf("ParseGrant(%q) = %+v, printed %q parses to %+v, %v", s, g, g.String(), again, err)
		}
	})
}

// FuzzControlFrame: no frame a controller sends panics the proxy, and a
// grant never adds a rule that is not one host and one port.
func FuzzControlFrame(f *testing.F) {
	for _, s := range []string{`{"type":"grant","host":"a.example","port":443}`, `{"type":"decide","id":"x","allow":true,"remember":true}`,
		`{"type":"decide","host":"A.example.","port":1,"allow":true,"remember":true}`, `{"type":"config","timeout_ms":-5}`, `{"type":"sync"}`,
		`{"type":"grant","host":"*.a","port":1}`, `{"type":"grant","host":"fe80::1%eth0","port":1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var fr Frame
		if json.Unmarshal([]byte(s), &fr) != nil {
			return
		}
		a := newAsker(AskConfig{Timeout: time.Hour}, zap.NewNop())
		a.handle(fr)
		for _, r := range a.rules() {
			if r.Port == 0 || r.Host == "" || r.Host[0] == '*' {
				t.Fatalf("frame %q added rule %+v", s, r)
			}
			if _, ok := canonicalHost(r.Host); !ok {
				t.Fatalf("frame %q added a non-canonical host %q", s, r.Host)
			}
		}
	})
}
