package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/plumbhq/plumb/pkg/webhook"
)

func TestSignVerify(t *testing.T) {
	oldKey, err := webhook.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	newKey, _ := webhook.NewKey()
	if !strings.HasPrefix(newKey, webhook.KeyPrefix) || newKey == oldKey {
		t.Fatalf("keys %q, %q", oldKey, newKey)
	}
	body := []byte(`{"id":"whd_1","type":"run.succeeded"}`)
	now := time.Unix(1_800_000_000, 0)
	header := webhook.Sign(body, now, newKey, oldKey)

	// An independent computation of the first v1 value.
	m := hmac.New(sha256.New, []byte(newKey))
	fmt.Fprintf(m, "%d.%s", now.Unix(), body)
	if want := fmt.Sprintf("t=%d,v1=%s,", now.Unix(), hex.EncodeToString(m.Sum(nil))); !strings.HasPrefix(header, want) {
		t.Fatalf("header %q; want it to start with %q", header, want)
	}
	if n := strings.Count(header, "v1="); n != 2 {
		t.Fatalf("header %q has %d v1 values; want 2 during a rotation", header, n)
	}
	tests := []struct {
		name   string
		header string
		body   []byte
		keys   []string
		now    time.Time
		want   error
	}{
		{"new key", header, body, []string{newKey}, now, nil},
		{"old key", header, body, []string{oldKey}, now, nil},
		{"either", header, body, []string{"whsec_other", oldKey}, now.Add(4 * time.Minute), nil},
		{"wrong key", header, body, []string{"whsec_other"}, now, webhook.ErrNoMatch},
		{"changed body", header, append([]byte(" "), body...), []string{newKey}, now, webhook.ErrNoMatch},
		{"too old", header, body, []string{newKey}, now.Add(6 * time.Minute), webhook.ErrTooOld},
		{"from the future", header, body, []string{newKey}, now.Add(-6 * time.Minute), webhook.ErrTooOld},
		{"no t", "v1=00", body, []string{newKey}, now, webhook.ErrBadHeader},
		{"no v1", fmt.Sprintf("t=%d", now.Unix()), body, []string{newKey}, now, webhook.ErrBadHeader},
		{"bad hex", fmt.Sprintf("t=%d,v1=zz", now.Unix()), body, []string{newKey}, now, webhook.ErrBadHeader},
		{"garbage", "nonsense", body, []string{newKey}, now, webhook.ErrBadHeader},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := webhook.Verify(tc.header, tc.body, tc.keys, 5*time.Minute, tc.now); !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v; want %v", err, tc.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	first, maxd := 5*time.Second, time.Minute
	tests := []struct {
		attempts int
		rnd      float64
		want     time.Duration
	}{
		{1, 0, 2500 * time.Millisecond},
		{1, 0.999999, 5 * time.Second},
		{2, 0, 5 * time.Second},
		{3, 0.5, 15 * time.Second},
		{4, 0, 20 * time.Second},
		{5, 0, 30 * time.Second}, // capped at a minute, half of it fixed
		{50, 0, 30 * time.Second},
		{0, 0, 2500 * time.Millisecond},
	}
	for _, tc := range tests {
		got := webhook.Backoff(tc.attempts, first, maxd, func() float64 { return tc.rnd })
		if got.Round(time.Millisecond) != tc.want {
			t.Errorf("Backoff(%d, rnd %v) = %v; want %v", tc.attempts, tc.rnd, got, tc.want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	loop := netip.MustParsePrefix("127.0.0.0/8")
	tests := []struct {
		name   string
		policy webhook.Policy
		url    string
		ok     bool
	}{
		{"public https", webhook.Policy{}, "https://hooks.example.com/x", true},
		{"public address", webhook.Policy{}, "https://93.184.216.34/x", true},
		{"http refused", webhook.Policy{}, "http://hooks.example.com/x", false},
		{"http allowed", webhook.Policy{AllowHTTP: true}, "http://hooks.example.com/x", true},
		{"ftp", webhook.Policy{AllowHTTP: true}, "ftp://hooks.example.com/x", false},
		{"relative", webhook.Policy{}, "/x", false},
		{"empty", webhook.Policy{}, "", false},
		{"user info", webhook.Policy{}, "https://u:p@hooks.example.com/", false},
		{"loopback", webhook.Policy{}, "https://127.0.0.1/x", false},
		{"loopback v6", webhook.Policy{}, "https://[::1]/x", false},
		{"mapped loopback", webhook.Policy{}, "https://[::ffff:127.0.0.1]/x", false},
		{"metadata", webhook.Policy{}, "https://169.254.169.254/latest/meta-data", false},
		{"metadata with private allowed", webhook.Policy{AllowPrivateNetworks: true}, "https://169.254.169.254/", false},
		{"link-local v6", webhook.Policy{}, "https://[fe80::1]/", false},
		{"private", webhook.Policy{}, "https://10.1.2.3/", false},
		{"private 192.168", webhook.Policy{}, "https://192.168.0.10/", false},
		{"private allowed", webhook.Policy{AllowPrivateNetworks: true}, "https://10.1.2.3/", true},
		{"shared space", webhook.Policy{}, "https://100.64.0.1/", false},
		{"unique local v6", webhook.Policy{}, "https://[fd00::1]/", false},
		{"unspecified", webhook.Policy{}, "https://0.0.0.0/", false},
		{"multicast", webhook.Policy{}, "https://224.0.0.1/", false},
		{"broadcast", webhook.Policy{}, "https://255.255.255.255/", false},
		{"documentation", webhook.Policy{}, "https://192.0.2.1/", false},
		{"loopback allowed by CIDR", webhook.Policy{Allow: []netip.Prefix{loop}}, "https://127.0.0.1:8443/x", true},
		{"another loopback CIDR", webhook.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}, "https://127.0.0.1/", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.policy.CheckURL(tc.url)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckURL(%q) = %v; want ok=%v", tc.url, err, tc.ok)
			}
			if err != nil && !errors.Is(err, webhook.ErrRefused) {
				t.Fatalf("CheckURL(%q) = %v; want ErrRefused", tc.url, err)
			}
		})
	}
}

func TestParseAllow(t *testing.T) {
	cidrs, hosts, err := webhook.ParseAllow([]string{"127.0.0.0/8", "10.0.0.5", "::1", "Hooks.Internal."})
	if err != nil {
		t.Fatal(err)
	}
	if len(cidrs) != 3 || cidrs[1].String() != "10.0.0.5/32" || cidrs[2].String() != "::1/128" || len(hosts) != 1 || hosts[0] != "hooks.internal" {
		t.Fatalf("ParseAllow = %v, %v", cidrs, hosts)
	}
	for _, bad := range []string{"", "http://x", "a b", "user@host"} {
		if _, _, err := webhook.ParseAllow([]string{bad}); err == nil {
			t.Errorf("ParseAllow(%q) accepted it", bad)
		}
	}
}

// TestClientDialTimeCheck: the delivery client refuses a connection to a
// loopback receiver by default, also when the URL names a host that
// resolves there (localhost: a DNS rebinding stand-in, the URL check
// alone passes it), allows it with the CIDR allowed or the host named,
// and never follows a redirect.
func TestClientDialTimeCheck(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/target", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	byName := "http://localhost:" + u.Port()
	loop := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	tests := []struct {
		name   string
		policy webhook.Policy
		url    string
		ok     bool
	}{
		{"loopback address", webhook.Policy{AllowHTTP: true}, srv.URL, false},
		{"name resolving to loopback", webhook.Policy{AllowHTTP: true}, byName, false},
		{"loopback allowed", webhook.Policy{AllowHTTP: true, Allow: loop}, srv.URL, true},
		{"name allowed", webhook.Policy{AllowHTTP: true, AllowHosts: []string{"localhost"}}, byName, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := hits
			if _, err := tc.policy.CheckURL(tc.url); err != nil && tc.ok {
				t.Fatalf("CheckURL: %v", err)
			}
			if tc.name == "name resolving to loopback" {
				pu, _ := url.Parse(tc.url)
				if err := tc.policy.Resolve(context.Background(), nil, pu); !errors.Is(err, webhook.ErrRefused) {
					t.Errorf("Resolve(%s) = %v; want ErrRefused", tc.url, err)
				}
			}
			c := tc.policy.Client(30*time.Second, nil)
			resp, err := c.Post(tc.url+"/hook", "application/json", strings.NewReader("{}"))
			if resp != nil {
				resp.Body.Close()
			}
			if tc.ok {
				if err != nil || resp.StatusCode != http.StatusNoContent {
					t.Fatalf("POST = %v, %v; want 204", resp, err)
				}
				return
			}
			if !errors.Is(err, webhook.ErrRefused) || hits != before {
				t.Fatalf("POST = %v (hits %d→%d); want ErrRefused before any request", err, before, hits)
			}
		})
	}
	c := webhook.Policy{AllowHTTP: true, Allow: loop}.Client(30*time.Second, nil)
	resp, err := c.Get(srv.URL + "/redirect")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("redirect answered %d; want the 302 itself, not followed", resp.StatusCode)
	}
}
