package fleet

import (
	"strings"
	"testing"
)

func TestParseTargets(t *testing.T) {
	for _, tt := range []struct {
		in, want, err string
	}{
		{in: "127.0.0.1:7071", want: "127.0.0.1:7071"},
		{in: " a:1 , dns:///sandboxd.plumb.svc.cluster.local:7071,, [::1]:9 ", want: "a:1|dns:///sandboxd.plumb.svc.cluster.local:7071|[::1]:9"},
		{in: "", want: ""},
		{in: "broken", err: `sandboxd target "broken": want host:port or dns:///name:port`},
		{in: "dns:///sandboxd", err: `sandboxd target "dns:///sandboxd"`},
		{in: "dns://8.8.8.8/sandboxd:1", err: `want host:port or dns:///name:port`},
		{in: "unix:///run/s.sock", err: `sandboxd target "unix:///run/s.sock"`},
		{in: "a:0", err: `port "0" is not a number from 1 to 65535`},
		{in: "a:99999", err: `port "99999"`},
		{in: ":7071", err: "missing or bad host"},
		{in: "dns:///a b:1", err: "missing or bad host"},
	} {
		got, err := ParseTargets(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseTargets(%q) = %v, %v; want error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || strings.Join(got, "|") != tt.want {
			t.Errorf("ParseTargets(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// FuzzParseTargets: any input either fails with a message naming the
// sandboxd target, or yields entries that parse again on their own.
func FuzzParseTargets(f *testing.F) {
	for _, s := range []string{"127.0.0.1:7071", "dns:///sandboxd:7071,10.0.0.2:1", "broken", "dns:///:1", "[::1]:7071", "a:b:c", "dns:///x:65536"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseTargets(in)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "sandboxd target ") {
				t.Fatalf("error %q does not name the target", err)
			}
			return
		}
		for _, s := range got {
			if _, err := parseTarget(s); err != nil {
				t.Fatalf("entry %q of %q does not parse again: %v", s, in, err)
			}
			if strings.Contains(s, ",") {
				t.Fatalf("entry %q holds a comma", s)
			}
		}
	})
}
